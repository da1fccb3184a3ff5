#include "stoke/remote/url.hpp"

#include <cstdlib>
#include <stdexcept>

namespace stoke::remote {

namespace {

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

bool starts_with(std::string_view text, std::string_view prefix) noexcept {
  return text.substr(0, prefix.size()) == prefix;
}

}  // namespace

S3Credentials credentials_from_environment() {
  S3Credentials c;
  c.access_key = environment("AWS_ACCESS_KEY_ID");
  c.secret_key = environment("AWS_SECRET_ACCESS_KEY");
  c.session_token = environment("AWS_SESSION_TOKEN");
  if (std::string region = environment("AWS_REGION"); !region.empty()) {
    c.region = std::move(region);
  } else if (std::string fallback = environment("AWS_DEFAULT_REGION"); !fallback.empty()) {
    c.region = std::move(fallback);
  }
  c.endpoint = environment("AWS_ENDPOINT_URL_S3");
  if (c.endpoint.empty()) c.endpoint = environment("AWS_ENDPOINT_URL");
  while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
  return c;
}

std::string redact(std::string_view text) {
  std::string out(text);
  const std::size_t scheme = out.find("://");
  if (scheme == std::string::npos) return out;
  const std::size_t host = scheme + 3;
  const std::size_t path = out.find('/', host);
  const std::size_t at = out.rfind('@', path == std::string::npos ? out.size() : path);
  if (at != std::string::npos && at >= host) out.replace(host, at - host, "***");
  return out;
}

bool RemoteUrl::is_remote(std::string_view text) noexcept {
  return starts_with(text, "http://") || starts_with(text, "https://") || starts_with(text, "s3://");
}

RemoteUrl RemoteUrl::parse(std::string_view text, const S3Credentials& s3) {
  RemoteUrl url;
  url.given_ = std::string(text);
  url.text_ = redact(text);
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument("'" + url.text_ + "' " + why +
                                 " (remote data is http://host/path, https://host/path or s3://bucket/key)");
  };
  if (starts_with(text, "s3://")) {
    const std::string_view rest = text.substr(5);
    const std::size_t slash = rest.find('/');
    if (slash == std::string_view::npos || slash == 0 || slash + 1 == rest.size()) throw bad("names no bucket and key");
    const std::string bucket(rest.substr(0, slash));
    const std::string key(rest.substr(slash + 1));
    url.scheme_ = Scheme::s3;
    url.s3_ = s3;
    url.fetch_url_ = s3.endpoint.empty() ? "https://" + bucket + ".s3." + s3.region + ".amazonaws.com/" + key
                                         : s3.endpoint + "/" + bucket + "/" + key;
    return url;
  }
  if (starts_with(text, "http://")) {
    url.scheme_ = Scheme::http;
  } else if (starts_with(text, "https://")) {
    url.scheme_ = Scheme::https;
  } else {
    throw bad("is not a remote location");
  }
  const std::size_t host = text.find("://") + 3;
  if (host >= text.size() || text[host] == '/') throw bad("names no host");
  url.fetch_url_ = url.given_;
  return url;
}

RemoteUrl RemoteUrl::sibling(std::string_view name) const {
  RemoteUrl out = *this;
  const auto replace_last = [&](std::string& s) {
    const std::size_t slash = s.rfind('/');
    s = s.substr(0, slash + 1) + std::string(name);
  };
  replace_last(out.given_);
  replace_last(out.fetch_url_);
  replace_last(out.text_);
  return out;
}

}  // namespace stoke::remote
