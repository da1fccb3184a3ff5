// A small stoke pipeline: generate records, decode them in parallel, drop the invalid ones, group
// them into batches in source order, and check the batches at the end.
//
//   stoke_example_pipeline [records]      (default 20000)
//
//   source "generate" -> map "decode" (parallel, ordered) -> filter "validate" (parallel)
//     -> emit "batch" (serial, ordered) -> sink "check" (serial)
//
// Ctrl-C stops the source; the records already in flight finish and the report is still printed.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "stoke/graph/graph.hpp"

namespace {

namespace sg = stoke::graph;

constexpr std::uint64_t default_records = 20000;
constexpr std::size_t payload_size = 256;    // floats per record
constexpr std::size_t batch_size = 64;       // records per batch (the last one may be smaller)
constexpr std::uint64_t invalid_every = 97;  // records whose index is a multiple of this are invalid

struct Record {
  std::uint64_t index = 0;  // position in the source's stream
  std::vector<float> payload;
};

struct Batch {
  std::uint64_t number = 0;  // 0, 1, 2, ... in the order the batcher emitted them
  std::vector<Record> records;
};

// Raw "encoded" values in [0, 255], a deterministic function of the record's index.
Record generate(std::uint64_t index) {
  Record record{index, std::vector<float>(payload_size)};
  for (std::size_t i = 0; i < payload_size; ++i) {
    record.payload[i] = static_cast<float>((index * 31 + i * 7) % 256);
  }
  return record;
}

// "Decode": scale to [0, 1], linearize with a gamma curve, then normalize with a fixed mean and
// standard deviation (as image pipelines do per channel).
Record decode(Record record) {
  constexpr float mean = 0.25f;
  constexpr float stddev = 0.3f;
  for (float& value : record.payload) value = (std::pow(value / 255.0f, 2.2f) - mean) / stddev;
  return record;
}

// Groups records into batches of `batch_size`; flush() emits the final partial batch. Stateful,
// so its stage is serial and ordered: records arrive one at a time, in source order.
class Batcher {
 public:
  void operator()(Record record, sg::Emitter<Batch>& out) {
    pending_.records.push_back(std::move(record));
    if (pending_.records.size() == batch_size) emit_pending(out);
  }

  void flush(sg::Emitter<Batch>& out) {
    if (!pending_.records.empty()) emit_pending(out);
  }

 private:
  void emit_pending(sg::Emitter<Batch>& out) {
    pending_.number = next_number_++;
    out.emit(std::exchange(pending_, Batch{}));
    pending_.records.reserve(batch_size);
  }

  Batch pending_;
  std::uint64_t next_number_ = 0;
};

// What the sink saw. Only the (serial) sink writes it; main reads it after run() returns.
struct Totals {
  std::uint64_t records = 0;
  std::uint64_t batches = 0;
  std::uint64_t last_index = 0;
  bool any = false;
  double sum = 0.0;
};

// Throws (which fails the run, naming the stage and item) unless batches arrive numbered 0, 1, 2,
// ... and the records inside them have increasing indices, none of them invalid.
void check(const Batch& batch, Totals& totals) {
  if (batch.number != totals.batches) {
    throw std::runtime_error("batch " + std::to_string(batch.number) + " arrived, expected batch " +
                             std::to_string(totals.batches));
  }
  if (batch.records.empty() || batch.records.size() > batch_size) {
    throw std::runtime_error("batch " + std::to_string(batch.number) + " has " + std::to_string(batch.records.size()) +
                             " records");
  }
  for (const Record& record : batch.records) {
    if (totals.any && record.index <= totals.last_index) {
      throw std::runtime_error("record " + std::to_string(record.index) + " arrived after record " +
                               std::to_string(totals.last_index));
    }
    if (record.index % invalid_every == 0) {
      throw std::runtime_error("invalid record " + std::to_string(record.index) + " was not filtered out");
    }
    totals.last_index = record.index;
    totals.any = true;
    for (const float value : record.payload) totals.sum += static_cast<double>(value);
  }
  totals.records += batch.records.size();
  ++totals.batches;
}

std::uint64_t parse_count(int argc, char** argv) {
  if (argc < 2) return default_records;
  if (argc > 2) throw std::invalid_argument("usage: stoke_example_pipeline [records]");
  const std::string_view text = argv[1];
  std::uint64_t count = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), count);
  if (error != std::errc{} || end != text.data() + text.size()) {
    throw std::invalid_argument("records must be a non-negative integer, got '" + std::string(text) + "'");
  }
  return count;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::uint64_t count = parse_count(argc, argv);
    const int workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

    sg::SignalStop signal_guard;  // SIGINT/SIGTERM stop the pipeline instead of the process
    sg::Pipeline pipeline({.max_in_flight = 256, .stop_on_signal = true});
    Totals totals;

    pipeline
        .source("generate",
                [next = std::uint64_t{0}, count]() mutable -> std::optional<Record> {
                  if (next == count) return std::nullopt;
                  return generate(next++);
                })
        .map("decode", decode, {.concurrency = sg::parallel(workers), .ordered = true})
        .filter("validate",
                [](Record record) -> std::optional<Record> {
                  if (record.index % invalid_every == 0) return std::nullopt;
                  return record;
                },
                {.concurrency = sg::parallel(workers)})  // unordered: the batcher restores the order
        .emit<Batch>("batch", Batcher{}, {.concurrency = sg::serial(), .ordered = true})
        .sink("check", [&totals](Batch batch) { check(batch, totals); }, {.concurrency = sg::serial()});

    const sg::RunReport report = pipeline.run();
    sg::print(std::cout, report);

    if (report.stopped || report.cancelled) {
      std::cerr << "example: interrupted after " << totals.records << " records\n";
      return 130;
    }
    const std::uint64_t expected = count == 0 ? 0 : count - ((count - 1) / invalid_every + 1);
    if (totals.records != expected) {
      throw std::runtime_error("the sink saw " + std::to_string(totals.records) + " records, expected " +
                               std::to_string(expected));
    }
    std::cout << "example: payload sum " << totals.sum << '\n'
              << "example: " << totals.records << " records in " << totals.batches << " batches, in order\n";
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "example: " << error.what() << '\n';
    return 1;
  }
}
