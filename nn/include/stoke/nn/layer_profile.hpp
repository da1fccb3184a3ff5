// LayerProfile: where a training step's time goes, layer kind by layer kind. Hand it to a
// Trainer (Trainer::set_profile) or put it in a Context; every layer's forward and backward is then
// timed on its own, the backend's stream synchronized before and after, so a GPU's asynchronous
// work is charged to the layer that queued it. Composite layers (Sequential, Residual) are charged
// only what their children did not take (Residual's sum, say). Synchronizing costs time: profile
// a few steps apart from the ones whose speed you report.
//
//   nn::LayerProfile profile;
//   trainer.set_profile(&profile);
//   for (int i = 0; i < 3; ++i) trainer.train_batch(images, labels);
//   trainer.set_profile(nullptr);
//   for (const auto& row : profile.rows()) ...   // slowest first
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "stoke/nn/backend.hpp"

namespace stoke::nn {

class LayerProfile {
 public:
  enum class Pass : std::uint8_t { forward, backward, other };

  /// One layer kind in one pass: "Conv2d" forward, say, over all the steps profiled.
  struct Row {
    std::string kind;  ///< the layer's describe() up to its '(' ("Conv2d", "BatchNorm2d"), or a name given to time()
    Pass pass = Pass::other;
    std::int64_t calls = 0;
    double seconds = 0;  ///< exclusive: what nested layers took is theirs
  };

  /// Starts timing one call of `kind` in `pass` (the stream synchronized first). Calls nest: each
  /// begin() is closed by the next end().
  void begin(std::string kind, Pass pass, StreamView stream);
  void end(StreamView stream);
  /// Times `body` as one call of `kind` (a step's parts that are not layers: the loss, the optimizer).
  template <class F>
  void time(std::string kind, StreamView stream, F&& body) {
    begin(std::move(kind), Pass::other, stream);
    std::forward<F>(body)();
    end(stream);
  }

  /// Every kind and pass seen, slowest first.
  std::vector<Row> rows() const;
  /// The sum of all rows' seconds.
  double total_seconds() const;
  void clear();

  /// "Conv2d" from "Conv2d(3, 64, kernel_size=7, ...)"; the first line of a multi-line description.
  static std::string kind_of(const std::string& description);

 private:
  using Clock = std::chrono::steady_clock;
  struct Open {
    std::string kind;
    Pass pass;
    Clock::time_point start;
    double nested = 0;  // seconds taken by calls begun inside this one
  };
  std::vector<Open> open_;
  std::map<std::pair<std::string, Pass>, Row> rows_;
};

std::string to_string(LayerProfile::Pass pass);

}  // namespace stoke::nn
