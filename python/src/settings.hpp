// What stoke.Loader's arguments become on the C++ side, shared by both bindings (the pybind11
// module and the C ABI that ctypes loads): the settings, their InputConfig, the dataset they name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stoke/train/input.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace stoke::python {

/// stoke.Loader's settings, as its Python layer (python/stoke/loader.py) fills them in.
struct Settings {
  std::string data;
  std::vector<std::string> transforms;
  std::size_t batch_size = 64;
  int size = 224;
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool drop_last = false;
  std::uint32_t rank = 0;
  std::uint32_t world = 1;
  std::string remainder = "pad";
  int threads = 0;
  bool autotune = true;
  int cpu_budget = 0;
  std::string on_error = "skip";
  std::vector<std::string> plugins;
  std::size_t prefetch = 4;
  std::string format;
  std::string color = "rgb";
  bool fuse = true;
  int nice = 0;
  std::uint32_t epochs = 0;  ///< the run's epochs (train::Loader's `epochs`; 0: no end)
};

/// Settings from a JSON object whose keys are Settings' member names; a key left out keeps its
/// default. Throws std::invalid_argument naming a key it does not know or a value of the wrong type.
Settings settings_from_json(std::string_view json);

/// The InputConfig of `s`. Throws std::invalid_argument for a word it does not know (on_error,
/// remainder, color), a rank not below world or a zero batch size.
train::InputConfig input_config(const Settings& s);

/// Loads the settings' plugins into the built-in registries, then opens their dataset.
train::DatasetPtr open_dataset(const Settings& s);

}  // namespace stoke::python
