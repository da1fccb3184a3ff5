// safetensors_fuzz: a libFuzzer harness for stoke's safetensors reader and checkpoint loading.
// The input is the bytes of a file: decoded from memory (decode_safetensors), then written once
// to /dev/shm and read as a file (read_safetensors, read_safetensors_metadata,
// read_checkpoint_metadata), and loaded into small models (load_checkpoint with and without an
// optimizer, load_weights) whose names and shapes the seeds match.
//
// Any outcome but success or the documented std::runtime_error -- a crash, a sanitizer report,
// another exception, a hang, or readers that disagree about the same bytes -- is a bug. Build and
// run (see CMakeLists.txt next to this file):
//   CXX=clang++ cmake -S . -B build/fuzz-nn -DSTOKE_FUZZ=ON -DSTOKE_SANITIZE=address -DSTOKE_CUDA=OFF
//   cmake --build build/fuzz-nn --target safetensors_fuzz
//   build/fuzz-nn/nn/fuzz/safetensors_fuzz -max_total_time=300 -timeout=10 -dict=nn/fuzz/safetensors.dict \
//     corpus/ tests/fuzz/corpus/safetensors
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz_models.hpp"
#include "stoke/nn/checkpoint.hpp"
#include "stoke/nn/safetensors.hpp"

namespace {

namespace nn = stoke::nn;

// A broken invariant: abort, so that libFuzzer keeps the input.
[[noreturn]] void bug(const std::string& what) {
  std::fprintf(stderr, "safetensors_fuzz: %s\n", what.c_str());
  std::abort();
}

// What decode_safetensors promises about a file it accepts.
void check_decoded(const nn::SafetensorsFile& file) {
  std::map<std::string, int> names;
  for (const nn::TensorRecord& t : file.tensors) {
    if (++names[t.name] > 1) bug("tensor '" + t.name + "' comes back twice");
    if (t.name == "__metadata__") bug("a tensor is named __metadata__");
    std::uint64_t elements = 1;
    bool empty = false;
    for (const std::int64_t dim : t.shape) {
      if (dim < 0) bug("tensor '" + t.name + "' has a negative dimension");
      if (dim == 0) empty = true;
      elements *= static_cast<std::uint64_t>(dim);  // wraps only when the size check below fails anyway
    }
    const std::uint64_t bytes = empty ? 0 : elements * stoke::nn::element_size(t.dtype);
    if (bytes != t.data.size()) bug("tensor '" + t.name + "' holds the wrong number of bytes");
  }
}

// What a file accepted by the reader must survive: written again, it reads back the same.
void check_round_trip(const nn::SafetensorsFile& file) {
  std::vector<std::byte> bytes;
  try {
    bytes = nn::encode_safetensors(file);
  } catch (const std::invalid_argument&) {
    // The writer is stricter than the reader in one place: an empty tensor name.
    for (const nn::TensorRecord& t : file.tensors) {
      if (t.name.empty()) return;
    }
    throw;
  }
  if (nn::decode_safetensors(bytes, "round trip") != file) bug("the file does not read back as it was written");
}

class TempPath {
 public:
  TempPath() : path_("/dev/shm/stoke_safetensors_fuzz_" + std::to_string(::getpid()) + ".safetensors") {}
  TempPath(const TempPath&) = delete;
  TempPath& operator=(const TempPath&) = delete;
  ~TempPath() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }

  void write(const std::uint8_t* data, std::size_t size) const {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    out.close();
    if (!out) bug("cannot write " + path_.string());
  }

 private:
  std::filesystem::path path_;
};

// SAFETENSORS_FUZZ_VERBOSE=1 prints what each loader says (to check that seeds load).
bool verbose() {
  static const bool on = std::getenv("SAFETENSORS_FUZZ_VERBOSE") != nullptr;
  return on;
}

// Runs one loader; a mismatch or a bad file is a runtime_error.
template <class Load>
void try_load(const char* what, Load&& load) {
  try {
    load();
    if (verbose()) std::fprintf(stderr, "  %s: loaded\n", what);
  } catch (const std::runtime_error& error) {
    if (verbose()) std::fprintf(stderr, "  %s: %.300s\n", what, error.what());
  }
}

struct Models {
  std::unique_ptr<nn::Backend> backend = nn::make_backend(nn::Device::cpu());
  std::unique_ptr<nn::Sequential> cnn = nn::fuzz::tiny_cnn();
  std::unique_ptr<nn::Sequential> linear = nn::fuzz::tiny_linear();
  nn::Sgd sgd{*cnn, *backend};
  nn::AdamW adamw{*linear, *backend};
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const TempPath temp;
  static Models models;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);

  std::optional<nn::SafetensorsFile> decoded;
  try {
    decoded = nn::decode_safetensors(bytes, "fuzz-input");
  } catch (const std::runtime_error&) {
  }
  if (decoded) {
    check_decoded(*decoded);
    check_round_trip(*decoded);
  }

  // The file readers must agree with the reader of memory.
  temp.write(data, size);
  std::optional<nn::SafetensorsFile> read;
  try {
    read = nn::read_safetensors(temp.path());
  } catch (const std::runtime_error&) {
  }
  if (read.has_value() != decoded.has_value()) bug("read_safetensors and decode_safetensors disagree on acceptance");
  if (read && *read != *decoded) bug("read_safetensors and decode_safetensors read different files");
  std::optional<std::map<std::string, std::string>> metadata;
  try {
    metadata = nn::read_safetensors_metadata(temp.path());
  } catch (const std::runtime_error&) {
  }
  if (metadata.has_value() != decoded.has_value()) bug("read_safetensors_metadata disagrees on acceptance");
  if (metadata && *metadata != decoded->metadata) bug("read_safetensors_metadata reads other metadata");

  try {
    (void)nn::read_checkpoint_metadata(temp.path());
  } catch (const std::runtime_error&) {
  }
  if (!decoded) return 0;  // every loader reads the file as read_safetensors does

  const auto& path = temp.path();
  try_load("cnn", [&] { (void)nn::load_checkpoint(path, *models.cnn, nullptr); });
  try_load("cnn+sgd", [&] { (void)nn::load_checkpoint(path, *models.cnn, &models.sgd); });
  try_load("cnn weights", [&] { (void)nn::load_weights(path, *models.cnn); });
  try_load("linear+adamw", [&] { (void)nn::load_checkpoint(path, *models.linear, &models.adamw); });
  try_load("linear", [&] { (void)nn::load_checkpoint(path, *models.linear, nullptr); });
  try_load("linear weights", [&] { (void)nn::load_weights(path, *models.linear); });
  return 0;
}
