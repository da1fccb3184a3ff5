#include "progress.hpp"

#include <algorithm>
#include <cstdio>
#include <stoke/train/builtin.hpp>
#include <stoke/train/input.hpp>

namespace stoke::app {

void print_left_out(const std::string& who, const std::string& data, const train::LeftOut& left_out,
                    std::size_t max_lines) {
  const std::size_t listed = std::min(left_out.files.size(), max_lines);
  for (std::size_t i = 0; i < listed; ++i) {
    std::fprintf(stderr, "%s: left out of %s: %s (%s)\n", who.c_str(), data.c_str(), left_out.files[i].path.c_str(),
                 left_out.files[i].reason.c_str());
  }
  if (left_out.count > listed) {
    std::fprintf(stderr, "%s: ... and %llu more left out of %s\n", who.c_str(),
                 static_cast<unsigned long long>(left_out.count - listed), data.c_str());
  }
}

std::filesystem::path builtin_dataset_with_progress(bool quiet) {
  if (quiet) return train::builtin_dataset();
  std::optional<StatusLine> line;  // made when the dataset turns out to need writing
  return train::builtin_dataset([&](std::size_t written, std::size_t total) {
    if (!line) {
      line.emplace(std::chrono::milliseconds(250), std::chrono::seconds(5));
      line->print(
          format("stoke: writing the built-in shapes dataset to %s (once)", train::builtin_dataset_folder().c_str()));
    }
    const auto text = [&] { return format("  %zu / %zu images", written, total); };
    if (written == total) {
      line->finish(text());
    } else {
      line->show(text);
    }
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

// On a terminal every call redraws (the callers call every 250 ms); in a log, a line every 10 s.
ProgressLine::ProgressLine(bool enabled)
    : enabled_(enabled), line_(std::chrono::milliseconds(0), std::chrono::seconds(10)) {}

void ProgressLine::show(const std::string& prefix, std::int64_t images, std::int64_t total, double seconds, double loss,
                        double lr, const std::string& suffix) {
  if (!enabled_) return;
  line_.show([&] {
    const double done = total > 0 ? std::min(1.0, static_cast<double>(images) / static_cast<double>(total)) : 0;
    const double rate = seconds > 0 ? static_cast<double>(images) / seconds : 0;
    const double eta = rate > 0 ? static_cast<double>(total - images) / rate : 0;
    constexpr int width = 20;
    std::string bar(width, '-');
    std::fill_n(bar.begin(), static_cast<int>(done * width), '#');
    const std::string lr_text = lr >= 0 ? format("  lr %.4g", lr) : std::string();
    return format("%s [%s] %3.0f%%  %lld/%lld  %.0f img/s  loss %.4f%s  ETA %s  %s", prefix.c_str(), bar.c_str(),
                  100 * done, static_cast<long long>(images), static_cast<long long>(total), rate, loss,
                  lr_text.c_str(), clock_text(eta).c_str(), suffix.c_str());
  });
}

}  // namespace stoke::app
