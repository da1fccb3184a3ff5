#include "progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stoke/train/builtin.hpp>

namespace stoke::app {

std::filesystem::path builtin_dataset_with_progress(bool quiet) {
  if (quiet) return train::builtin_dataset();
  bool started = false;
  return train::builtin_dataset([&](std::size_t written, std::size_t total) {
    if (!started) {
      std::fprintf(stderr, "stoke: writing the built-in shapes dataset to %s (once)\n",
                   train::builtin_dataset_folder().c_str());
      started = true;
    }
    std::fprintf(stderr, "\r  %zu / %zu images%s", written, total, written == total ? "\n" : "");
  });
}

namespace {

// "1:05" or "1:02:03".
std::string clock_text(double seconds) {
  const auto s = static_cast<long long>(std::max(0.0, seconds) + 0.5);
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(text, sizeof text, "%lld:%02lld", s / 60, s % 60);
  }
  return text;
}

}  // namespace

ProgressLine::ProgressLine(bool enabled) : enabled_(enabled), tty_(::isatty(STDERR_FILENO) == 1) {}

void ProgressLine::show(const std::string& prefix, std::int64_t images, std::int64_t total, double seconds, double loss,
                        double lr, const std::string& suffix) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!tty_ && now - last_line_ < std::chrono::seconds(10)) return;
  last_line_ = now;
  const double done = total > 0 ? std::min(1.0, static_cast<double>(images) / static_cast<double>(total)) : 0;
  const double rate = seconds > 0 ? static_cast<double>(images) / seconds : 0;
  const double eta = rate > 0 ? static_cast<double>(total - images) / rate : 0;
  constexpr int width = 20;
  std::string bar(width, '-');
  std::fill_n(bar.begin(), static_cast<int>(done * width), '#');
  char lr_text[32] = "";
  if (lr >= 0) std::snprintf(lr_text, sizeof lr_text, "  lr %.4g", lr);
  std::fprintf(stderr, "%s%s [%s] %3.0f%%  %lld/%lld  %.0f img/s  loss %.4f%s  ETA %s  %s%s", tty_ ? "\r" : "",
               prefix.c_str(), bar.c_str(), 100 * done, static_cast<long long>(images), static_cast<long long>(total),
               rate, loss, lr_text, clock_text(eta).c_str(), suffix.c_str(), tty_ ? "\x1b[K" : "\n");
  std::fflush(stderr);
  drawn_ = tty_;
}

void ProgressLine::clear() {
  if (drawn_) std::fprintf(stderr, "\r\x1b[K");
  drawn_ = false;
}

nlohmann::ordered_json json_number(std::optional<double> value) {
  if (!value || !std::isfinite(*value)) return nullptr;
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", *value);
  const double rounded = std::strtod(text, nullptr);
  if (rounded == std::trunc(rounded) && std::fabs(rounded) < 1e15) return static_cast<std::int64_t>(rounded);
  return rounded;
}

void print_json(const nlohmann::ordered_json& json) {
  std::printf("%s\n", json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  std::fflush(stdout);
}

}  // namespace stoke::app
