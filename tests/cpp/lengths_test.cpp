// bload::read_lengths: each tricky file of tests/data/lengths reads as expected.txt says, or is
// refused naming the same line: the file that the Python and CLI tests
// (tests/python/test_lengths_files.py) check against too, so the format means one thing everywhere.

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "bload/planner.h"

namespace lengths_test {
namespace {

struct Case {
  std::string name;
  std::vector<std::string> values;  // the lengths, or "error" and the line refused
};

std::vector<Case> expected_cases() {
  std::ifstream file(BLOAD_LENGTHS_CASES "/expected.txt");
  std::vector<Case> cases;
  std::string line;
  while (std::getline(file, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto colon = line.find(": ");
    Case c{line.substr(0, colon), {}};
    std::istringstream values(line.substr(colon + 2));
    for (std::string value; values >> value;) c.values.push_back(value);
    cases.push_back(c);
  }
  return cases;
}

TEST(ReadLengths, EachTrickyFileReadsAsExpectedEverywhere) {
  const auto cases = expected_cases();
  ASSERT_GE(cases.size(), 5u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = BLOAD_LENGTHS_CASES "/" + c.name;
    if (c.values[0] == "error") {
      std::string message;
      try {
        bload::read_lengths(path);
      } catch (const c10::Error& error) {
        message = error.what_without_backtrace();
      }
      ASSERT_FALSE(message.empty()) << "not refused";
      // `FILE:LINE = ...` names a line, `FILE = ...` the whole file (line 0).
      std::smatch found;
      ASSERT_TRUE(std::regex_search(message, found, std::regex(":(\\d+) = |\\.lengths = ")))
          << message;
      const std::string line = found[1].matched ? found[1].str() : "0";
      EXPECT_EQ(line, c.values[1]) << message;
    } else {
      std::vector<int64_t> expected;
      for (const auto& value : c.values) expected.push_back(std::stoll(value));
      EXPECT_EQ(bload::read_lengths(path), expected);
    }
  }
}

}  // namespace

}  // namespace lengths_test
