// Shard patterns: brace ranges and lists ("train-{000000..000146}.tar", "{a,b}.tar") expanded as
// bash does, then wildcards through glob(3); and which file names are tar shards.
#include <glob.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <set>
#include <stdexcept>
#include <stoke/remote/url.hpp>
#include <string>
#include <vector>

#include "image_files.hpp"
#include "stoke/nodes/tar_shards.hpp"

namespace stoke::nodes {

namespace fs = std::filesystem;

namespace {

/// Expands the first (outermost, leftmost) brace group of `pattern`, recursively.
void expand_braces(const std::string& pattern, std::vector<std::string>& out, std::string_view whole) {
  const std::size_t open = pattern.find('{');
  if (open == std::string::npos) {
    if (pattern.find('}') != std::string::npos) {
      throw std::invalid_argument("shard pattern '" + std::string(whole) + "': '}' without '{'");
    }
    out.push_back(pattern);
    return;
  }
  std::size_t close = open;
  std::vector<std::size_t> commas;
  int depth = 0;
  for (std::size_t i = open; i < pattern.size(); ++i) {
    if (pattern[i] == '{') ++depth;
    if (pattern[i] == '}' && --depth == 0) {
      close = i;
      break;
    }
    if (pattern[i] == ',' && depth == 1) commas.push_back(i);
  }
  if (depth != 0) throw std::invalid_argument("shard pattern '" + std::string(whole) + "': '{' without '}'");
  const std::string head = pattern.substr(0, open);
  const std::string tail = pattern.substr(close + 1);
  const std::string body = pattern.substr(open + 1, close - open - 1);
  std::vector<std::string> choices;
  if (!commas.empty()) {
    std::size_t from = open + 1;
    for (const std::size_t comma : commas) {
      choices.push_back(pattern.substr(from, comma - from));
      from = comma + 1;
    }
    choices.push_back(pattern.substr(from, close - from));
  } else if (const std::size_t dots = body.find(".."); dots != std::string::npos) {
    const std::string first = body.substr(0, dots);
    const std::string last = body.substr(dots + 2);
    const auto number = [&](const std::string& text) {
      unsigned long long value = 0;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (text.empty() || error != std::errc{} || end != text.data() + text.size()) {
        throw std::invalid_argument("shard pattern '" + std::string(whole) + "': range {" + body +
                                    "} must be {first..last} with decimal numbers");
      }
      return value;
    };
    const unsigned long long lo = number(first);
    const unsigned long long hi = number(last);
    if (hi < lo || hi - lo >= 10000000ULL) {
      throw std::invalid_argument("shard pattern '" + std::string(whole) + "': range {" + body +
                                  "} must go up, with fewer than 10 million values");
    }
    const int width = first.size() > 1 && first[0] == '0' ? static_cast<int>(first.size()) : 0;
    for (unsigned long long v = lo; v <= hi; ++v) {
      char text[32];
      std::snprintf(text, sizeof text, "%0*llu", width, v);
      choices.emplace_back(text);
    }
  } else {
    choices.push_back("{" + body + "}");  // no comma and no range: literal braces, as in bash
    for (const std::string& choice : choices) {
      std::vector<std::string> rest;
      expand_braces(tail, rest, whole);
      for (const std::string& r : rest) out.push_back(head + choice + r);
    }
    return;
  }
  for (const std::string& choice : choices) expand_braces(head + choice + tail, out, whole);
}

bool has_wildcard(std::string_view text) { return text.find_first_of("*?[") != std::string_view::npos; }

}  // namespace

std::vector<fs::path> expand_shard_pattern(std::string_view pattern) {
  std::vector<std::string> expanded;
  expand_braces(std::string(pattern), expanded, pattern);
  std::set<std::string> paths;
  for (const std::string& path : expanded) {
    if (!has_wildcard(path)) {
      paths.insert(path);
      continue;
    }
    if (remote::RemoteUrl::is_remote(path)) {
      throw std::invalid_argument("shard pattern '" + remote::redact(pattern) +
                                  "': wildcards need a file system to match against; name remote shards with braces, "
                                  "e.g. https://host/train-{000000..000099}.tar");
    }
    glob_t found{};
    const int status = ::glob(path.c_str(), 0, nullptr, &found);
    if (status == 0) {
      for (std::size_t i = 0; i < found.gl_pathc; ++i) paths.insert(found.gl_pathv[i]);
    }
    ::globfree(&found);
    if (status == GLOB_NOMATCH) {
      throw std::runtime_error("shard pattern '" + std::string(pattern) + "': '" + path + "' matches no file");
    }
    if (status != 0)
      throw std::runtime_error("shard pattern '" + std::string(pattern) + "': cannot list '" + path + "'");
  }
  return {paths.begin(), paths.end()};
}

bool is_tar_shard_name(const fs::path& path) {
  const std::string name = detail::lower_ascii(path.filename().string());
  for (const char* suffix : {".tar", ".tgz", ".tar.gz", ".tar.zst", ".tar.bz2", ".tar.xz", ".tar.lz4"}) {
    const std::size_t n = std::strlen(suffix);
    if (name.size() > n && name.compare(name.size() - n, n, suffix) == 0) return true;
  }
  return false;
}

}  // namespace stoke::nodes
