// safetensors_fuzz_seeds: writes safetensors_fuzz's seed inputs into a folder (the checked-in
// ones are in tests/fuzz/corpus/safetensors):
//   build/fuzz-nn/nn/fuzz/safetensors_fuzz_seeds tests/fuzz/corpus/safetensors
// Checkpoints of the harness's models as save_checkpoint writes them (so that loading reaches the
// copies), files from write_safetensors with every dtype and odd shapes, and hand-written ones.
#include <cstddef>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_models.hpp"
#include "stoke/nn/checkpoint.hpp"
#include "stoke/nn/safetensors.hpp"

namespace {

namespace nn = stoke::nn;
namespace fs = std::filesystem;

std::vector<std::byte> bytes(std::size_t count, unsigned start) {
  std::vector<std::byte> out(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<std::byte>((start + 7 * i) & 0xffu);
  return out;
}

// An 8-byte little-endian length, the header text as it is, then `data`.
void write_raw(const fs::path& path, const std::string& header, const std::string& data = {}) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((header.size() >> (8 * i)) & 0xffu));
  out << header << data;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FOLDER\n", argv[0]);
    return 2;
  }
  const fs::path folder = argv[1];
  fs::create_directories(folder);
  const auto backend = nn::make_backend(nn::Device::cpu());

  {
    const auto cnn = nn::fuzz::tiny_cnn();
    nn::Sgd sgd(*cnn, *backend);
    nn::save_checkpoint(folder / "cnn_sgd.safetensors", *cnn, &sgd,
                        {.epoch = 3, .step = 42, .lr = 0.05, .loss_scale = 1024, .seed = 7,
                         .extra = {{"model", "small_cnn"}, {"classes", "cat\ndog"}}});
    nn::save_checkpoint(folder / "cnn_weights.safetensors", *cnn, nullptr, {});
  }
  {
    const auto linear = nn::fuzz::tiny_linear();
    nn::AdamW adamw(*linear, *backend);
    nn::save_checkpoint(folder / "linear_adamw.safetensors", *linear, &adamw,
                        {.epoch = 1, .step = 2, .lr = 1e-3, .loss_scale = 1, .seed = 3, .extra = {{"note", "\xc3\xa9t\xc3\xa9"}}});
  }
  // A plain weights file, as PyTorch's save_file writes one: no stoke metadata.
  nn::write_safetensors(folder / "linear_plain.safetensors",
                        {.tensors = {{.name = "fc.weight", .dtype = nn::DType::f32, .shape = {2, 3}, .data = bytes(24, 1)},
                                     {.name = "fc.bias", .dtype = nn::DType::f32, .shape = {2}, .data = bytes(8, 2)}},
                         .metadata = {}});
  // Every dtype, a scalar, empty tensors (one with a huge dimension), a multi-byte name.
  nn::write_safetensors(
      folder / "dtypes.safetensors",
      {.tensors = {{.name = "f16", .dtype = nn::DType::f16, .shape = {3}, .data = bytes(6, 3)},
                   {.name = "bf16", .dtype = nn::DType::bf16, .shape = {1, 2}, .data = bytes(4, 4)},
                   {.name = "u8", .dtype = nn::DType::u8, .shape = {5}, .data = bytes(5, 5)},
                   {.name = "i32", .dtype = nn::DType::i32, .shape = {}, .data = bytes(4, 6)},
                   {.name = "empty", .dtype = nn::DType::f32, .shape = {0, 3}, .data = {}},
                   {.name = "huge_empty", .dtype = nn::DType::u8, .shape = {1LL << 62, 0, 4}, .data = {}},
                   {.name = "\xe2\x82\xac.w", .dtype = nn::DType::f32, .shape = {1, 1, 1, 1}, .data = bytes(4, 7)}},
       .metadata = {{"format", "pt"}, {"ctl", std::string("a\x01z\t", 4)}}});
  // Hand-written: the smallest file, one tensor, and metadata only.
  write_raw(folder / "empty.safetensors", "{}      ");
  write_raw(folder / "one.safetensors", R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "ab");
  write_raw(folder / "metadata.safetensors",
            R"( {"__metadata__":{"stoke.format":"1","stoke.epoch":"-1","stoke.lr":"1e308","k\u00e9":"\ud83d\ude00"}} )");
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "safetensors_fuzz_seeds: %s\n", error.what());
  return 1;
}
