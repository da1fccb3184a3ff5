#include "stoke/nodes/dataset.hpp"

#include <numeric>
#include <stdexcept>

#include "stoke/nodes/random.hpp"

namespace stoke::nodes {

const std::vector<std::string>& Dataset::classes() const noexcept {
  static const std::vector<std::string> none;
  return none;
}

const std::vector<IgnoredFile>& Dataset::ignored() const noexcept {
  static const std::vector<IgnoredFile> none;
  return none;
}

std::optional<NetworkStats> Dataset::network() const { return std::nullopt; }

EpochOrder::EpochOrder(std::size_t size, OrderOptions options) : size_(size), options_(options) {
  if (options_.world == 0) throw std::invalid_argument("EpochOrder: world must be at least 1");
  if (options_.rank >= options_.world) {
    throw std::invalid_argument("EpochOrder: rank " + std::to_string(options_.rank) + " is not below world " +
                                std::to_string(options_.world));
  }
}

const char* to_string(ShardRemainder remainder) noexcept {
  switch (remainder) {
    case ShardRemainder::uneven: return "uneven";
    case ShardRemainder::drop: return "drop";
    case ShardRemainder::pad: return "pad";
  }
  return "?";
}

std::size_t EpochOrder::per_epoch() const noexcept {
  const std::size_t world = options_.world;
  const std::size_t rank = options_.rank;
  switch (options_.remainder) {
    case ShardRemainder::drop: return size_ / world;
    case ShardRemainder::pad: return size_ == 0 ? 0 : (size_ + world - 1) / world;
    case ShardRemainder::uneven: break;
  }
  return size_ / world + (rank < size_ % world ? 1 : 0);
}

std::vector<std::uint64_t> EpochOrder::permutation(std::uint32_t epoch) const {
  std::vector<std::uint64_t> all(size_);
  std::iota(all.begin(), all.end(), std::uint64_t{0});
  if (options_.shuffle) {
    // Fisher-Yates with the exact, portable ItemRng (std::shuffle's draws differ between
    // standard libraries, and every rank must see the same permutation).
    ItemRng rng(options_.seed, epoch, 0, /*stream=*/0x5f5f5f5fULL);
    for (std::size_t i = all.size(); i > 1; --i) {
      const auto j = static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(i - 1)));
      std::swap(all[i - 1], all[j]);
    }
  }
  return all;
}

std::vector<std::uint64_t> EpochOrder::indices(std::uint32_t epoch) const {
  std::vector<std::uint64_t> all = permutation(epoch);
  if (options_.world == 1) return all;
  std::vector<std::uint64_t> mine;
  mine.reserve(per_epoch());
  // Position rank + k * world for k < per_epoch(); past the end (pad) the permutation starts over.
  for (std::size_t k = 0; k < per_epoch(); ++k) {
    const std::size_t p = options_.rank + k * options_.world;
    if (p >= all.size() && options_.remainder != ShardRemainder::pad) break;
    mine.push_back(all[p % all.size()]);
  }
  return mine;
}

DatasetSource::DatasetSource(std::size_t dataset_size, OrderOptions options, std::uint32_t epochs,
                             std::uint32_t first_epoch)
    : order_(dataset_size, options),
      end_epoch_(first_epoch + epochs),
      epoch_(first_epoch),
      next_(0),
      forever_(epochs == 0) {
  current_ = order_.indices(epoch_);
}

std::optional<ItemRef> DatasetSource::operator()() {
  while (next_ == current_.size()) {
    if (current_.empty() && (forever_ || epoch_ + 1 >= end_epoch_)) return std::nullopt;  // nothing to visit
    if (!forever_ && epoch_ + 1 >= end_epoch_) return std::nullopt;
    ++epoch_;
    current_ = order_.indices(epoch_);
    next_ = 0;
  }
  return ItemRef{current_[next_++], epoch_};
}

Sample ReadSample::operator()(ItemRef ref) const {
  Sample sample = dataset_->read(static_cast<std::size_t>(ref.index));
  sample.index = ref.index;
  sample.epoch = ref.epoch;
  return sample;
}

}  // namespace stoke::nodes
