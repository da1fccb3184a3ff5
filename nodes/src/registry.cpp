#include "stoke/nodes/registry.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "dataset_support.hpp"
#include "spec_entries.hpp"

namespace stoke::nodes {

namespace {

using detail::in_quotes;
using detail::join;
using detail::lower;
using detail::split;
using detail::trim;
using detail::whitespace;

// The whole of `text` as a finite double; from_chars takes no leading '+', so it is skipped here.
std::optional<double> parse_double(std::string_view text) {
  if (text.size() > 1 && text.front() == '+' && text[1] != '-') text.remove_prefix(1);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

std::optional<int> parse_int(std::string_view text) {
  if (text.size() > 1 && text.front() == '+' && text[1] != '-') text.remove_prefix(1);
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

// ---- Params ----------------------------------------------------------------------------------

Params::Params(std::string transform, std::vector<std::pair<std::string, std::string>> values,
               std::optional<std::vector<std::string>> declared)
    : transform_(std::move(transform)), values_(std::move(values)), declared_(std::move(declared)) {
  for (std::size_t i = 0; i < values_.size(); ++i) {
    if (values_[i].first.empty()) throw std::invalid_argument(transform_ + ": a parameter has an empty name");
    for (std::size_t j = 0; j < i; ++j) {
      if (values_[j].first == values_[i].first) {
        throw std::invalid_argument(transform_ + ": parameter '" + values_[i].first + "' is given twice");
      }
    }
  }
}

Params Params::parse(std::string_view spec, std::string& name, std::string_view kind) {
  const std::string what(kind);
  std::vector<std::string_view> tokens;
  for (std::size_t pos = spec.find_first_not_of(whitespace); pos != std::string_view::npos;) {
    const auto end = spec.find_first_of(whitespace, pos);
    tokens.push_back(spec.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos));
    pos = end == std::string_view::npos ? end : spec.find_first_not_of(whitespace, end);
  }
  if (tokens.empty()) throw std::invalid_argument("empty " + what + " spec; expected \"name key=value ...\"");
  if (tokens.front().find('=') != std::string_view::npos) {
    throw std::invalid_argument(what + " spec " + in_quotes(spec) + " does not start with a " + what +
                                " name; expected \"name key=value ...\"");
  }
  name = std::string(tokens.front());
  std::vector<std::pair<std::string, std::string>> values;
  for (std::size_t i = 1; i < tokens.size(); ++i) {
    const auto token = tokens[i];
    const auto eq = token.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      throw std::invalid_argument(what + " spec " + in_quotes(spec) + ": " + in_quotes(token) +
                                  (eq == 0 ? " has an empty key" : " is not key=value") +
                                  "; expected \"name key=value ...\" with no spaces around '='");
    }
    std::string key(token.substr(0, eq));
    for (const auto& [seen, unused] : values) {
      if (seen == key) throw std::invalid_argument(what + " spec " + in_quotes(spec) + " gives '" + key + "' twice");
    }
    values.emplace_back(std::move(key), std::string(token.substr(eq + 1)));
  }
  return Params(name, std::move(values));
}

const std::string* Params::lookup(std::string_view key) const {
  if (declared_ && std::find(declared_->begin(), declared_->end(), key) == declared_->end()) {
    throw std::logic_error(transform_ + ": the factory reads parameter '" + std::string(key) +
                           "', which its registry entry does not declare; add a ParamDoc for it");
  }
  for (const auto& [k, v] : values_) {
    if (k == key) {
      read_.emplace(k);
      return &v;
    }
  }
  return nullptr;
}

void Params::bad_value(std::string_view key, const std::string& value, std::string_view expected) const {
  throw std::invalid_argument(transform_ + ": parameter " + std::string(key) + "='" + value + "' is not " +
                              std::string(expected));
}

int Params::get_int(std::string_view key, int fallback) const {
  const std::string* value = lookup(key);
  if (!value) return fallback;
  const auto parsed = parse_int(*value);
  if (!parsed) bad_value(key, *value, "an integer like 16");
  return *parsed;
}

double Params::get_double(std::string_view key, double fallback) const {
  const std::string* value = lookup(key);
  if (!value) return fallback;
  const auto parsed = parse_double(*value);
  if (!parsed) bad_value(key, *value, "a number like 0.5");
  return *parsed;
}

std::pair<double, double> Params::get_range(std::string_view key, std::pair<double, double> fallback) const {
  const std::string* value = lookup(key);
  if (!value) return fallback;
  const auto parts = split(*value, ':');
  if (parts.size() > 2) bad_value(key, *value, "a range like 0.08:1");
  const auto lo = parse_double(parts.front());
  const auto hi = parse_double(parts.back());
  if (!lo || !hi) bad_value(key, *value, "a range like 0.08:1");
  if (*lo > *hi) bad_value(key, *value, "a range lo:hi with lo <= hi");
  return {*lo, *hi};
}

cv::Size Params::get_size(std::string_view key, cv::Size fallback) const {
  const std::string* value = lookup(key);
  if (!value) return fallback;
  const auto parts = split(*value, 'x');
  if (parts.size() > 2) bad_value(key, *value, "a size like 224 or 224x192 (width x height)");
  const auto width = parse_int(parts.front());
  const auto height = parse_int(parts.back());
  if (!width || !height) bad_value(key, *value, "a size like 224 or 224x192 (width x height)");
  if (*width <= 0 || *height <= 0) bad_value(key, *value, "a positive size");
  return {*width, *height};
}

bool Params::get_bool(std::string_view key, bool fallback) const {
  const std::string* value = lookup(key);
  if (!value) return fallback;
  const std::string v = lower(*value);
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  bad_value(key, *value, "a boolean (true/false, 1/0, yes/no, on/off)");
}

std::vector<double> Params::get_list(std::string_view key, std::vector<double> fallback) const {
  const std::string* value = lookup(key);
  if (!value) return fallback;
  std::vector<double> out;
  if (value->empty()) return out;
  for (const auto part : split(*value, ',')) {
    const auto parsed = parse_double(part);
    if (!parsed) bad_value(key, *value, "a list of numbers like 0.485,0.456,0.406");
    out.push_back(*parsed);
  }
  return out;
}

std::string Params::get_string(std::string_view key, std::string fallback) const {
  const std::string* value = lookup(key);
  return value ? *value : fallback;
}

bool Params::has(std::string_view key) const noexcept {
  return std::any_of(values_.begin(), values_.end(), [&](const auto& kv) { return kv.first == key; });
}

std::vector<std::string> Params::unread() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : values_) {
    if (!read_.contains(k)) out.push_back(k);
  }
  return out;
}

// ---- Registry --------------------------------------------------------------------------------

void Registry::add(TransformEntry entry) {
  detail::check_entry("Registry::add: transform", entry.name, static_cast<bool>(entry.make), entry.params);

  const std::unique_lock lock(mutex_);
  if (entries_.contains(entry.name)) {
    std::vector<std::string> known;
    for (const auto& [name, unused] : entries_) known.push_back(name);
    throw std::invalid_argument("transform '" + entry.name + "' is already registered; registered: " +
                                join(known, ", ") + " (was a plugin loaded twice?)");
  }
  std::string name = entry.name;
  entries_.emplace(std::move(name), std::move(entry));
}

TransformPtr Registry::make(std::string_view spec) const {
  std::string name;
  const Params parsed = Params::parse(spec, name);

  const TransformEntry* entry = find(name);
  if (!entry) throw std::invalid_argument(detail::unknown_name("transform", name, names()));
  const Params params = detail::bind(spec, name, parsed, entry->params);
  // The entry is never removed or changed once added, so its factory runs without the lock.
  TransformPtr made = entry->make(params);
  if (!made) throw std::logic_error(name + ": the registry entry's factory returned no transform");
  detail::check_all_read(name, params);
  return made;
}

std::vector<TransformPtr> Registry::make_list(std::span<const std::string> specs) const {
  std::vector<TransformPtr> out;
  out.reserve(specs.size());
  for (const auto& spec : specs) out.push_back(make(spec));
  return out;
}

std::vector<TransformPtr> Registry::make_list(std::initializer_list<std::string_view> specs) const {
  std::vector<TransformPtr> out;
  out.reserve(specs.size());
  for (const std::string_view spec : specs) out.push_back(make(spec));
  return out;
}

std::vector<TransformPtr> Registry::make_list(std::string_view specs) const {
  std::vector<TransformPtr> out;
  for (const auto part : split(specs, ';')) {
    if (!trim(part).empty()) out.push_back(make(part));
  }
  return out;
}

const TransformEntry* Registry::find(std::string_view name) const {
  const std::shared_lock lock(mutex_);
  const auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

std::vector<std::string> Registry::names() const {
  const std::shared_lock lock(mutex_);
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, unused] : entries_) out.push_back(name);
  return out;
}

std::string Registry::help() const {
  const std::shared_lock lock(mutex_);
  std::ostringstream out;
  for (const auto& [name, entry] : entries_) out << detail::help_of(name, entry.doc, entry.params);
  return out.str();
}

Registry& Registry::builtin() {
  // A constructor that throws leaves the static uninitialized, so the next call starts afresh.
  struct Builtin {
    Registry registry;
    Builtin() { register_builtin_transforms(registry); }
  };
  static Builtin instance;
  return instance.registry;
}

}  // namespace stoke::nodes
