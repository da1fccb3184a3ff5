#include "stoke/train/loader_settings.hpp"

#include <algorithm>
#include <stdexcept>
#include <stoke/base/enum_names.hpp>
#include <type_traits>
#include <utility>

namespace stoke::train {

namespace {

constexpr base::EnumNames<ShardRemainder, 3> remainder_names{
    {{{ShardRemainder::pad, "pad"}, {ShardRemainder::drop, "drop"}, {ShardRemainder::uneven, "uneven"}}}};
constexpr base::EnumNames<graph::OnError, 2> on_error_names{
    {{{graph::OnError::skip, "skip"}, {graph::OnError::fail, "fail"}}}};
constexpr base::EnumNames<DecodeColor, 2> color_names{{{{DecodeColor::rgb, "rgb"}, {DecodeColor::keep, "keep"}}}};

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};

// The type a binding converts a setting's value to (describe_loader_settings' "type").
template <class T>
const char* type_name() {
  if constexpr (IsOptional<T>::value) {
    static_assert(std::is_integral_v<typename T::value_type>, "only optional numbers and flags are declared");
    return std::is_same_v<typename T::value_type, bool> ? "bool?" : "int?";
  } else if constexpr (std::is_same_v<T, bool>) {
    return "bool";
  } else if constexpr (std::is_integral_v<T>) {
    return "int";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return "str";
  } else {
    static_assert(std::is_same_v<T, std::vector<std::string>>, "a setting of a type bindings do not know");
    return "list[str]";
  }
}

// The value named `word` in `names`, or std::invalid_argument naming the setting and the choices.
template <class E, std::size_t N>
E word_of(const base::EnumNames<E, N>& names, const char* setting, const std::string& word) {
  if (const auto value = names.find(word)) return *value;
  throw std::invalid_argument(std::string(setting) + " must be " + names.choices() + ", not '" + word + "'");
}

}  // namespace

LoaderSettings loader_settings_from_json(std::string_view json) {
  const nlohmann::json in = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!in.is_object()) throw std::invalid_argument("the loader's settings are not a JSON object: " + std::string(json));
  LoaderSettings s;
  std::vector<std::string_view> known;
  for_each_setting(s, [&](const char* name, auto& member, const char*) {
    known.emplace_back(name);
    const auto at = in.find(name);
    if (at == in.end()) return;
    using T = std::remove_reference_t<decltype(member)>;
    try {
      if constexpr (IsOptional<T>::value) {
        member = at->is_null() ? T{} : T{at->template get<typename T::value_type>()};
      } else {
        at->get_to(member);
      }
    } catch (const nlohmann::json::exception&) {
      throw std::invalid_argument(std::string("the loader setting '") + name + "' has the wrong type: " + at->dump() +
                                  " (it takes " + type_name<T>() + ")");
    }
  });
  for (const auto& [key, value] : in.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end())
      throw std::invalid_argument("the loader has no setting '" + key + "'");
  }
  return s;
}

nlohmann::json describe_loader_settings() {
  const LoaderSettings defaults;
  nlohmann::json out = nlohmann::json::array();
  for_each_setting(defaults, [&](const char* name, const auto& member, const char* doc) {
    using T = std::remove_cvref_t<decltype(member)>;
    nlohmann::json value;  // null: an empty optional
    if constexpr (IsOptional<T>::value) {
      if (member) value = *member;
    } else {
      value = member;
    }
    out.push_back({{"name", name}, {"type", type_name<T>()}, {"default", std::move(value)}, {"doc", doc}});
  });
  return out;
}

InputConfig input_config(const LoaderSettings& s) {
  if (s.batch_size == 0) throw std::invalid_argument("batch_size must be positive");
  if (s.world == 0 || s.rank >= s.world)
    throw std::invalid_argument("rank " + std::to_string(s.rank) + " is not below world " + std::to_string(s.world));
  if (s.nice < 0 || s.nice > 19)
    throw std::invalid_argument("nice=" + std::to_string(s.nice) +
                                " is not a Linux nice value from 0 (as the caller) to 19 (lowest)");
  if (s.cpu_budget && *s.cpu_budget < 1)
    throw std::invalid_argument("cpu_budget=" + std::to_string(*s.cpu_budget) + ": at least 1 core (None: all)");
  if (s.epochs && *s.epochs < 1)
    throw std::invalid_argument("epochs=" + std::to_string(*s.epochs) +
                                ": the run's epochs must be at least 1 (None: no end)");
  InputConfig c;
  c.batch_size = s.batch_size;
  c.size = s.size;
  c.transforms = s.transforms;
  c.shuffle = s.shuffle;
  c.seed = s.seed;
  c.drop_last = s.drop_last;
  c.rank = s.rank;
  c.world = s.world;
  c.remainder = word_of(remainder_names, "remainder", s.remainder);
  c.threads = s.threads.value_or(0);
  c.autotune = s.autotune;
  c.tuning.cpu_budget = s.cpu_budget.value_or(0);
  c.on_error = word_of(on_error_names, "on_error", s.on_error);
  c.prefetch = s.prefetch;
  c.fuse = s.fuse;
  c.nice = s.nice;
  c.decode = default_decode_options(word_of(color_names, "color", s.color));
  c.convert_on_device = s.normalize_on_device.value_or(false);
  return c;
}

DatasetPtr open_dataset(const LoaderSettings& s) {
  for (const std::string& plugin : s.plugins) load_plugin(plugin);
  return open_dataset(s.data, s.format);
}

Loader make_loader(const LoaderSettings& s) {
  InputConfig config = input_config(s);  // the settings' mistakes before any file is opened
  DatasetPtr dataset = open_dataset(s);  // and its plugins, whose transforms config may name
  if (config.convert_on_device) {
    // Only a normalization is left to the caller: without one the batches stay as they are.
    const std::vector<nodes::TransformPtr> transforms = make_transforms(config);
    config.convert_on_device = !transforms.empty() && transforms.back()->normalization().has_value();
  }
  return Loader(std::move(dataset), std::move(config), s.epochs.value_or(0));
}

nlohmann::json loader_normalization(const Loader& loader) {
  const std::optional<gpu::ConvertOptions>& convert = loader.convert();
  if (!convert) return nullptr;
  return {{"mean", convert->mean}, {"stddev", convert->stddev}, {"range", convert->range}};
}

}  // namespace stoke::train
