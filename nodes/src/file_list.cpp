#include "stoke/nodes/file_list.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "dataset_support.hpp"

namespace stoke::nodes {

namespace fs = std::filesystem;

namespace {

using detail::max_text_label;
using detail::trim;

// What separates a line's fields and tags.
constexpr std::string_view field_spaces = " \t";

enum class LabelError { none, not_integer, negative, too_large };

LabelError parse_label(std::string_view text, int& label) {
  if (text.empty()) return LabelError::not_integer;
  long long value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error == std::errc::result_out_of_range)
    return text.front() == '-' ? LabelError::negative : LabelError::too_large;
  if (error != std::errc{} || stop != end) return LabelError::not_integer;
  if (value < 0) return LabelError::negative;
  if (value > max_text_label) return LabelError::too_large;
  label = static_cast<int>(value);
  return LabelError::none;
}

class LineError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

int checked_label(std::string_view text) {
  int label = 0;
  switch (parse_label(text, label)) {
    case LabelError::none:
      break;
    case LabelError::not_integer:
      throw LineError("label '" + std::string(text) + "' is not an integer");
    case LabelError::negative:
      throw LineError("label '" + std::string(text) + "' is negative (labels are 0, 1, 2, ...)");
    case LabelError::too_large:
      throw LineError("label '" + std::string(text) + "' is too large (at most " + std::to_string(max_text_label) +
                      ")");
  }
  return label;
}

/// One legacy line split into its path and label fields.
struct Fields {
  std::string path;
  std::string_view label;
};

/// Splits a trimmed, non-empty legacy line. A path in double quotes may contain anything ("" is a
/// quote); otherwise the line splits at its last comma.
Fields split(std::string_view line) {
  if (line.front() == '"') {
    std::string path;
    std::size_t i = 1;
    for (;; ++i) {
      if (i >= line.size()) throw LineError("unterminated quoted path (a '\"' opens it but none closes it)");
      if (line[i] != '"') {
        path += line[i];
      } else if (i + 1 < line.size() && line[i + 1] == '"') {
        path += '"';
        ++i;
      } else {
        break;
      }
    }
    const std::string_view rest = trim(line.substr(i + 1));
    if (rest.empty() || rest.front() != ',') {
      throw LineError("expected ',' and a label after the quoted path, found '" + std::string(rest) + "'");
    }
    return {std::move(path), trim(rest.substr(1))};
  }
  const auto comma = line.rfind(',');
  if (comma == std::string_view::npos) {
    throw LineError("no ',' in '" + std::string(line) + "': each line is path,label");
  }
  return {std::string(trim(line.substr(0, comma))), trim(line.substr(comma + 1))};
}

/// Splits a line into CSV fields, each trimmed. A field in double quotes may hold commas and
/// quotes ("" is one); a quote inside an unquoted field is taken as it is.
std::vector<std::string> split_csv(std::string_view line) {
  std::vector<std::string> fields;
  std::size_t i = 0;
  const auto skip_spaces = [&] {
    while (i < line.size() && field_spaces.find(line[i]) != std::string_view::npos) ++i;
  };
  for (;;) {
    skip_spaces();
    std::string field;
    if (i < line.size() && line[i] == '"') {
      for (++i;; ++i) {
        if (i >= line.size()) {
          throw LineError("unterminated quoted field " + std::to_string(fields.size() + 1) +
                          " (a '\"' opens it but none closes it)");
        }
        if (line[i] != '"') {
          field += line[i];
        } else if (i + 1 < line.size() && line[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          ++i;
          break;
        }
      }
      skip_spaces();
      if (i < line.size() && line[i] != ',') {
        throw LineError("expected ',' after quoted field " + std::to_string(fields.size() + 1) + ", found '" +
                        std::string(line.substr(i)) + "'");
      }
    } else {
      const auto comma = std::min(line.find(',', i), line.size());
      field = std::string(trim(line.substr(i, comma - i)));
      i = comma;
    }
    fields.push_back(std::move(field));
    if (i >= line.size()) return fields;
    ++i;  // the comma
  }
}

/// The column header of the column format, or false for a legacy first line (a `path,label` or
/// other two-field header, or an item).
bool is_column_header(const std::vector<std::string>& names) {
  int label = 0;
  if (parse_label(names.back(), label) != LabelError::not_integer) return false;  // an item's line
  if (names.size() == 2 && names[0] == "path" && names[1] == "label") return false;
  const auto named = [&](std::string_view name) { return std::find(names.begin(), names.end(), name) != names.end(); };
  return named("path") || named("mask") || names.size() > 2;
}

std::string lower_ascii(std::string text) {
  for (char& c : text) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return text;
}

enum class Role : std::uint8_t { path, label, mask, target };

/// The header's columns: each one's role, and for targets its index in target_columns.
struct Columns {
  std::vector<Role> roles;
  std::vector<std::size_t> target_of;  ///< per column; for targets, the index among the targets
  std::vector<std::string> names;
};

Columns parse_header(const std::vector<std::string>& names, std::vector<FileList::TargetColumn>& targets) {
  Columns columns;
  columns.names = names;
  for (std::size_t c = 0; c < names.size(); ++c) {
    const std::string& name = names[c];
    if (name.empty()) {
      throw LineError("column " + std::to_string(c + 1) +
                      " of the header has no name (name each column: path, label, mask or a target's name)");
    }
    for (std::size_t earlier = 0; earlier < c; ++earlier) {
      if (names[earlier] == name) {
        throw LineError("duplicate column '" + name + "' (columns " + std::to_string(earlier + 1) + " and " +
                        std::to_string(c + 1) + ")");
      }
    }
    Role role = Role::target;
    if (name == "path") {
      role = Role::path;
    } else if (name == "label") {
      role = Role::label;
    } else if (name == "mask") {
      role = Role::mask;
    } else {
      const std::string lower = lower_ascii(name);
      if (lower == "path" || lower == "label" || lower == "mask") {
        throw LineError("unknown column '" + name + "': the columns path, label and mask are written in lower case ('" +
                        lower + "'); other names are float targets");
      }
    }
    columns.roles.push_back(role);
    columns.target_of.push_back(role == Role::target ? targets.size() : 0);
    if (role == Role::target) targets.push_back({name, {}});
  }
  if (std::find(columns.roles.begin(), columns.roles.end(), Role::path) == columns.roles.end()) {
    throw LineError("the header names no 'path' column (the image files' column is named path)");
  }
  return columns;
}

/// Appends the numbers of a target field (one, or several separated by spaces) to `values`;
/// returns how many.
std::size_t parse_target(std::string_view column, std::string_view field, std::vector<float>& values) {
  std::size_t count = 0;
  for (std::size_t begin = field.find_first_not_of(field_spaces); begin != std::string_view::npos;
       begin = field.find_first_not_of(field_spaces, begin)) {
    const std::size_t end = std::min(field.find_first_of(field_spaces, begin), field.size());
    std::string_view token = field.substr(begin, end - begin);
    begin = end;
    const std::string_view written = token;
    if (token.size() > 1 && token.front() == '+') token.remove_prefix(1);
    float value = 0;
    const auto [stop, error] = std::from_chars(token.data(), token.data() + token.size(), value);
    if (error == std::errc::result_out_of_range) {
      throw LineError("column '" + std::string(column) + "': '" + std::string(written) + "' is out of a float's range");
    }
    if (error != std::errc{} || stop != token.data() + token.size()) {
      throw LineError("column '" + std::string(column) + "': '" + std::string(written) +
                      "' is not a number (a target is a number, or numbers separated by spaces)");
    }
    values.push_back(value);
    ++count;
  }
  if (count == 0) {
    throw LineError("column '" + std::string(column) +
                    "' is empty (a target is a number, or numbers separated by spaces)");
  }
  return count;
}

}  // namespace

FileList::FileList(fs::path list_file, fs::path root) : list_file_(std::move(list_file)), root_(std::move(root)) {
  if (root_.empty()) root_ = list_file_.parent_path();
  std::vector<std::byte> bytes;
  try {
    bytes = read_file(list_file_.string());
  } catch (const std::runtime_error& error) {
    throw std::runtime_error(std::string("FileList: ") + error.what() + " (pass a text file of path,label lines)");
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const std::string where = list_file_.string() + ":";
  const auto resolve = [&](std::string written) {
    fs::path path(std::move(written));
    return path.is_relative() ? root_ / path : path;
  };
  // Every resolved path goes into names_, back to back; ends_ marks where each ends. Reserving by
  // the list's size (plus the root per line) keeps the arena from doubling while it fills.
  const std::size_t lines = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  names_.reserve(text.size() + lines * (root_.native().size() + 1));
  ends_.reserve(lines + 1);
  labels_.reserve(lines);
  ends_.push_back(0);
  const auto add_slot = [&](const fs::path& path) {
    names_ += path.native();
    ends_.push_back(names_.size());
  };

  int largest = -1;
  bool first = true;
  std::optional<Columns> columns;   // set by a column header
  std::size_t first_row_line = 0;   // the row that fixed the targets' lengths
  std::vector<std::size_t> counts;  // values per target column, from the first row
  std::size_t line_number = 0;
  for (std::size_t begin = 0; begin < text.size();) {
    auto end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(begin, end - begin);
    begin = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    line = trim(line);
    if (line.empty() || line.front() == '#') continue;

    try {
      if (first) {
        first = false;
        std::vector<std::string> names;
        try {
          names = split_csv(line);
        } catch (const LineError&) {
          // Not a column header; the legacy split below says what is wrong with the line.
        }
        if (!names.empty() && is_column_header(names)) {
          columns = parse_header(names, target_columns_);
          has_masks_ = std::find(columns->roles.begin(), columns->roles.end(), Role::mask) != columns->roles.end();
          continue;
        }
        int label = 0;
        if (parse_label(split(line).label, label) == LabelError::not_integer) continue;  // a legacy header
      }

      if (!columns) {
        Fields fields = split(line);
        const int label = checked_label(fields.label);
        if (fields.path.empty()) throw LineError("empty path before the ','");
        add_slot(resolve(std::move(fields.path)));
        labels_.push_back(label);
        largest = std::max(largest, label);
        continue;
      }

      std::vector<std::string> fields = split_csv(line);
      const std::vector<std::string>& names = columns->names;
      if (fields.size() != names.size()) {
        std::string header;
        for (const std::string& name : names) header += (header.empty() ? "" : ",") + name;
        throw LineError(std::to_string(fields.size()) + " fields, but the header names " +
                        std::to_string(names.size()) + " columns (" + header +
                        "); quote a field that holds a comma (\"a,b.jpg\")");
      }
      const bool first_row = labels_.empty();
      if (first_row) {
        first_row_line = line_number;
        counts.assign(target_columns_.size(), 0);
      }
      fs::path path;
      int label = -1;
      std::string mask;
      for (std::size_t c = 0; c < names.size(); ++c) {
        std::string& field = fields[c];
        switch (columns->roles[c]) {
          case Role::path:
            if (field.empty()) throw LineError("column 'path' is empty");
            path = resolve(std::move(field));
            break;
          case Role::label:
            if (!field.empty()) label = checked_label(field);
            break;
          case Role::mask:
            mask = std::move(field);
            break;
          case Role::target: {
            const std::size_t t = columns->target_of[c];
            const std::size_t count = parse_target(names[c], field, target_values_);
            if (first_row) {
              counts[t] = count;
            } else if (count != counts[t]) {
              throw LineError("column '" + names[c] + "' has " + std::to_string(count) + " values, but " +
                              std::to_string(counts[t]) + " on line " + std::to_string(first_row_line) +
                              " (every row gives a target the same number of values)");
            }
            break;
          }
        }
      }
      if (first_row) {
        for (std::size_t t = 0; t < counts.size(); ++t) {
          if (counts[t] > 1) target_columns_[t].shape = {static_cast<std::int64_t>(counts[t])};
          target_stride_ += counts[t];
        }
      }
      add_slot(path);
      if (has_masks_) add_slot(mask.empty() ? fs::path() : resolve(std::move(mask)));
      labels_.push_back(label);
      largest = std::max(largest, label);
    } catch (const LineError& error) {
      throw std::runtime_error(where + std::to_string(line_number) + ": " + error.what());
    }
  }
  for (int label = 0; label <= largest; ++label) classes_.push_back(std::to_string(label));
  names_.shrink_to_fit();
  ends_.shrink_to_fit();
  labels_.shrink_to_fit();
  target_values_.shrink_to_fit();
}

void FileList::check_index(std::size_t i) const {
  if (i >= labels_.size()) detail::item_out_of_range("FileList '" + list_file_.string() + "'", i, labels_.size());
}

fs::path FileList::path(std::size_t i) const {
  check_index(i);
  return fs::path(slot(i * slots_per_item()));
}

fs::path FileList::mask_path(std::size_t i) const {
  check_index(i);
  return has_masks_ ? fs::path(slot(i * 2 + 1)) : fs::path();
}

int FileList::label(std::size_t i) const {
  check_index(i);
  return labels_[i];
}

std::string FileList::name(std::size_t i) const {
  check_index(i);
  return std::string(slot(i * slots_per_item()));
}

Sample FileList::read(std::size_t i) const {
  Sample sample = detail::read_file_sample(path(i), labels_[i], i);
  const fs::path mask = mask_path(i);
  if (!mask.empty()) {
    try {
      sample.mask = Bytes(read_file(mask.string()));
    } catch (const std::runtime_error& error) {
      throw std::runtime_error("FileList: the mask of " + sample.name + ": " + error.what());
    }
    sample.mask_name = mask.string();
  }
  const float* values = target_values_.data() + i * target_stride_;
  for (const TargetColumn& column : target_columns_) {
    const std::size_t count = column.shape.empty() ? 1 : static_cast<std::size_t>(column.shape[0]);
    sample.targets.emplace(column.name, Target{column.shape, std::vector<float>(values, values + count)});
    values += count;
  }
  return sample;
}

}  // namespace stoke::nodes
