// bload::ItemPool's options (bload/item_pool.h), each checked where it is set; the pool that
// runs with them is item_pool.cpp's.
#include <c10/util/Exception.h>

#include <utility>

#include "bload/item_pool.h"
#include "rust_bridge.h"

namespace bload {

int64_t default_items_per_worker() { return ffi::item_pool_bounds()[0]; }
int64_t max_pool_workers() { return ffi::item_pool_bounds()[1]; }

ItemPool::ItemPool(int64_t workers) : workers_(workers) {
  TORCH_CHECK(workers >= 1 && workers <= max_pool_workers(), "workers = ", workers,
              ": expected an int from 1 to ", max_pool_workers(), " threads");
}

ItemPool& ItemPool::max_items(int64_t value) {
  TORCH_CHECK(value >= 1, "max_items = ", value, ": expected at least 1 item");
  max_items_ = value;
  return *this;
}

int64_t ItemPool::max_items() const {
  return max_items_.value_or(workers_ * default_items_per_worker());
}

ItemPool& ItemPool::max_bytes(int64_t value) {
  TORCH_CHECK(value >= 1, "max_bytes = ", value, ": expected at least 1 byte");
  max_bytes_ = value;
  return *this;
}

ItemPool& ItemPool::cost(Cost value) {
  cost_ = std::move(value);
  return *this;
}

}  // namespace bload
