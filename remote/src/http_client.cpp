#include "stoke/remote/http_client.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace stoke::remote {

namespace {

using Clock = std::chrono::steady_clock;

// libcurl's process-wide state, set up once before the first handle.
void init_curl_once() {
  static const bool done = [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw std::runtime_error("libcurl failed to initialise");
    return true;
  }();
  (void)done;
}

struct EasyFree {
  void operator()(CURL* easy) const noexcept { curl_easy_cleanup(easy); }
};
using Easy = std::unique_ptr<CURL, EasyFree>;

struct ListFree {
  void operator()(curl_slist* list) const noexcept { curl_slist_free_all(list); }
};
using HeaderList = std::unique_ptr<curl_slist, ListFree>;

// Where a range request's body goes: `out`, filled from the range's start. A server that ignores
// Range answers 200 with the whole object: the bytes before `offset` are dropped. Bytes past `out`
// end the transfer; an error's body (status 400 and up) is dropped.
struct Sink {
  CURL* easy = nullptr;
  std::span<std::byte> out;
  std::uint64_t offset = 0;
  bool started = false;
  bool discard = false;
  std::uint64_t skip = 0;
  std::size_t filled = 0;
  std::uint64_t received = 0;
  bool overflowed = false;  // more came than asked: the transfer was stopped on purpose
};

std::size_t write_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto& sink = *static_cast<Sink*>(user);
  const std::size_t bytes = size * count;
  sink.received += bytes;
  if (!sink.started) {
    sink.started = true;
    long status = 0;
    curl_easy_getinfo(sink.easy, CURLINFO_RESPONSE_CODE, &status);
    sink.discard = status >= 400;
    if (status == 200) sink.skip = sink.offset;
  }
  if (sink.discard) return bytes;
  std::size_t at = 0;
  if (sink.skip > 0) {
    at = static_cast<std::size_t>(std::min<std::uint64_t>(sink.skip, bytes));
    sink.skip -= at;
  }
  const std::size_t take = std::min(bytes - at, sink.out.size() - sink.filled);
  if (take > 0) std::memcpy(sink.out.data() + sink.filled, data + at, take);
  sink.filled += take;
  if (at + take < bytes) {
    sink.overflowed = true;
    return 0;  // stops the transfer (CURLE_WRITE_ERROR, taken as success below)
  }
  return bytes;
}

// The stall watch of one try: the time the last byte came (or the request began), and whether the
// try was ended for going `limit` without one. libcurl calls it at least once a second.
struct StallWatch {
  std::chrono::milliseconds limit;
  Clock::time_point last = Clock::now();
  curl_off_t seen = 0;
  bool stalled = false;
};

int watch_stall(void* user, curl_off_t, curl_off_t received, curl_off_t, curl_off_t sent) {
  auto& watch = *static_cast<StallWatch*>(user);
  const auto now = Clock::now();
  if (received + sent != watch.seen) {
    watch.seen = received + sent;
    watch.last = now;
    return 0;
  }
  watch.stalled = now - watch.last > watch.limit;
  return watch.stalled ? 1 : 0;  // non-zero ends the transfer (CURLE_ABORTED_BY_CALLBACK)
}

// One try: the transfer's code, the HTTP status (0: none) and libcurl's words for a failure.
struct Attempt {
  CURLcode code = CURLE_OK;
  long status = 0;
  std::string error;
};

// Whether a failed try may succeed when tried again.
bool may_pass(const Attempt& a) {
  if (a.status >= 500 || a.status == 429 || a.status == 408) return true;
  if (a.status != 0 && a.code == CURLE_OK) return false;  // an answer, 4xx: it will say the same
  switch (a.code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    default:
      return false;
  }
}

// What went wrong with `url`, and what to do about it.
std::string explain(const RemoteUrl& url, const Attempt& a, const FetchOptions& options, int tries) {
  const std::string where = url.text();
  const std::string after = tries > 1 ? " (after " + std::to_string(tries) + " tries)" : "";
  if (a.status == 404) return where + ": not found (HTTP 404)";
  if (a.status == 403 || a.status == 401) {
    return where + ": access denied (HTTP " + std::to_string(a.status) + ")" +
           (url.s3() ? "; check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION" : "");
  }
  if (a.code == CURLE_OPERATION_TIMEDOUT) {
    return where + ": no data for " + std::to_string(options.stall_limit.count()) + " ms (the stall limit)" + after;
  }
  if (a.status >= 400) return where + ": HTTP " + std::to_string(a.status) + after;
  return where + ": " + (a.error.empty() ? curl_easy_strerror(a.code) : a.error) + after;
}

// Sets `easy` up for a request of `url` (reset first: what a previous request set is gone, its
// connection stays). `headers` holds the list it points at, `stall` the try's stall watch, until
// the request ends.
void prepare(CURL* easy, const RemoteUrl& url, const FetchOptions& options, char* error, HeaderList& headers,
             StallWatch* stall) {
  curl_easy_reset(easy);
  curl_easy_setopt(easy, CURLOPT_URL, url.fetch_url().c_str());
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for timeouts
  curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options.connect_timeout.count()));
  // No byte for the stall limit: the request ends (libcurl's own low-speed check averages over
  // seconds, so a burst then silence would last the limit and then some).
  curl_easy_setopt(easy, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(easy, CURLOPT_XFERINFOFUNCTION, watch_stall);
  curl_easy_setopt(easy, CURLOPT_XFERINFODATA, stall);
  if (const auto& s3 = url.s3(); s3 && !s3->access_key.empty()) {
    const std::string sigv4 = "aws:amz:" + s3->region + ":s3";
    curl_easy_setopt(easy, CURLOPT_AWS_SIGV4, sigv4.c_str());  // libcurl copies strings it is given
    curl_easy_setopt(easy, CURLOPT_USERNAME, s3->access_key.c_str());
    curl_easy_setopt(easy, CURLOPT_PASSWORD, s3->secret_key.c_str());
    // S3 wants the payload's SHA-256 in a header (signed with the rest; libcurl 7.88 does not add
    // it): every request here is a GET or HEAD, whose payload is empty.
    curl_slist* list = curl_slist_append(
        nullptr, "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    if (list != nullptr && !s3->session_token.empty())
      list = curl_slist_append(list, ("x-amz-security-token: " + s3->session_token).c_str());
    headers.reset(list);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers.get());
  }
}

}  // namespace

struct HttpClient::Impl {
  std::mutex mutex;
  std::vector<Easy> idle;  // handles between requests: their connections stay open for the next
  std::atomic<std::uint64_t> requests{0}, retries{0}, bytes{0}, connections{0};
  std::atomic<std::int64_t> nanoseconds{0};

  Easy take() {
    {
      const std::lock_guard lock(mutex);
      if (!idle.empty()) {
        Easy easy = std::move(idle.back());
        idle.pop_back();
        return easy;
      }
    }
    Easy easy(curl_easy_init());
    if (!easy) throw std::runtime_error("libcurl could not make a handle");
    return easy;
  }
  void give(Easy easy) {
    const std::lock_guard lock(mutex);
    idle.push_back(std::move(easy));
  }

  // Runs `once(easy, attempt)` until it succeeds, fails for good or the retries are spent.
  template <class Once>
  void with_retries(const FetchOptions& options, const RemoteUrl& url, Once&& once) {
    for (int tries = 1;; ++tries) {
      Easy easy = take();
      char error[CURL_ERROR_SIZE] = "";
      HeaderList headers;
      StallWatch stall{.limit = options.stall_limit};
      prepare(easy.get(), url, options, error, headers, &stall);
      const auto start = Clock::now();
      Attempt attempt = once(easy.get());
      nanoseconds += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
      ++requests;
      long opened = 0;
      curl_easy_getinfo(easy.get(), CURLINFO_NUM_CONNECTS, &opened);
      connections += static_cast<std::uint64_t>(opened);
      attempt.error = error;
      if (stall.stalled) attempt.code = CURLE_OPERATION_TIMEDOUT;
      if (attempt.code == CURLE_OK && attempt.status < 400) {
        give(std::move(easy));
        return;
      }
      give(std::move(easy));
      if (!may_pass(attempt) || tries > options.retries)
        throw FetchError(explain(url, attempt, options, tries), static_cast<int>(attempt.status));
      ++retries;
      std::this_thread::sleep_for(options.backoff * (1 << std::min(tries - 1, 10)));
    }
  }
};

HttpClient::HttpClient(FetchOptions options) : options_(options), impl_(std::make_unique<Impl>()) { init_curl_once(); }

HttpClient::~HttpClient() = default;

std::uint64_t HttpClient::size(const RemoteUrl& url) {
  curl_off_t length = -1;
  impl_->with_retries(options_, url, [&](CURL* easy) {
    curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
    Attempt a;
    a.code = curl_easy_perform(easy);
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &a.status);
    curl_easy_getinfo(easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    return a;
  });
  if (length < 0) throw FetchError(url.text() + ": the server did not say the object's size (no Content-Length)", 0);
  return static_cast<std::uint64_t>(length);
}

void HttpClient::read_into(const RemoteUrl& url, std::uint64_t offset, std::span<std::byte> out) {
  if (out.empty()) return;
  Sink sink;
  impl_->with_retries(options_, url, [&](CURL* easy) {
    sink = Sink{.easy = easy, .out = out, .offset = offset};
    const std::string range = std::to_string(offset) + "-" + std::to_string(offset + out.size() - 1);
    curl_easy_setopt(easy, CURLOPT_RANGE, range.c_str());
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, write_body);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &sink);
    // A large read (a whole shard, a chunk of one) in fewer, larger pieces: fewer calls per byte.
    if (out.size() >= (std::size_t{1} << 20)) curl_easy_setopt(easy, CURLOPT_BUFFERSIZE, 512L * 1024);
    Attempt a;
    a.code = curl_easy_perform(easy);
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &a.status);
    if (a.code == CURLE_WRITE_ERROR && sink.overflowed) a.code = CURLE_OK;  // stopped once it had enough
    impl_->bytes += sink.received;
    return a;
  });
  if (sink.filled < out.size()) {
    throw FetchError(url.text() + ": the object ends before byte " + std::to_string(offset + out.size()) + " (" +
                         std::to_string(sink.filled) + " of the " + std::to_string(out.size()) + " bytes from " +
                         std::to_string(offset) + " came): truncated or replaced on the server?",
                     206);
  }
}

std::vector<std::byte> HttpClient::read(const RemoteUrl& url, std::uint64_t offset, std::size_t length) {
  std::vector<std::byte> out(length);
  read_into(url, offset, out);
  return out;
}

void HttpClient::read_chunks(const RemoteUrl& url, std::uint64_t size, std::size_t chunk_bytes,
                             const std::function<void(std::span<const std::byte>)>& sink) {
  std::vector<std::byte> chunk(
      static_cast<std::size_t>(std::min<std::uint64_t>(size, std::max<std::size_t>(chunk_bytes, 1))));
  for (std::uint64_t offset = 0; offset < size; offset += chunk.size()) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), size - offset));
    read_into(url, offset, std::span(chunk).first(n));
    sink(std::span<const std::byte>(chunk).first(n));
  }
}

FetchStats HttpClient::stats() const {
  return {.requests = impl_->requests,
          .retries = impl_->retries,
          .connections = impl_->connections,
          .bytes = impl_->bytes,
          .seconds = static_cast<double>(impl_->nanoseconds.load()) * 1e-9};
}

}  // namespace stoke::remote
