#include "settings.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

namespace stoke::python {

namespace {

graph::OnError on_error_of(const std::string& word) {
  if (word == "skip") return graph::OnError::skip;
  if (word == "fail") return graph::OnError::fail;
  throw std::invalid_argument("on_error must be 'skip' or 'fail', not '" + word + "'");
}

train::ShardRemainder remainder_of(const std::string& word) {
  if (word == "pad") return train::ShardRemainder::pad;
  if (word == "drop") return train::ShardRemainder::drop;
  if (word == "uneven") return train::ShardRemainder::uneven;
  throw std::invalid_argument("remainder must be 'pad', 'drop' or 'uneven', not '" + word + "'");
}

train::DecodeColor color_of(const std::string& word) {
  if (word == "rgb") return train::DecodeColor::rgb;
  if (word == "keep") return train::DecodeColor::keep;
  throw std::invalid_argument("color must be 'rgb' or 'keep', not '" + word + "'");
}

}  // namespace

Settings settings_from_json(std::string_view json) {
  const nlohmann::json in = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!in.is_object()) throw std::invalid_argument("the loader's settings are not a JSON object: " + std::string(json));
  Settings s;
  std::vector<std::string_view> known;  // every key take() looks for
  const auto take = [&](const char* key, auto& member) {
    known.emplace_back(key);
    const auto at = in.find(key);
    if (at == in.end()) return;
    try {
      at->get_to(member);
    } catch (const nlohmann::json::exception& e) {
      throw std::invalid_argument(std::string("the loader setting '") + key + "' has the wrong type: " + at->dump());
    }
  };
  take("data", s.data);
  take("transforms", s.transforms);
  take("batch_size", s.batch_size);
  take("size", s.size);
  take("shuffle", s.shuffle);
  take("seed", s.seed);
  take("drop_last", s.drop_last);
  take("rank", s.rank);
  take("world", s.world);
  take("remainder", s.remainder);
  take("threads", s.threads);
  take("autotune", s.autotune);
  take("cpu_budget", s.cpu_budget);
  take("on_error", s.on_error);
  take("plugins", s.plugins);
  take("prefetch", s.prefetch);
  take("format", s.format);
  take("color", s.color);
  take("fuse", s.fuse);
  take("nice", s.nice);
  take("epochs", s.epochs);
  for (const auto& [key, value] : in.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end())
      throw std::invalid_argument("the loader has no setting '" + key + "'");
  }
  return s;
}

train::InputConfig input_config(const Settings& s) {
  train::InputConfig c;
  c.batch_size = s.batch_size;
  c.size = s.size;
  c.transforms = s.transforms;
  c.shuffle = s.shuffle;
  c.seed = s.seed;
  c.drop_last = s.drop_last;
  c.rank = s.rank;
  c.world = s.world;
  c.remainder = remainder_of(s.remainder);
  c.threads = s.threads;
  c.autotune = s.autotune;
  c.tuning.cpu_budget = s.cpu_budget;
  c.on_error = on_error_of(s.on_error);
  c.prefetch = s.prefetch;
  c.fuse = s.fuse;
  c.nice = s.nice;
  c.decode = train::default_decode_options(color_of(s.color));
  if (s.world == 0 || s.rank >= s.world)
    throw std::invalid_argument("rank " + std::to_string(s.rank) + " is not below world " + std::to_string(s.world));
  if (s.batch_size == 0) throw std::invalid_argument("batch_size must be positive");
  return c;
}

train::DatasetPtr open_dataset(const Settings& s) {
  for (const std::string& plugin : s.plugins) train::load_plugin(plugin);
  return train::open_dataset(s.data, s.format);
}

}  // namespace stoke::python
