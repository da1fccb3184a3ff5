// Building a pipeline wrongly is an error that says what to do, not a silent mis-wiring.
#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>
#include <string>

#include "stoke/graph/graph.hpp"

namespace stoke::graph::test {
namespace {

auto count_to(int n) {
  return [i = 0, n]() mutable -> std::optional<int> { return i < n ? std::optional(i++) : std::nullopt; };
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

TEST(PipelineBuildTest, ContinuingTheSameFlowTwiceThrowsLogicError) {
  Pipeline pipe;
  auto flow = pipe.source("source", count_to(3));
  auto first = flow;  // a copy of the open end
  std::move(flow).map("a", [](int x) { return x; });
  EXPECT_THROW(std::move(first).map("b", [](int x) { return x; }), std::logic_error);
  EXPECT_NE(error_of([&] { std::move(first).sink("c", [](int) {}); }).find("already continued"), std::string::npos);
}

TEST(PipelineBuildTest, SecondSourceThrowsLogicError) {
  Pipeline pipe;
  pipe.source("one", count_to(1)).sink("sink", [](int) {});
  EXPECT_THROW(pipe.source("two", count_to(1)), std::logic_error);
}

TEST(PipelineBuildTest, DuplicateStageNameThrowsInvalidArgumentNamingIt) {
  Pipeline pipe;
  auto flow = pipe.source("same", count_to(1));
  const std::string message = error_of([&] { std::move(flow).map("same", [](int x) { return x; }); });
  EXPECT_NE(message.find("two stages named 'same'"), std::string::npos) << message;
}

TEST(PipelineBuildTest, RunWithoutSinkOrSourceThrowsLogicErrorSayingWhatIsMissing) {
  Pipeline empty;
  EXPECT_NE(error_of([&] { empty.run(); }).find("source("), std::string::npos);
  Pipeline open;
  open.source("source", count_to(1)).map("m", [](int x) { return x; });
  EXPECT_NE(error_of([&] { open.run(); }).find(".sink("), std::string::npos);
}

TEST(PipelineBuildTest, RunTwiceThrowsLogicError) {
  Pipeline pipe;
  pipe.source("source", count_to(2)).sink("sink", [](int) {});
  EXPECT_EQ(pipe.run().consumed, 2u);
  EXPECT_THROW(pipe.run(), std::logic_error);
}

TEST(PipelineBuildTest, InconsistentConcurrencyThrowsInvalidArgumentNamingTheStage) {
  Pipeline pipe;
  auto flow = pipe.source("source", count_to(1));
  const std::string message = error_of([&] {
    std::move(flow).map("wide", [](int x) { return x; }, {.concurrency = {2, 4, 8}});
  });
  EXPECT_NE(message.find("stage 'wide'"), std::string::npos) << message;
  EXPECT_NE(message.find("min <= initial <= max"), std::string::npos) << message;
}

TEST(PipelineReportTest, StopRequestedAsTheStreamEndsIsNotReportedAsStopped) {
  Pipeline pipe;
  // The source asks for a stop in the very call that ends its stream: nothing is cut short.
  pipe.source("source",
              [&pipe, i = 0]() mutable -> std::optional<int> {
                if (i < 10) return i++;
                pipe.stop();
                return std::nullopt;
              })
      .sink("sink", [](int) {});
  const RunReport report = pipe.run();
  EXPECT_EQ(report.consumed, 10u);
  EXPECT_FALSE(report.stopped);
  EXPECT_FALSE(report.cancelled);
}

}  // namespace
}  // namespace stoke::graph::test
