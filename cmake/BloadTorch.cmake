# Defines bload::torch: libtorch's headers, libraries and compile flags, for bload and for the
# projects that use it (bloadConfig.cmake includes this file, so they find torch the same way).
#
# Where find_package(Torch) works (a libtorch download, or a CUDA toolkit beside a CUDA build) it
# is used. PyPI's torch wheels are CUDA builds whose TorchConfig aborts when no CUDA toolkit is
# installed, and that abort cannot be caught, so a child CMake tries it first; where it fails,
# the paths come from Python's torch instead. Set BLOAD_TORCH_FROM_PYTHON to choose.
# BLOAD_TORCH_CUDA is set ON where torch is a CUDA build (the DDP trainer then builds with NCCL).

if(TARGET bload::torch)
  return()
endif()

find_package(Python3 COMPONENTS Interpreter QUIET)

set(_bload_which_python
    "pass -DPython3_EXECUTABLE=/path/to/python of the environment whose torch to build against "
    "(or -DTorch_DIR=/path/to/libtorch/share/cmake/Torch)")

# Runs `code` in Python3_EXECUTABLE. pip's isolated build environment (`pip install .`) hides the
# environment's own packages through PYTHONPATH, and torch must come from there, never from a
# fresh copy: where the first try cannot import torch, a second runs without PYTHONPATH.
function(_bload_python_torch code out_var)
  if(NOT Python3_FOUND)
    message(FATAL_ERROR "bload: no Python interpreter found to ask where torch is: "
                        ${_bload_which_python})
  endif()
  execute_process(COMMAND "${Python3_EXECUTABLE}" -c "${code}" OUTPUT_VARIABLE output
                  ERROR_VARIABLE error RESULT_VARIABLE failed OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(failed AND DEFINED ENV{PYTHONPATH})
    execute_process(COMMAND "${CMAKE_COMMAND}" -E env --unset=PYTHONPATH --unset=PYTHONNOUSERSITE
                            "${Python3_EXECUTABLE}" -c "${code}"
                    OUTPUT_VARIABLE output ERROR_VARIABLE error RESULT_VARIABLE failed
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
  endif()
  if(failed)
    message(FATAL_ERROR "bload: ${Python3_EXECUTABLE} could not import torch: "
                        ${_bload_which_python} ".\n${error}")
  endif()
  set(${out_var} "${output}" PARENT_SCOPE)
endfunction()

if(NOT Torch_DIR AND NOT DEFINED BLOAD_TORCH_CMAKE_PREFIX)
  _bload_python_torch("import torch.utils; print(torch.utils.cmake_prefix_path)" prefix)
  set(BLOAD_TORCH_CMAKE_PREFIX "${prefix}" CACHE PATH "Where Python's torch keeps TorchConfig.cmake")
endif()
if(BLOAD_TORCH_CMAKE_PREFIX)
  list(APPEND CMAKE_PREFIX_PATH "${BLOAD_TORCH_CMAKE_PREFIX}")
endif()

if(NOT DEFINED BLOAD_TORCH_FROM_PYTHON)
  set(probe_dir "${CMAKE_BINARY_DIR}/bload_torch_probe")
  message(STATUS "bload: checking whether find_package(Torch) works here")
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -S "${CMAKE_CURRENT_LIST_DIR}/torch_probe" -B "${probe_dir}"
            -G "${CMAKE_GENERATOR}" "-DCMAKE_PREFIX_PATH=${CMAKE_PREFIX_PATH}"
            "-DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}" "-DTorch_DIR=${Torch_DIR}"
    OUTPUT_QUIET ERROR_QUIET RESULT_VARIABLE probe_failed)
  file(REMOVE_RECURSE "${probe_dir}")
  if(probe_failed)
    set(from_python ON)
  else()
    set(from_python OFF)
  endif()
  set(BLOAD_TORCH_FROM_PYTHON ${from_python} CACHE BOOL
      "Take torch's paths from Python instead of find_package(Torch)")
endif()

add_library(bload::torch INTERFACE IMPORTED)

if(NOT BLOAD_TORCH_FROM_PYTHON)
  find_package(Torch REQUIRED)
  message(STATUS "bload: torch ${Torch_VERSION} from find_package(Torch) in ${Torch_DIR}")
  set(BLOAD_TORCH_VERSION "${Torch_VERSION}")
  set(BLOAD_TORCH_ROOT "${TORCH_INSTALL_PREFIX}")
  target_link_libraries(bload::torch INTERFACE ${TORCH_LIBRARIES})
  if(TORCH_CUDA_LIBRARIES)
    set(BLOAD_TORCH_CUDA ON)
  endif()
  target_include_directories(bload::torch INTERFACE ${TORCH_INCLUDE_DIRS})
  separate_arguments(torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  target_compile_options(bload::torch INTERFACE ${torch_flags})
else()
  _bload_python_torch(
    "import torch, os; from torch.utils import cpp_extension as c
print(';'.join(c.include_paths())); print(os.path.join(os.path.dirname(torch.__file__), 'lib'))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI)); print(torch.__version__)"
    answer)
  string(REPLACE "\n" ";" answer "${answer}")
  list(GET answer -1 torch_version)
  list(GET answer -2 cxx11_abi)
  list(GET answer -3 torch_lib_dir)
  list(REMOVE_AT answer -1 -2 -3)
  set(BLOAD_TORCH_VERSION "${torch_version}")
  get_filename_component(BLOAD_TORCH_ROOT "${torch_lib_dir}" DIRECTORY)
  message(STATUS "bload: torch ${torch_version} from Python (${Python3_EXECUTABLE}), libraries in "
                 "${torch_lib_dir}")
  target_include_directories(bload::torch INTERFACE ${answer})
  target_compile_definitions(bload::torch INTERFACE _GLIBCXX_USE_CXX11_ABI=${cxx11_abi})
  foreach(name torch torch_cpu c10 torch_cuda c10_cuda)
    find_library(bload_lib_${name} NAMES ${name} PATHS "${torch_lib_dir}" NO_DEFAULT_PATH)
    if(NOT bload_lib_${name} AND name MATCHES "^(torch|torch_cpu|c10)$")
      message(FATAL_ERROR "bload: lib${name}.so not found in ${torch_lib_dir}")
    elseif(bload_lib_${name} AND name MATCHES "cuda")
      # CUDA kernels register themselves when their library loads, so it must be loaded even
      # though nothing calls into it directly (a linker with --as-needed would drop it).
      target_link_libraries(bload::torch INTERFACE "-Wl,--no-as-needed,${bload_lib_${name}}")
      set(BLOAD_TORCH_CUDA ON)
    elseif(bload_lib_${name})
      target_link_libraries(bload::torch INTERFACE "${bload_lib_${name}}")
    endif()
  endforeach()
endif()
