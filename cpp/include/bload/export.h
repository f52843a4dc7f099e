#pragma once
// libbload.so is built with hidden visibility: only what is marked BLOAD_API is exported, so the
// torch templates it instantiates and the Rust code inside it stay private to it.
#define BLOAD_API __attribute__((visibility("default")))
