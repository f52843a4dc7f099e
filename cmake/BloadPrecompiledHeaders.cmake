# bload_precompile_headers(TARGET HEADER...): HEADER... parsed once for TARGET, not once per source.
#
# Most of the time spent compiling one of bload's sources goes to parsing torch's headers (about
# 20 s a file on a small machine, against a second or two for bload's own code), and `make test`
# compiles the library three times (build/, the Python package's build, test-prebuilt's). A
# precompiled header per target (CMake's target_precompile_headers) parses them once. Each target
# gets its own: GCC refuses a precompiled header made with other flags (-fPIC, visibility), so the
# library's cannot serve the executables. Headers are listed where each target is defined.
#
# -DBLOAD_PRECOMPILED_HEADERS=OFF compiles every source on its own includes, as a consumer
# including one header at a time would: the way to check that a source includes what it uses.
option(BLOAD_PRECOMPILED_HEADERS "Precompile the torch headers each target's sources share" ON)

function(bload_precompile_headers target)
  if(BLOAD_PRECOMPILED_HEADERS)
    target_precompile_headers(${target} PRIVATE ${ARGN})
  endif()
endfunction()

# bload_reuse_headers(OWNER TARGET...): each TARGET reads OWNER's precompiled header rather than
# parsing torch's headers again. GCC takes a precompiled header only where the flags and macros
# are those it was made with: TARGET must have OWNER's (here: an executable of one source that
# links bload::bload alone), or -Winvalid-pch says why it was not used and the build fails.
function(bload_reuse_headers owner)
  if(BLOAD_PRECOMPILED_HEADERS)
    foreach(target IN LISTS ARGN)
      target_precompile_headers(${target} REUSE_FROM ${owner})
    endforeach()
  endif()
endfunction()
