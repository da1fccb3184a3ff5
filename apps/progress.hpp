// What the training commands share for their output: a pass's progress on stderr (drawn by the
// commands' one StatusLine) and numbers in their JSON lines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "status_line.hpp"

namespace stoke::train {
struct LeftOut;
}  // namespace stoke::train

namespace stoke::app {

/// Says on stderr what `data` left out when it opened (train::left_out_of), once before the run:
///   stoke train: left out of shard.tar: shard.tar#k3.cls (not a decimal class label in 0..)
/// a line per listed file up to `max_lines`, then "stoke train: ... and 12 more left out of
/// shard.tar". `who` starts each line ("stoke train"); nothing when nothing was left out.
void print_left_out(const std::string& who, const std::string& data, const train::LeftOut& left_out,
                    std::size_t max_lines = 20);

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
