// What libbload.so is: bload's version, and the torch release it was built against. The C entry
// points serve loaders outside C++: Python reads bload_version() for bload.__version__, and the
// Rust `bload::tch::load_plugin` reads bload_torch_version() to refuse a library built for another
// torch before using it.

#include <torch/version.h>

#include "bload/export.h"
#include "bload/version.h"

// CMakeLists.txt defines it from Cargo.toml's version, the one place it is written.
#ifndef BLOAD_VERSION
#error "BLOAD_VERSION is not defined: build libbload.so through CMakeLists.txt"
#endif

namespace bload {

const char* version() { return BLOAD_VERSION; }

}  // namespace bload

extern "C" BLOAD_API const char* bload_version() { return bload::version(); }

extern "C" BLOAD_API const char* bload_torch_version() { return TORCH_VERSION; }
