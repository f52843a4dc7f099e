// torch.ops.bload's host utilities that name what the core declares, so that Python and
// TorchScript take these lists from the core rather than writing them again: the packed batch's
// fields, the policies, and the bounds of the int64 options. Each schema is registered here with
// its one kernel (there is no tensor to dispatch on).

#include <torch/library.h>

#include <string>
#include <tuple>
#include <vector>

#include "../rust_bridge.h"
#include "bload/ops.h"

namespace bload {
namespace {

using Strings = std::vector<std::string>;

// The packed batch's fields in order: names, dtypes ("loaded" for the dataset's own), shape
// rules, whether batch_tables writes them, and what each holds.
std::tuple<Strings, Strings, Strings, c10::List<bool>, Strings> batch_fields_op() {
  std::tuple<Strings, Strings, Strings, c10::List<bool>, Strings> fields;
  auto& [names, dtypes, shapes, from_table, docs] = fields;
  for (const auto& field : ffi::batch_fields()) {
    names.emplace_back(field.name);
    dtypes.emplace_back(field.dtype);
    shapes.emplace_back(field.shape);
    from_table.push_back(field.from_table);
    docs.emplace_back(field.doc);
  }
  return fields;
}

// The int64 options' bounds: names, lowest and highest values.
std::tuple<Strings, std::vector<int64_t>, std::vector<int64_t>> option_bounds_op() {
  std::tuple<Strings, std::vector<int64_t>, std::vector<int64_t>> bounds;
  auto& [names, lows, highs] = bounds;
  for (const auto& bound : ffi::option_bounds()) {
    names.emplace_back(bound.name);
    lows.push_back(bound.low);
    highs.push_back(bound.high);
  }
  return bounds;
}

// The lengths formats in the core's order, and whether the core reads each (Python reads the
// others, with pyarrow).
std::tuple<Strings, c10::List<bool>> lengths_formats_op() {
  std::tuple<Strings, c10::List<bool>> formats;
  auto& [names, read_by_core] = formats;
  for (const auto& format : ffi::lengths_formats()) {
    names.emplace_back(format.name);
    read_by_core.push_back(format.read_by_core);
  }
  return formats;
}

}  // namespace

std::vector<std::string> policy_names() {
  std::vector<std::string> names;
  for (const auto& name : ffi::policy_names()) names.emplace_back(name);
  return names;
}

TORCH_LIBRARY_FRAGMENT(bload, m) {
  m.def(
      "batch_fields() -> (str[] names, str[] dtypes, str[] shapes, bool[] from_table, "
      "str[] docs)",
      &batch_fields_op);
  m.def("policy_names() -> str[]", &policy_names);
  m.def("option_bounds() -> (str[] names, int[] lows, int[] highs)", &option_bounds_op);
  m.def("lengths_formats() -> (str[] names, bool[] read_by_core)", &lengths_formats_op);
}

}  // namespace bload
