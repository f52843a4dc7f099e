// The torch release libbload.so was built against, for loaders outside Python (the Rust
// `bload::tch::load_plugin`) to refuse a library built for another torch before using it.

#include <torch/version.h>

#include "bload/export.h"

extern "C" BLOAD_API const char* bload_torch_version() { return TORCH_VERSION; }
