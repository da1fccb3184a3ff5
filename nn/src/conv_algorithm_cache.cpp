// ConvAlgorithmCache: the file's format, loading it as untrusted input, and saving it atomically.
//
// The file, written by ordered_json so that a person reads it top down:
//   {"format": "stoke-cudnn-algorithms", "version": 1,
//    "gpu": "NVIDIA H200", "sm_major": 9, "sm_minor": 0, "cudnn": 91200,
//    "entries": [{"key": "fwd x{...}nchw ...", "algo": 1, "math": 3, "workspace": 0}, ...]}
// with the entries oldest first.
#include "conv_algorithm_cache.hpp"

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "stoke/base/atomic_file.hpp"
#include "stoke/base/cache_folder.hpp"

namespace stoke::nn {
namespace {

namespace fs = std::filesystem;
using CacheJson = nlohmann::ordered_json;

constexpr const char* kAlgorithmCacheFormat = "stoke-cudnn-algorithms";
// A file of 4096 entries is about 1 MiB; anything much larger is not one this code wrote.
constexpr std::uintmax_t kAlgorithmCacheMaxBytes = std::uintmax_t{16} << 20;
constexpr std::size_t kGpuNameMaxChars = 64;

// Why a cache file cannot be used, completing "the file ...".
struct UnusableCacheFile : std::runtime_error {
  using std::runtime_error::runtime_error;
};


char lower_ascii(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

std::string sanitized_gpu_name(std::string_view name) {
  std::string out;
  for (const char c : name) {
    const char lower = lower_ascii(c);
    if ((lower >= 'a' && lower <= 'z') || (lower >= '0' && lower <= '9')) {
      out += lower;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
    if (out.size() >= kGpuNameMaxChars) break;
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "gpu" : out;
}

std::string describe_identity(const ConvAlgorithmIdentity& id) {
  return "'" + id.gpu + "' (compute capability " + std::to_string(id.sm_major) + "." + std::to_string(id.sm_minor) +
         ", cuDNN " + std::to_string(id.cudnn) + ")";
}

void warn_about_cache(const std::string& message) { std::fprintf(stderr, "stoke: warning: %s\n", message.c_str()); }

// ---- reading --------------------------------------------------------------------------------

std::string read_cache_text(const fs::path& file) {
  std::error_code error;
  const std::uintmax_t size = fs::file_size(file, error);
  if (error) throw UnusableCacheFile("cannot be read (" + error.message() + ")");
  if (size > kAlgorithmCacheMaxBytes) {
    throw UnusableCacheFile("has " + std::to_string(size) + " bytes, far more than a cache of " +
                            std::to_string(ConvAlgorithmCache::kDefaultCapacity) + " entries");
  }
  std::string text(static_cast<std::size_t>(size), '\0');
  std::ifstream in(file, std::ios::binary);
  if (!in.read(text.data(), static_cast<std::streamsize>(text.size()))) throw UnusableCacheFile("cannot be read");
  return text;
}

CacheJson parse_cache_json(const std::string& text) {
  CacheJson json = CacheJson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) throw UnusableCacheFile("is not a JSON object (a corrupt file?)");
  return json;
}

std::string text_field(const CacheJson& json, const char* name) {
  const auto found = json.find(name);
  if (found == json.end() || !found->is_string()) {
    throw UnusableCacheFile(std::string("has no string \"") + name + "\"");
  }
  return found->get<std::string>();
}

std::uint64_t count_field(const CacheJson& json, const char* name) {
  const auto found = json.find(name);
  if (found == json.end() || !found->is_number_unsigned()) {
    throw UnusableCacheFile(std::string("has no non-negative integer \"") + name + "\"");
  }
  return found->get<std::uint64_t>();
}

int int_field(const CacheJson& json, const char* name) {
  const std::uint64_t value = count_field(json, name);
  if (value > static_cast<std::uint64_t>(INT_MAX)) {
    throw UnusableCacheFile(std::string("has \"") + name + "\" " + std::to_string(value) + ", out of range");
  }
  return static_cast<int>(value);
}

ConvAlgorithmIdentity identity_fields(const CacheJson& json) {
  return {.gpu = text_field(json, "gpu"),
          .sm_major = int_field(json, "sm_major"),
          .sm_minor = int_field(json, "sm_minor"),
          .cudnn = static_cast<std::size_t>(count_field(json, "cudnn"))};
}

// Throws unless `json` is this format's, of this version, written for `expected`.
void check_cache_header(const CacheJson& json, const ConvAlgorithmIdentity& expected) {
  if (text_field(json, "format") != kAlgorithmCacheFormat) {
    throw UnusableCacheFile(std::string("is not a \"") + kAlgorithmCacheFormat + "\" file");
  }
  const std::uint64_t version = count_field(json, "version");
  if (version != static_cast<std::uint64_t>(ConvAlgorithmCache::kFormatVersion)) {
    throw UnusableCacheFile("is format version " + std::to_string(version) + "; this stoke reads version " +
                            std::to_string(ConvAlgorithmCache::kFormatVersion));
  }
  const ConvAlgorithmIdentity found = identity_fields(json);
  if (found != expected) {
    throw UnusableCacheFile("was written for " + describe_identity(found) + ", not " + describe_identity(expected));
  }
}

std::vector<std::pair<std::string, ConvAlgorithmEntry>> read_cache_entries(const CacheJson& json) {
  const auto list = json.find("entries");
  if (list == json.end() || !list->is_array()) throw UnusableCacheFile("has no \"entries\" array");
  std::vector<std::pair<std::string, ConvAlgorithmEntry>> entries;
  entries.reserve(list->size());
  for (const CacheJson& entry : *list) {
    if (!entry.is_object()) throw UnusableCacheFile("has an entry that is not an object");
    entries.emplace_back(text_field(entry, "key"),
                         ConvAlgorithmEntry{.algo = int_field(entry, "algo"),
                                            .math = int_field(entry, "math"),
                                            .workspace = static_cast<std::size_t>(count_field(entry, "workspace"))});
  }
  return entries;
}

}  // namespace

// ---- the folder, the name, the switch -------------------------------------------------------

std::string conv_algorithm_cache_file_name(const ConvAlgorithmIdentity& identity) {
  return "cudnn-algorithms-" + sanitized_gpu_name(identity.gpu) + "-sm" + std::to_string(identity.sm_major) +
         std::to_string(identity.sm_minor) + "-cudnn" + std::to_string(identity.cudnn) + ".json";
}

bool conv_algorithm_cache_enabled() {
  const char* value = std::getenv("STOKE_CUDNN_CACHE");
  if (value == nullptr) return true;
  std::string lower;
  for (const char c : std::string_view(value)) lower += lower_ascii(c);
  return lower != "0" && lower != "off" && lower != "false" && lower != "no";
}

std::optional<ConvAlgorithmCache> open_conv_algorithm_cache(const ConvAlgorithmIdentity& identity) {
  if (!conv_algorithm_cache_enabled()) return std::nullopt;
  const fs::path folder = base::cache_folder();
  if (folder.empty()) return std::nullopt;
  return ConvAlgorithmCache(folder / conv_algorithm_cache_file_name(identity), identity);
}

// ---- the cache ------------------------------------------------------------------------------

ConvAlgorithmCache::ConvAlgorithmCache(fs::path file, ConvAlgorithmIdentity identity, std::size_t capacity)
    : file_(std::move(file)), identity_(std::move(identity)), capacity_(capacity) {
  load();
}

const ConvAlgorithmEntry* ConvAlgorithmCache::find(const std::string& key) const {
  const auto found = entries_.find(key);
  return found == entries_.end() ? nullptr : &found->second;
}

void ConvAlgorithmCache::insert(const std::string& key, const ConvAlgorithmEntry& entry) {
  if (!entries_.insert_or_assign(key, entry).second) return;  // replaced; keeps its age
  order_.push_back(key);
  while (entries_.size() > capacity_) {
    entries_.erase(order_.front());
    order_.pop_front();
  }
}

void ConvAlgorithmCache::load() {
  std::error_code error;
  if (!fs::exists(file_, error)) return;  // nothing saved yet
  try {
    const CacheJson json = parse_cache_json(read_cache_text(file_));
    check_cache_header(json, identity_);
    for (const auto& [key, entry] : read_cache_entries(json)) insert(key, entry);
  } catch (const std::exception& e) {
    entries_.clear();
    order_.clear();
    warn_about_cache("ignoring the cuDNN algorithm cache " + file_.string() + ": the file " + e.what() +
                     "; its convolutions are searched again and the file rewritten");
  }
}

std::string ConvAlgorithmCache::to_json() const {
  CacheJson entries = CacheJson::array();
  for (const std::string& key : order_) {
    const ConvAlgorithmEntry& entry = entries_.at(key);
    entries.push_back({{"key", key}, {"algo", entry.algo}, {"math", entry.math}, {"workspace", entry.workspace}});
  }
  const CacheJson json = {
      {"format", kAlgorithmCacheFormat}, {"version", kFormatVersion},      {"gpu", identity_.gpu},
      {"sm_major", identity_.sm_major},  {"sm_minor", identity_.sm_minor}, {"cudnn", identity_.cudnn},
      {"entries", std::move(entries)}};
  return json.dump(1, ' ', false, CacheJson::error_handler_t::replace) + "\n";
}

bool ConvAlgorithmCache::save() {
  try {
    std::error_code error;
    if (file_.has_parent_path()) fs::create_directories(file_.parent_path(), error);
    if (error) {
      throw std::runtime_error("cannot create the folder of the cuDNN algorithm cache " + file_.string() + ": " +
                               error.message());
    }
    base::write_file_atomically(file_, to_json(), "cuDNN algorithm cache");
    return true;
  } catch (const std::exception& e) {
    if (!warned_save_) {
      warn_about_cache(std::string(e.what()) +
                       "; the algorithms cuDNN's search chooses are kept in memory only (STOKE_CACHE names "
                       "another folder; STOKE_CUDNN_CACHE=0 stops writing the file)");
    }
    warned_save_ = true;
    return false;
  }
}

}  // namespace stoke::nn
