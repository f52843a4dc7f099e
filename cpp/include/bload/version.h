#pragma once
// bload's version, "X.Y.Z": the one version of its C++ API, its Python package, its command line
// and its CMake package, read from Cargo.toml when the library is built (docs/versioning.md says
// what a change of each part means). A consumer asks for a release when it configures, with
// find_package(bload 0.2); this says which one it runs with.

#include "bload/export.h"

namespace bload {

// The version of the libbload.so this process loaded (not of the headers it was compiled with).
BLOAD_API const char* version();

}  // namespace bload
