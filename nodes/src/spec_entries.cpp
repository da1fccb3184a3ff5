#include "spec_entries.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <stdexcept>

#include "dataset_support.hpp"

namespace stoke::nodes::detail {

namespace {

constexpr std::string_view kTypes[] = {"int", "double", "bool", "range", "size", "list", "string"};

bool bad_name(std::string_view name) { return name.empty() || name.find_first_of(" \t\r\n=;") != std::string::npos; }

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

std::string describe_param(const ParamDoc& p) {
  std::string out = p.name + " (" + p.type;
  if (p.required) {
    out += ", required";
  } else if (!p.default_value.empty()) {
    out += ", default " + p.default_value;
  }
  return out + ")";
}

std::string describe_params(const std::string& name, const std::vector<ParamDoc>& params) {
  if (params.empty()) return name + " takes no parameters";
  std::vector<std::string> parts;
  for (const auto& p : params) parts.push_back(describe_param(p));
  return name + " takes: " + join(parts, ", ");
}

}  // namespace

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

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string in_quotes(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

void check_entry(std::string_view adder, const std::string& name, bool has_factory,
                 const std::vector<ParamDoc>& params) {
  const std::string who = std::string(adder) + " '" + name + "'";
  if (bad_name(name))
    throw std::invalid_argument(who + ": the name must be non-empty and contain no spaces, '=' or ';'");
  if (!has_factory) throw std::invalid_argument(who + " has no factory");
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ParamDoc& p = params[i];
    if (bad_name(p.name)) {
      throw std::invalid_argument(who + " declares a parameter named '" + p.name +
                                  "'; names must be non-empty and contain no spaces, '=' or ';'");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (params[j].name == p.name) throw std::invalid_argument(who + " declares parameter '" + p.name + "' twice");
    }
    if (std::find(std::begin(kTypes), std::end(kTypes), p.type) == std::end(kTypes)) {
      throw std::invalid_argument(who + ", parameter '" + p.name + "' has type '" + p.type +
                                  "'; use int, double, bool, range, size, list or string");
    }
    if (!p.default_value.empty()) {
      try {
        read_as_declared(Params(name, {{p.name, p.default_value}}), p);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string(adder.substr(0, adder.find(": "))) + ": the default of " + e.what());
      }
    }
  }
}

void read_as_declared(const Params& params, const ParamDoc& p) {
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
  } else {
    params.get_string(p.name, {});
  }
}

std::string unknown_name(std::string_view kind, std::string_view name, const std::vector<std::string>& known) {
  std::vector<std::string> close;
  for (const auto& k : known) {
    if (close_match(name, k)) close.push_back(in_quotes(k));
  }
  std::string message = "unknown " + std::string(kind) + " '" + std::string(name) +
                        "'; known: " + (known.empty() ? "(none)" : join(known, ", "));
  if (!close.empty()) message += "; did you mean " + join(close, " or ") + "?";
  return message;
}

Params bind(std::string_view spec, const std::string& name, const Params& parsed, const std::vector<ParamDoc>& params) {
  std::vector<std::string> declared;
  for (const auto& p : params) declared.push_back(p.name);
  for (const auto& [key, value] : parsed.values()) {
    if (std::find(declared.begin(), declared.end(), key) == declared.end()) {
      throw std::invalid_argument(name + ": unknown parameter '" + key + "'; " + describe_params(name, params));
    }
  }
  for (const auto& p : params) {
    if (p.required && !parsed.has(p.name)) {
      throw std::invalid_argument(name + ": missing required parameter '" + p.name + "' in " + in_quotes(trim(spec)) +
                                  "; " + describe_params(name, params));
    }
  }
  return Params(name, parsed.values(), std::move(declared));
}

void check_all_read(const std::string& name, const Params& params) {
  if (const auto unread = params.unread(); !unread.empty()) {
    throw std::logic_error(name + ": parameter '" + unread.front() +
                           "' was given but the factory never read it (the entry declares it, so this is a bug in "
                           "the entry: it must read every parameter it declares)");
  }
}

std::string help_of(const std::string& name, const std::string& doc, const std::vector<ParamDoc>& params) {
  std::ostringstream out;
  out << name << "  " << doc << '\n';
  std::size_t width = 0;
  for (const auto& p : params) width = std::max(width, p.name.size() + p.type.size() + 3);
  for (const auto& p : params) {
    const std::string head = p.name + "=<" + p.type + ">";
    out << "    " << head << std::string(width - head.size() + 2, ' ');
    if (p.required) {
      out << "required. ";
    } else if (!p.default_value.empty()) {
      out << "default " << p.default_value << ". ";
    }
    out << p.doc << '\n';
  }
  return out.str();
}

}  // namespace stoke::nodes::detail
