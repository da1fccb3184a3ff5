// ConvAlgorithmCache: the convolution algorithms cuDNN's timing search chose, kept in a JSON file
// so that the next process on the same GPU goes straight to the kernels instead of searching again
// (CudaBackend::conv_algo, cuda/conv2d_cuda.cpp). Private to stoke::nn; host code only (no CUDA),
// so it builds and is tested in every build.
//
//   const ConvAlgorithmIdentity gpu{.gpu = "NVIDIA H200", .sm_major = 9, .sm_minor = 0, .cudnn = 91200};
//   std::optional<ConvAlgorithmCache> cache = open_conv_algorithm_cache(gpu);  // nullopt: turned off
//   if (const ConvAlgorithmEntry* known = cache->find(key)) return *known;
//   cache->insert(key, searched);
//   cache->save();  // the whole file, atomically; a failure is a warning, never an error
//
// The file, <folder>/cudnn-algorithms-<gpu>-sm<major><minor>-cudnn<version>.json, is named for
// what makes its choices valid and records it too, with its format version. A file that is
// corrupt, of another format version or of another GPU or cuDNN is ignored (a warning on stderr
// names it) and replaced by the next save. It holds at most `capacity` entries: beyond, the oldest
// go first.
#pragma once

#include <cstddef>
#include <deque>
#include <filesystem>
#include <optional>
#include <string>
#include <unordered_map>

namespace stoke::nn {

/// What a search chose for one problem: a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t, the
/// cudnnMathType_t to run it with, and its workspace in bytes.
struct ConvAlgorithmEntry {
  int algo = 0;
  int math = 0;
  std::size_t workspace = 0;
  bool operator==(const ConvAlgorithmEntry&) const = default;
};

/// What a cached choice is valid for: the GPU model, its compute capability, cudnnGetVersion().
struct ConvAlgorithmIdentity {
  std::string gpu;  ///< cudaDeviceProp::name, e.g. "NVIDIA H200"
  int sm_major = 0;
  int sm_minor = 0;
  std::size_t cudnn = 0;  ///< e.g. 91200 for 9.12.0
  bool operator==(const ConvAlgorithmIdentity&) const = default;
};

/// The file's name for `identity`: cudnn-algorithms-<gpu>-sm<major><minor>-cudnn<version>.json,
/// the GPU's name lower-cased with every run of other characters than [a-z0-9] made one '-'.
std::string conv_algorithm_cache_file_name(const ConvAlgorithmIdentity& identity);

/// False when $STOKE_CUDNN_CACHE is 0, off, false or no (any case): the searches are then kept
/// in memory only.
bool conv_algorithm_cache_enabled();

class ConvAlgorithmCache {
 public:
  static constexpr int kFormatVersion = 1;
  static constexpr std::size_t kDefaultCapacity = 4096;

  /// Loads `file` if it exists and was written in this format for `identity` (its newest
  /// `capacity` entries); else starts empty, after a warning on stderr when the file exists but
  /// cannot be used. Never throws for the file's sake.
  ConvAlgorithmCache(std::filesystem::path file, ConvAlgorithmIdentity identity,
                     std::size_t capacity = kDefaultCapacity);

  /// The entry of `key`, or null. The pointer lives until the next insert.
  const ConvAlgorithmEntry* find(const std::string& key) const;
  /// Adds `entry` under `key` as the newest (a key already there keeps its age and takes the new
  /// entry), then drops the oldest entries beyond the capacity.
  void insert(const std::string& key, const ConvAlgorithmEntry& entry);
  /// Writes the whole cache to its file (its folder created), atomically. Returns false when it
  /// cannot, with a warning on stderr the first time.
  bool save();

  std::size_t size() const noexcept { return entries_.size(); }
  std::size_t capacity() const noexcept { return capacity_; }
  const std::filesystem::path& file() const noexcept { return file_; }
  const ConvAlgorithmIdentity& identity() const noexcept { return identity_; }

 private:
  void load();
  std::string to_json() const;

  std::filesystem::path file_;
  ConvAlgorithmIdentity identity_;
  std::size_t capacity_;
  std::unordered_map<std::string, ConvAlgorithmEntry> entries_;
  std::deque<std::string> order_;  // the keys of entries_, oldest first
  bool warned_save_ = false;
};

/// The cache of `identity` in base::cache_folder(), loaded; nullopt when $STOKE_CUDNN_CACHE turns
/// it off or there is no folder.
std::optional<ConvAlgorithmCache> open_conv_algorithm_cache(const ConvAlgorithmIdentity& identity);

}  // namespace stoke::nn
