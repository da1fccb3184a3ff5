// What the training commands share for their output: a pass's progress on stderr (drawn by the
// commands' one StatusLine) and numbers in their JSON lines.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "status_line.hpp"

namespace stoke::app {

/// train::builtin_dataset(), saying on stderr (unless `quiet`) that it is being written, the first
/// time, with a count of the images written.
std::filesystem::path builtin_dataset_with_progress(bool quiet);

/// A pass's progress on stderr: redrawn in place on a terminal, a line every 10 s otherwise (a log
/// file or CI). `show` draws
///   epoch 2/6 [#########-----------] 45%  22528/50000  1512 img/s  loss 0.43  lr 0.041  ETA 0:18  ...
/// with `prefix` ("epoch 2/6") and `suffix` ("CPU busy 99% (limit: train)") as given.
class ProgressLine {
 public:
  explicit ProgressLine(bool enabled);
  /// `images` of `total` done in `seconds`; `loss`: the mean so far; `lr` < 0: not shown.
  void show(const std::string& prefix, std::int64_t images, std::int64_t total, double seconds, double loss, double lr,
            const std::string& suffix);
  /// Clears the line drawn in place, before a result line.
  void clear() { line_.clear(); }

 private:
  bool enabled_;
  StatusLine line_;
};

}  // namespace stoke::app
