// The one progress line of the `stoke` commands on stderr: redrawn in place on a terminal, a line
// of its own every few seconds otherwise (so that a log keeps a readable history).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <optional>
#include <sstream>
#include <stoke/graph/decision.hpp>
#include <string>
#include <string_view>

namespace stoke::app {

/// printf into a std::string.
[[gnu::format(printf, 1, 2)]] inline std::string format(const char* pattern, ...) {
  va_list args, again;
  va_start(args, pattern);
  va_copy(again, args);
  std::string text(static_cast<std::size_t>(std::max(0, std::vsnprintf(nullptr, 0, pattern, args))), '\0');
  std::vsnprintf(text.data(), text.size() + 1, pattern, again);
  va_end(again);
  va_end(args);
  return text;
}

/// A scheduler's move as one line (graph::print's wording).
inline std::string decision_line(const graph::Decision& decision) {
  std::ostringstream line;
  graph::print(line, decision);
  return line.str();
}

/// Items per second since construction, and the time left at that pace.
struct Pace {
  std::chrono::steady_clock::time_point begin = std::chrono::steady_clock::now();

  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count(); }
  double rate(std::size_t done) const { return static_cast<double>(done) / std::max(1e-9, seconds()); }
  /// Seconds until `total` at the current rate; 0 before the first item.
  double eta(std::size_t done, std::size_t total) const {
    const double per_second = rate(done);
    return per_second > 0 ? static_cast<double>(total - std::min(done, total)) / per_second : 0.0;
  }
};

/// A status line on stderr. show() draws at most once per period: on a terminal over the previous
/// state, otherwise as a new line. Thread-safe.
class StatusLine {
 public:
  using Period = std::chrono::milliseconds;
  /// A period for show() to draw nothing (finish() and print() still do).
  static constexpr Period never = Period::max();

  StatusLine(Period on_tty, Period off_tty) : tty_(::isatty(STDERR_FILENO) != 0), period_(tty_ ? on_tty : off_tty) {}
  /// Ends a line left open on a terminal, so that an error message that follows (an exception
  /// on its way out) starts on a line of its own.
  ~StatusLine() { end_line(); }
  StatusLine(const StatusLine&) = delete;
  StatusLine& operator=(const StatusLine&) = delete;

  bool tty() const noexcept { return tty_; }

  /// Draws `text()` (a callable returning the line) if a period has passed since the last draw
  /// (the first call always draws); `text` is not called otherwise.
  template <class Text>
  void show(Text&& text) {
    const std::lock_guard lock(mutex_);
    const auto now = std::chrono::steady_clock::now();
    if (period_ == never || (drawn_at_ && now - *drawn_at_ < period_)) return;
    drawn_at_ = now;
    draw(text());
  }
  /// Draws `text` now, whatever the period, and ends the line.
  void finish(std::string_view text) {
    const std::lock_guard lock(mutex_);
    draw(text);
    if (tty_) end_line();
  }
  /// Prints `line` as a line of its own, above the status line on a terminal.
  void print(std::string_view line) {
    const std::lock_guard lock(mutex_);
    if (tty_ && width_ > 0) std::fputc('\r', stderr);
    std::fprintf(stderr, "%-*.*s\n", static_cast<int>(width_), static_cast<int>(line.size()), line.data());
    width_ = 0;
    drawn_at_.reset();
  }
  /// Erases the line on a terminal, so that what follows starts on a clean line.
  void clear() {
    const std::lock_guard lock(mutex_);
    if (tty_ && width_ > 0) std::fprintf(stderr, "\r%*s\r", static_cast<int>(width_), "");
    width_ = 0;
  }

 private:
  void draw(std::string_view text) {
    if (!tty_) {
      std::fprintf(stderr, "%.*s\n", static_cast<int>(text.size()), text.data());
      return;
    }
    // Spaces over what is left of a longer previous state.
    std::fprintf(stderr, "\r%-*.*s", static_cast<int>(width_), static_cast<int>(text.size()), text.data());
    std::fflush(stderr);
    width_ = std::max(width_, text.size());
  }
  void end_line() {
    if (tty_ && width_ > 0) std::fputc('\n', stderr);
    width_ = 0;
  }

  const bool tty_;
  const Period period_;
  std::mutex mutex_;
  std::optional<std::chrono::steady_clock::time_point> drawn_at_;
  std::size_t width_ = 0;  // characters drawn on the terminal's current line
};

}  // namespace stoke::app
