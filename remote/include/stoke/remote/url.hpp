// RemoteUrl: where a remote shard lives -- an http(s):// URL, or s3://bucket/key resolved to the
// HTTPS endpoint of an S3 service (AWS, or an S3-compatible store named by AWS_ENDPOINT_URL) --
// and how to name it in a message without the credentials it may carry.
//
//   const RemoteUrl url = RemoteUrl::parse("s3://data/train-000001.tar");
//   url.fetch_url();   // "https://data.s3.us-east-1.amazonaws.com/train-000001.tar", or
//                      // "http://127.0.0.1:9000/data/train-000001.tar" with AWS_ENDPOINT_URL set
//   url.text();        // "s3://data/train-000001.tar": what messages and reports show
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace stoke::remote {

/// What S3 requests are signed with (AWS Signature Version 4) and where they go: from the usual
/// AWS_* environment variables (credentials_from_environment).
struct S3Credentials {
  std::string access_key{};          ///< AWS_ACCESS_KEY_ID
  std::string secret_key{};          ///< AWS_SECRET_ACCESS_KEY
  std::string session_token{};       ///< AWS_SESSION_TOKEN (temporary credentials), may be empty
  std::string region = "us-east-1";  ///< AWS_REGION, else AWS_DEFAULT_REGION
  /// AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL: an S3-compatible store ("http://127.0.0.1:4569"),
  /// addressed path-style (endpoint/bucket/key). Empty: AWS itself, virtual-hosted style.
  std::string endpoint{};
};

/// The S3 settings of this process's environment. Credentials may be missing (a public bucket:
/// the requests then go unsigned).
S3Credentials credentials_from_environment();

class RemoteUrl {
 public:
  enum class Scheme { http, https, s3 };

  /// Parses "http://host[:port]/path", "https://..." or "s3://bucket/key". Throws
  /// std::invalid_argument naming the text (with any user:password@ part hidden) when it is none
  /// of them or has no host, bucket or key.
  static RemoteUrl parse(std::string_view text, const S3Credentials& s3 = credentials_from_environment());

  /// Whether `text` names a remote location (starts with http://, https:// or s3://).
  static bool is_remote(std::string_view text) noexcept;

  Scheme scheme() const noexcept { return scheme_; }
  /// The URL libcurl fetches (for s3://, the endpoint's URL of the object).
  const std::string& fetch_url() const noexcept { return fetch_url_; }
  /// The URL as given, with a user:password@ part replaced by "***@": for messages and reports.
  const std::string& text() const noexcept { return text_; }
  /// For s3://: the signing settings (credentials, region); nothing for http(s).
  const std::optional<S3Credentials>& s3() const noexcept { return s3_; }

  /// This URL with its last path segment replaced by `name` (a shard's index beside it).
  RemoteUrl sibling(std::string_view name) const;

 private:
  Scheme scheme_ = Scheme::https;
  std::string given_;  // as parsed (may hold credentials: never shown)
  std::string fetch_url_;
  std::string text_;
  std::optional<S3Credentials> s3_;
};

/// `text` with the user:password@ part of a URL in it replaced by "***@".
std::string redact(std::string_view text);

}  // namespace stoke::remote
