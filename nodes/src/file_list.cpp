#include "stoke/nodes/file_list.hpp"

#include <algorithm>
#include <charconv>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "dataset_support.hpp"

namespace stoke::nodes {

namespace fs = std::filesystem;

namespace {

// Labels index classes(), which names every label up to the largest: a typo such as 10000000
// would otherwise allocate millions of names.
constexpr int max_label = 999999;

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

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
  if (value > max_label) return LabelError::too_large;
  label = static_cast<int>(value);
  return LabelError::none;
}

/// One line split into its path and label fields.
struct Fields {
  std::string path;
  std::string_view label;
};

class LineError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Splits a trimmed, non-empty line. A path in double quotes may contain anything ("" is a quote);
/// otherwise the line splits at its last comma.
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

  int largest = -1;
  bool first = true;
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

    const auto fail = [&](const std::string& what) -> std::runtime_error {
      return std::runtime_error(where + std::to_string(line_number) + ": " + what);
    };
    Fields fields;
    try {
      fields = split(line);
    } catch (const LineError& error) {
      throw fail(error.what());
    }
    int label = 0;
    const LabelError error = parse_label(fields.label, label);
    const bool header = first && error == LabelError::not_integer;
    first = false;
    if (header) continue;
    switch (error) {
      case LabelError::none:
        break;
      case LabelError::not_integer:
        throw fail("label '" + std::string(fields.label) + "' is not an integer");
      case LabelError::negative:
        throw fail("label '" + std::string(fields.label) + "' is negative (labels are 0, 1, 2, ...)");
      case LabelError::too_large:
        throw fail("label '" + std::string(fields.label) + "' is too large (at most " + std::to_string(max_label) +
                   ")");
    }
    if (fields.path.empty()) throw fail("empty path before the ','");
    fs::path path(fields.path);
    if (path.is_relative()) path = root_ / path;
    items_.push_back({std::move(path), label});
    largest = std::max(largest, label);
  }
  for (int label = 0; label <= largest; ++label) classes_.push_back(std::to_string(label));
}

const fs::path& FileList::path(std::size_t i) const {
  if (i >= items_.size()) detail::item_out_of_range("FileList '" + list_file_.string() + "'", i, items_.size());
  return items_[i].path;
}

int FileList::label(std::size_t i) const {
  if (i >= items_.size()) detail::item_out_of_range("FileList '" + list_file_.string() + "'", i, items_.size());
  return items_[i].label;
}

std::string FileList::name(std::size_t i) const { return path(i).string(); }

Sample FileList::read(std::size_t i) const { return detail::read_file_sample(path(i), items_[i].label, i); }

}  // namespace stoke::nodes
