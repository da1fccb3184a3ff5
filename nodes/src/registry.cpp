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

namespace stoke::nodes {

namespace {

using detail::trim;
using detail::whitespace;

std::vector<std::string_view> split(std::string_view s, char separator) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const auto end = s.find(separator, start);
    parts.push_back(s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

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

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// A candidate is suggested when it is a few edits away, or when it contains every '_'-separated
// word of the query ("random_crop" -> "random_resized_crop").
bool close_match(std::string_view query, std::string_view candidate) {
  const std::string q = lower(query);
  const std::string c = lower(candidate);
  if (edit_distance(q, c) <= std::max<std::size_t>(2, q.size() / 4)) return true;
  const auto candidate_words = split(c, '_');
  for (const auto word : split(q, '_')) {
    if (word.empty() || std::find(candidate_words.begin(), candidate_words.end(), word) == candidate_words.end()) {
      return false;
    }
  }
  return true;
}

constexpr std::string_view kTypes[] = {"int", "double", "bool", "range", "size", "list", "string"};

std::string describe_param(const ParamDoc& p) {
  std::string out = p.name + " (" + p.type;
  if (p.required) {
    out += ", required";
  } else if (!p.default_value.empty()) {
    out += ", default " + p.default_value;
  }
  return out + ")";
}

std::string describe_params(const TransformEntry& entry) {
  if (entry.params.empty()) return entry.name + " takes no parameters";
  std::vector<std::string> parts;
  for (const auto& p : entry.params) parts.push_back(describe_param(p));
  return entry.name + " takes: " + join(parts, ", ");
}

// Reads `value` with the getter of `type`, so that a default is checked by the same code that
// will parse the user's value.
void check_parses(const std::string& transform, const ParamDoc& p) {
  const Params params(transform, {{p.name, p.default_value}});
  if (p.type == "int") {
    params.get_int(p.name, 0);
  } else if (p.type == "double") {
    params.get_double(p.name, 0);
  } else if (p.type == "bool") {
    params.get_bool(p.name, false);
  } else if (p.type == "range") {
    params.get_range(p.name, {0, 0});
  } else if (p.type == "size") {
    params.get_size(p.name, {});
  } else if (p.type == "list") {
    params.get_list(p.name, {});
  }
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

Params Params::parse(std::string_view spec, std::string& name) {
  std::vector<std::string_view> tokens;
  for (std::size_t pos = spec.find_first_not_of(whitespace); pos != std::string_view::npos;) {
    const auto end = spec.find_first_of(whitespace, pos);
    tokens.push_back(spec.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos));
    pos = end == std::string_view::npos ? end : spec.find_first_not_of(whitespace, end);
  }
  if (tokens.empty()) throw std::invalid_argument("empty transform spec; expected \"name key=value ...\"");
  if (tokens.front().find('=') != std::string_view::npos) {
    throw std::invalid_argument("transform spec " + quoted(spec) +
                                " does not start with a transform name; expected \"name key=value ...\"");
  }
  name = std::string(tokens.front());
  std::vector<std::pair<std::string, std::string>> values;
  for (std::size_t i = 1; i < tokens.size(); ++i) {
    const auto token = tokens[i];
    const auto eq = token.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      throw std::invalid_argument("transform spec " + quoted(spec) + ": " + quoted(token) +
                                  (eq == 0 ? " has an empty key" : " is not key=value") +
                                  "; expected \"name key=value ...\" with no spaces around '='");
    }
    std::string key(token.substr(0, eq));
    for (const auto& [seen, unused] : values) {
      if (seen == key) throw std::invalid_argument("transform spec " + quoted(spec) + " gives '" + key + "' twice");
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
  if (entry.name.empty() || entry.name.find_first_of(" \t\r\n=;") != std::string::npos) {
    throw std::invalid_argument("Registry::add: transform name '" + entry.name +
                                "' must be non-empty and contain no spaces, '=' or ';'");
  }
  if (!entry.make) throw std::invalid_argument("Registry::add: transform '" + entry.name + "' has no factory");
  for (std::size_t i = 0; i < entry.params.size(); ++i) {
    const ParamDoc& p = entry.params[i];
    if (p.name.empty() || p.name.find_first_of(" \t\r\n=;") != std::string::npos) {
      throw std::invalid_argument("Registry::add: transform '" + entry.name + "' declares a parameter named '" +
                                  p.name + "'; names must be non-empty and contain no spaces, '=' or ';'");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (entry.params[j].name == p.name) {
        throw std::invalid_argument("Registry::add: transform '" + entry.name + "' declares parameter '" + p.name +
                                    "' twice");
      }
    }
    if (std::find(std::begin(kTypes), std::end(kTypes), p.type) == std::end(kTypes)) {
      throw std::invalid_argument("Registry::add: transform '" + entry.name + "', parameter '" + p.name +
                                  "' has type '" + p.type + "'; use int, double, bool, range, size, list or string");
    }
    if (!p.default_value.empty()) {
      try {
        check_parses(entry.name, p);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("Registry::add: the default of " + std::string(e.what()));
      }
    }
  }

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
  if (!entry) {
    const auto known = names();
    std::vector<std::string> close;
    for (const auto& k : known) {
      if (close_match(name, k)) close.push_back("'" + k + "'");
    }
    std::string message = "unknown transform '" + name + "'; known: " + (known.empty() ? "(none)" : join(known, ", "));
    if (!close.empty()) message += "; did you mean " + join(close, " or ") + "?";
    throw std::invalid_argument(message);
  }

  std::vector<std::string> declared;
  for (const auto& p : entry->params) declared.push_back(p.name);
  for (const auto& [key, value] : parsed.values()) {
    if (std::find(declared.begin(), declared.end(), key) == declared.end()) {
      throw std::invalid_argument(name + ": unknown parameter '" + key + "'; " + describe_params(*entry));
    }
  }
  for (const auto& p : entry->params) {
    if (p.required && !parsed.has(p.name)) {
      throw std::invalid_argument(name + ": missing required parameter '" + p.name + "' in " + quoted(trim(spec)) +
                                  "; " + describe_params(*entry));
    }
  }

  // The entry is never removed or changed once added, so its factory runs without the lock.
  const Params params(name, parsed.values(), std::move(declared));
  TransformPtr made = entry->make(params);
  if (!made) throw std::logic_error(name + ": the registry entry's factory returned no transform");
  if (const auto unread = params.unread(); !unread.empty()) {
    throw std::logic_error(name + ": parameter '" + unread.front() +
                           "' was given but the factory never read it (the entry declares it, so this is a bug in "
                           "the entry: it must read every parameter it declares)");
  }
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
  for (const auto& [name, entry] : entries_) {
    out << name << "  " << entry.doc << '\n';
    std::size_t width = 0;
    for (const auto& p : entry.params) width = std::max(width, p.name.size() + p.type.size() + 3);
    for (const auto& p : entry.params) {
      const std::string head = p.name + "=<" + p.type + ">";
      out << "    " << head << std::string(width - head.size() + 2, ' ');
      if (p.required) {
        out << "required. ";
      } else if (!p.default_value.empty()) {
        out << "default " << p.default_value << ". ";
      }
      out << p.doc << '\n';
    }
  }
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
