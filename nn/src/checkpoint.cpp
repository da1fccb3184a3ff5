#include "stoke/nn/checkpoint.hpp"

#include <array>
#include <charconv>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "stoke/nn/safetensors.hpp"
#include "stoke/nn/tensor.hpp"

namespace stoke::nn {

namespace {

constexpr std::string_view format_key = "stoke.format";
constexpr std::string_view format_version = "1";
constexpr std::string_view optimizer_key = "stoke.optimizer";
// The optimizer whose state a file holds when it does not say: Sgd's checkpoints never did.
constexpr std::string_view default_optimizer = "sgd";
constexpr std::array<std::string_view, 7> reserved_keys = {"stoke.format",     "stoke.epoch", "stoke.step", "stoke.lr",
                                                           "stoke.loss_scale", "stoke.seed",  optimizer_key};

bool is_reserved(std::string_view key) {
  for (const std::string_view reserved : reserved_keys) {
    if (key == reserved) return true;
  }
  return false;
}

struct Named {
  std::string name;
  Tensor tensor;  // a shallow copy: it shares the model's (or the optimizer's) elements
};

// What a checkpoint of this model (and optimizer) holds, in the order it is written.
std::vector<Named> collect(Layer& model, Optimizer* optimizer) {
  std::vector<Named> tensors;
  model.for_each_parameter([&](const std::string& name, Parameter& p) { tensors.push_back({name, p.value}); });
  model.for_each_buffer([&](const std::string& name, Tensor& buffer) { tensors.push_back({name, buffer}); });
  if (optimizer != nullptr) {
    optimizer->for_each_state([&](const std::string& name, Tensor& buffer) {
      tensors.push_back({optimizer_state_prefix + name, buffer});
    });
  }
  return tensors;
}

// Doubles as decimal text that reads back to the same double (max_digits10 significant digits).
std::string format_double(double value) {
  std::array<char, 32> text{};
  const int length = std::snprintf(text.data(), text.size(), "%.17g", value);
  return {text.data(), static_cast<std::size_t>(length)};
}

template <class Number>
Number parse_number(const std::filesystem::path& path, const std::string& key, const std::string& text) {
  Number value{};
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || stop != end || text.empty()) {
    throw std::runtime_error(path.string() + ": the metadata " + key + " = '" + text + "' is not a number of its kind");
  }
  return value;
}

// The training state from the metadata. A stoke checkpoint has every key; a plain weights file
// (required == false) may have none, and its metadata then all goes to `extra`.
TrainingState read_state(const std::filesystem::path& path, const std::map<std::string, std::string>& metadata,
                         bool required) {
  const auto format = metadata.find(std::string(format_key));
  if (format == metadata.end()) {
    if (required) {
      throw std::runtime_error(path.string() +
                               ": not a stoke checkpoint (no 'stoke.format' in its metadata); load_weights reads "
                               "plain weights files");
    }
  } else if (format->second != format_version) {
    throw std::runtime_error(path.string() + ": checkpoint format '" + format->second + "', but this stoke reads '" +
                             std::string(format_version) + "'");
  }
  const bool stoke_file = format != metadata.end();
  auto value_of = [&](const std::string& key) -> const std::string* {
    const auto it = metadata.find(key);
    if (it != metadata.end()) return &it->second;
    if (stoke_file) throw std::runtime_error(path.string() + ": the checkpoint's metadata has no " + key);
    return nullptr;
  };

  TrainingState state;
  if (const std::string* v = value_of("stoke.epoch")) state.epoch = parse_number<std::int64_t>(path, "stoke.epoch", *v);
  if (const std::string* v = value_of("stoke.step")) state.step = parse_number<std::int64_t>(path, "stoke.step", *v);
  if (const std::string* v = value_of("stoke.lr")) state.lr = parse_number<double>(path, "stoke.lr", *v);
  if (const std::string* v = value_of("stoke.loss_scale")) {
    state.loss_scale = parse_number<double>(path, "stoke.loss_scale", *v);
  }
  if (const std::string* v = value_of("stoke.seed")) state.seed = parse_number<std::uint64_t>(path, "stoke.seed", *v);
  for (const auto& [key, value] : metadata) {
    if (!is_reserved(key)) state.extra.emplace(key, value);
  }
  return state;
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string text;
  for (const std::string& item : items) {
    if (!text.empty()) text += separator;
    text += item;
  }
  return text;
}

bool is_optimizer_state(std::string_view name) { return name.starts_with(optimizer_state_prefix); }

TrainingState load(const std::filesystem::path& path, Layer& model, Optimizer* optimizer, StreamView stream,
                   bool stoke_file_required) {
  SafetensorsFile file = read_safetensors(path);
  TrainingState state = read_state(path, file.metadata, stoke_file_required);

  std::map<std::string_view, TensorRecord*> in_file;
  bool file_has_optimizer_state = false;
  for (TensorRecord& record : file.tensors) {
    in_file.emplace(record.name, &record);
    file_has_optimizer_state = file_has_optimizer_state || is_optimizer_state(record.name);
  }

  // State of another kind of optimizer is one mismatch, not a list of every tensor's.
  std::string other_optimizer;
  if (optimizer != nullptr && file_has_optimizer_state) {
    const auto named = file.metadata.find(std::string(optimizer_key));
    const std::string saved = named != file.metadata.end() ? named->second : std::string(default_optimizer);
    if (saved != optimizer->name()) other_optimizer = saved;
  }

  // Check everything first, so that a mismatch leaves the model as it was.
  const std::vector<Named> expected = collect(model, optimizer);
  std::vector<std::string> missing, unexpected, mismatches;
  std::vector<TensorRecord*> sources;
  std::set<std::string_view> wanted;
  bool optimizer_state_missing = false;
  for (const Named& target : expected) {
    wanted.insert(target.name);
    if (!target.tensor.defined()) {
      throw std::logic_error("load_checkpoint: '" + target.name + "' in the model is an undefined tensor");
    }
    const auto found = in_file.find(target.name);
    if (found == in_file.end()) {
      if (is_optimizer_state(target.name) && !file_has_optimizer_state) {
        optimizer_state_missing = true;
      } else if (!(is_optimizer_state(target.name) && !other_optimizer.empty())) {
        missing.push_back(target.name);
      }
      sources.push_back(nullptr);
      continue;
    }
    const TensorRecord& record = *found->second;
    if (record.shape != target.tensor.shape()) {
      mismatches.push_back("shape mismatch: " + target.name + " is " + to_string(target.tensor.shape()) +
                           " in the model but " + to_string(record.shape) + " in the checkpoint");
    }
    if (record.dtype != target.tensor.dtype()) {
      mismatches.push_back("dtype mismatch: " + target.name + " is " + std::string(to_string(target.tensor.dtype())) +
                           " in the model but " + std::string(to_string(record.dtype)) + " in the checkpoint");
    }
    sources.push_back(found->second);
  }
  for (const TensorRecord& record : file.tensors) {
    // Weights only (not asked for), or another optimizer's state (one problem, below).
    if ((optimizer == nullptr || !other_optimizer.empty()) && is_optimizer_state(record.name)) continue;
    if (!wanted.contains(record.name)) unexpected.push_back(record.name);
  }

  std::vector<std::string> problems;
  if (optimizer_state_missing) {
    problems.push_back(
        "it has no optimizer state (saved without an optimizer), but an optimizer was given to load "
        "it into (pass none to start the optimizer afresh)");
  }
  if (!other_optimizer.empty()) {
    problems.push_back("its optimizer state is " + other_optimizer + "'s, but the optimizer to load it into is " +
                       std::string(optimizer->name()) +
                       " (load it with the same optimizer, or pass none to start the " +
                       std::string(optimizer->name()) + " optimizer afresh)");
  }
  if (!missing.empty()) problems.push_back("missing in the checkpoint: " + join(missing, ", "));
  if (!unexpected.empty()) problems.push_back("not in the model: " + join(unexpected, ", "));
  problems.insert(problems.end(), mismatches.begin(), mismatches.end());
  if (!problems.empty()) {
    throw std::runtime_error(path.string() + ": the checkpoint does not fit the model: " + join(problems, "; "));
  }

  // The host copies must live until the copies to a device are done.
  std::vector<Tensor> staged;
  bool any_device = false;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const Tensor& target = expected[i].tensor;
    TensorRecord& record = *sources[i];
    Tensor source = Tensor::view_of(record.data.data(), record.shape, record.dtype);
    if (target.rank() == 4 && target.layout() != source.layout()) source = to_layout(source, target.layout());
    target.copy_from(source, stream);
    any_device = any_device || !target.device().is_cpu();
    staged.push_back(std::move(source));
  }
  if (any_device) stream.synchronize();
  return state;
}

}  // namespace

void save_checkpoint(const std::filesystem::path& path, Layer& model, Optimizer* optimizer, const TrainingState& state,
                     StreamView stream) {
  SafetensorsFile file;
  for (const auto& [key, value] : state.extra) {
    if (is_reserved(key)) {
      throw std::invalid_argument("save_checkpoint: the extra entry '" + key +
                                  "' has a name stoke reserves for the training state; choose another");
    }
    file.metadata.emplace(key, value);
  }
  file.metadata[std::string(format_key)] = std::string(format_version);
  file.metadata["stoke.epoch"] = std::to_string(state.epoch);
  file.metadata["stoke.step"] = std::to_string(state.step);
  file.metadata["stoke.lr"] = format_double(state.lr);
  file.metadata["stoke.loss_scale"] = format_double(state.loss_scale);
  file.metadata["stoke.seed"] = std::to_string(state.seed);
  if (optimizer != nullptr && optimizer->name() != default_optimizer) {
    file.metadata[std::string(optimizer_key)] = std::string(optimizer->name());
  }

  const std::vector<Named> tensors = collect(model, optimizer);
  // Start every copy off the device, then wait once.
  std::vector<Tensor> host;
  host.reserve(tensors.size());
  bool any_device = false;
  for (const Named& named : tensors) {
    if (!named.tensor.defined()) {
      throw std::logic_error("save_checkpoint: '" + named.name + "' in the model is an undefined tensor");
    }
    const bool on_host = named.tensor.device().is_cpu();
    host.push_back(on_host ? named.tensor : named.tensor.to(Device::cpu(), stream));
    any_device = any_device || !on_host;
  }
  if (any_device) stream.synchronize();

  file.tensors.reserve(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    Tensor row_major = host[i];
    // PyTorch reads the elements in NCHW order whatever layout the training used.
    if (row_major.rank() == 4 && row_major.layout() != TensorLayout::nchw) {
      row_major = to_layout(row_major, TensorLayout::nchw);
    }
    TensorRecord record{.name = tensors[i].name, .dtype = row_major.dtype(), .shape = row_major.shape(), .data = {}};
    record.data.resize(row_major.bytes());
    if (!record.data.empty()) std::memcpy(record.data.data(), row_major.data(), record.data.size());
    file.tensors.push_back(std::move(record));
  }
  write_safetensors(path, file);
}

TrainingState load_checkpoint(const std::filesystem::path& path, Layer& model, Optimizer* optimizer,
                              StreamView stream) {
  return load(path, model, optimizer, stream, /*stoke_file_required=*/true);
}

TrainingState load_weights(const std::filesystem::path& path, Layer& model, StreamView stream) {
  return load(path, model, nullptr, stream, /*stoke_file_required=*/false);
}

TrainingState read_checkpoint_metadata(const std::filesystem::path& path) {
  return read_state(path, read_safetensors_metadata(path), /*required=*/false);
}

}  // namespace stoke::nn
