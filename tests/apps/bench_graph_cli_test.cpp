// `stoke bench graph`, run as a program on a few thousand items: a --threads sweep measures each
// count (a JSON line each, in order), and a bad list is a usage error naming the option. No timing
// is asserted: the figures depend on the machine.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_test_support.hpp"
#include "dataset_test_support.hpp"

namespace stoke {
namespace {

using ::testing::HasSubstr;
using nodes::test::TempDir;
using test::run_stoke;

TEST(BenchGraphCommand, AThreadsListSweepsEachCount) {
  TempDir scratch;
  const test::CliResult r = run_stoke(
      scratch.path(), {"bench", "graph", "--items", "2000", "--repeat", "1", "--threads", "1,2,3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> lines = test::lines_of(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  for (std::size_t k = 0; k < lines.size(); ++k) {
    EXPECT_THAT(lines[k], HasSubstr("\"bench\":\"graph\""));
    EXPECT_THAT(lines[k], HasSubstr("\"threads\":" + std::to_string(k + 1) + ","));
  }
}

TEST(BenchGraphCommand, ATableForASweep) {
  TempDir scratch;
  const test::CliResult r =
      run_stoke(scratch.path(), {"bench", "graph", "--items", "2000", "--repeat", "1", "--threads", "1,2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("threads  stoke ns/item/stage"));
  EXPECT_EQ(test::lines_of(r.out).size(), 4u) << r.out;  // the setting, the header, a row per count
}

TEST(BenchGraphCommand, ABadThreadsListIsAUsageError) {
  TempDir scratch;
  for (const char* bad : {"1,,2", "two", "-1", "1,2,"}) {
    const test::CliResult r = run_stoke(scratch.path(), {"bench", "graph", "--threads", bad});
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_THAT(r.err, HasSubstr("--threads")) << bad;
  }
}

}  // namespace
}  // namespace stoke
