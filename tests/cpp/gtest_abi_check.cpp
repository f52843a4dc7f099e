// Configure-time check (tests/cpp/CMakeLists.txt): links only where the GoogleTest library and
// torch's flags agree on std::string's ABI (_GLIBCXX_USE_CXX11_ABI), as RecordProperty takes
// std::string parameters and lives in libgtest.
#include <gtest/gtest.h>

TEST(Abi, Check) { testing::Test::RecordProperty("abi", "check"); }
