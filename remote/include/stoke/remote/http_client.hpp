// HttpClient: byte ranges of remote objects over HTTP(S) and S3, through libcurl -- the one way
// stoke reads data that does not sit on a local disk. Connections are kept and reused (a pool of
// libcurl handles, one per request in flight); a request that fails for a reason that may pass (a
// 5xx or 429, a refused or dropped connection, a stall) is tried again after a growing wait; one
// that cannot succeed (404, 403, a range past the object's end) fails at once, naming the URL.
//
//   remote::HttpClient client({.stall_limit = std::chrono::seconds(10)});
//   const auto url = remote::RemoteUrl::parse("https://host/train-000000.tar");
//   const std::uint64_t bytes = client.size(url);
//   std::vector<std::byte> head = client.read(url, 0, 512);
//
// Thread-safe: any number of threads may call it at once (each request takes a handle of its own).
// Messages name URLs without their credentials (RemoteUrl::text()).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "stoke/remote/url.hpp"

namespace stoke::remote {

struct FetchOptions {
  /// Tries after the first for a failure that may pass.
  int retries = 4;
  /// The wait before the first retry, doubled for each next one.
  std::chrono::milliseconds backoff{250};
  /// A request during which no byte arrives for this long fails (and is retried): a server that
  /// stops answering mid-object never hangs the run.
  std::chrono::milliseconds stall_limit{std::chrono::seconds(30)};
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(10)};
};

/// What a client has fetched since it was made.
struct FetchStats {
  std::uint64_t requests = 0;  ///< every try, retries included
  std::uint64_t retries = 0;
  std::uint64_t connections = 0;  ///< new connections opened (fewer than requests: kept and reused)
  std::uint64_t bytes = 0;  ///< body bytes received
  double seconds = 0;       ///< spent in requests (summed over the threads)
};

/// A request that failed for good: the URL (without credentials), the HTTP status (0 when no
/// response came) and what to do about it, in what().
class FetchError : public std::runtime_error {
 public:
  FetchError(const std::string& message, int status) : std::runtime_error(message), status_(status) {}
  /// The HTTP status of the last try; 0 when there was no response (connection, stall).
  int status() const noexcept { return status_; }

 private:
  int status_;
};

class HttpClient {
 public:
  explicit HttpClient(FetchOptions options = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  /// The object's size in bytes (a HEAD request). Throws FetchError naming the URL.
  std::uint64_t size(const RemoteUrl& url);
  /// Bytes [offset, offset + out.size()) of the object into `out` (a range request). Throws
  /// FetchError naming the URL when the object ends before them (a truncated shard) or the
  /// request fails for good.
  void read_into(const RemoteUrl& url, std::uint64_t offset, std::span<std::byte> out);
  std::vector<std::byte> read(const RemoteUrl& url, std::uint64_t offset, std::size_t length);
  /// Bytes [0, size) of the object in range requests of `chunk_bytes`, each handed to `sink` in
  /// order: a download to a file without holding the object in memory. Throws what read_into
  /// throws, and what `sink` throws.
  void read_chunks(const RemoteUrl& url, std::uint64_t size, std::size_t chunk_bytes,
                   const std::function<void(std::span<const std::byte>)>& sink);

  FetchStats stats() const;
  const FetchOptions& options() const noexcept { return options_; }

 private:
  struct Impl;
  FetchOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoke::remote
