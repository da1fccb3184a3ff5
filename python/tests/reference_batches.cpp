// stoke_reference_batches: the C++ input pipeline's own batches (add_input to a sink, no Loader),
// for python/tests to compare stoke.Loader's with, whichever binding serves the Loader. A test tool,
// not part of the module.
//
//   stoke_reference_batches SETTINGS_JSON EPOCH EPOCHS
//
// SETTINGS_JSON is what stoke.Loader hands its binding (Loader._settings); the batches of epochs
// EPOCH .. EPOCH + EPOCHS - 1 are written to stdout, one JSON object a line:
// {"pixels": "<the batch's bytes in hex>", "labels": [...], "indices": [...]}.
#include <cstdint>
#include <exception>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stoke/graph/pipeline.hpp>
#include <stoke/train/input.hpp>
#include <stoke/train/loader_settings.hpp>
#include <string>

namespace {

std::string hex(std::span<const std::byte> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (const std::byte b : bytes) {
    out += digits[std::to_integer<unsigned>(b) >> 4];
    out += digits[std::to_integer<unsigned>(b) & 15];
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: stoke_reference_batches SETTINGS_JSON EPOCH EPOCHS\n";
    return 2;
  }
  try {
    const stoke::train::LoaderSettings settings = stoke::train::loader_settings_from_json(argv[1]);
    stoke::train::InputConfig config = stoke::train::input_config(settings);
    config.first_epoch = static_cast<std::uint32_t>(std::stoul(argv[2]));
    config.epochs = static_cast<std::uint32_t>(std::stoul(argv[3]));
    stoke::train::Input input = stoke::train::make_input(stoke::train::open_dataset(settings), config);
    stoke::graph::Pipeline pipe(input.pipeline_options);
    stoke::train::add_input(pipe, input, config).sink("write", [](stoke::nodes::Batch b) {
      const nlohmann::json line = {{"pixels", hex(b.data())},
                                   {"labels", std::vector<std::int32_t>(b.labels().begin(), b.labels().end())},
                                   {"indices", std::vector<std::uint64_t>(b.indices().begin(), b.indices().end())}};
      std::cout << line.dump() << '\n';
    });
    pipe.run();
  } catch (const std::exception& e) {
    std::cerr << "stoke_reference_batches: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
