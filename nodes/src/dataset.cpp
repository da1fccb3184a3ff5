#include "stoke/nodes/dataset.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <utility>

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

Groups Dataset::groups() const { return {}; }

std::shared_ptr<const void> Dataset::will_read(std::span<const std::uint64_t> /*items*/) const { return nullptr; }

namespace {

// Fisher-Yates with the exact, portable ItemRng (std::shuffle's draws differ between standard
// libraries, and every rank must see the same permutation).
void shuffle_with(std::span<std::uint64_t> items, ItemRng rng) {
  for (std::size_t i = items.size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(i - 1)));
    std::swap(items[i - 1], items[j]);
  }
}

bool grouped(const OrderOptions& options) {
  return options.groups.window > 0 && options.groups.starts && !options.groups.starts->empty();
}

// The groups in a shuffled order, `window` at a time, the items of each window shuffled together.
std::vector<std::uint64_t> grouped_permutation(std::size_t size, const OrderOptions& options, std::uint32_t epoch) {
  const std::vector<std::uint64_t>& starts = *options.groups.starts;
  std::vector<std::uint64_t> order(starts.size());
  std::iota(order.begin(), order.end(), std::uint64_t{0});
  constexpr std::uint64_t groups_stream = 0x67726f75ULL, items_stream = 0x5f5f5f5fULL;
  shuffle_with(order, ItemRng(options.seed, epoch, 0, groups_stream));
  std::vector<std::uint64_t> all;
  all.reserve(size);
  const std::size_t window = options.groups.window;
  for (std::size_t first = 0; first < order.size(); first += window) {
    const std::size_t begin = all.size();
    for (std::size_t g = first; g < std::min(first + window, order.size()); ++g) {
      const std::uint64_t end = order[g] + 1 < starts.size() ? starts[order[g] + 1] : size;
      for (std::uint64_t i = starts[order[g]]; i < end; ++i) all.push_back(i);
    }
    shuffle_with(std::span(all).subspan(begin), ItemRng(options.seed, epoch, first / window, items_stream));
  }
  return all;
}

}  // namespace

EpochOrder::EpochOrder(std::size_t size, OrderOptions options) : size_(size), options_(std::move(options)) {
  if (options_.world == 0) throw std::invalid_argument("EpochOrder: world must be at least 1");
  if (options_.rank >= options_.world) {
    throw std::invalid_argument("EpochOrder: rank " + std::to_string(options_.rank) + " is not below world " +
                                std::to_string(options_.world));
  }
  if (grouped(options_)) {
    const std::vector<std::uint64_t>& starts = *options_.groups.starts;
    for (std::size_t g = 0; g < starts.size(); ++g) {
      if ((g == 0 && starts[0] != 0) || (g > 0 && starts[g] <= starts[g - 1]) || starts[g] >= size_) {
        throw std::invalid_argument("EpochOrder: group " + std::to_string(g) + " starts at item " +
                                    std::to_string(starts[g]) + ": the starts must rise from 0 and stay below " +
                                    std::to_string(size_) + " (the dataset's size)");
      }
    }
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
  if (options_.shuffle && grouped(options_)) return grouped_permutation(size_, options_, epoch);
  std::vector<std::uint64_t> all(size_);
  std::iota(all.begin(), all.end(), std::uint64_t{0});
  if (options_.shuffle) shuffle_with(all, ItemRng(options_.seed, epoch, 0, /*stream=*/0x5f5f5f5fULL));
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
    : order_(dataset_size, std::move(options)),
      end_epoch_(first_epoch + epochs),
      epoch_(first_epoch),
      next_(0),
      forever_(epochs == 0) {
  current_ = order_.indices(epoch_);
}

DatasetSource::DatasetSource(DatasetPtr dataset, OrderOptions options, std::uint32_t epochs, std::uint32_t first_epoch)
    : DatasetSource(dataset->size(), std::move(options), epochs, first_epoch) {
  dataset_ = std::move(dataset);
}

bool DatasetSource::advance() {
  while (next_ == current_.size()) {
    if (current_.empty() && forever_) return false;  // nothing to visit, ever
    if (!has_epoch(epoch_ + 1)) return false;
    ++epoch_;
    current_ = upcoming_.empty() ? order_.indices(epoch_) : std::move(upcoming_);
    upcoming_.clear();
    next_ = 0;
    told_ = false;
  }
  return true;
}

void DatasetSource::tell() {
  // A plan lives until two epochs later: the reads of the last one are still under way when the
  // source starts the next.
  std::erase_if(plans_, [&](const auto& plan) { return plan.first + 1 < epoch_; });
  const auto told = [&](std::uint32_t epoch) {
    return std::any_of(plans_.begin(), plans_.end(), [&](const auto& plan) { return plan.first == epoch; });
  };
  if (!told(epoch_)) plans_.emplace_back(epoch_, dataset_->will_read(std::span(current_).subspan(next_)));
  if (has_epoch(epoch_ + 1) && !told(epoch_ + 1)) {
    upcoming_ = order_.indices(epoch_ + 1);
    plans_.emplace_back(epoch_ + 1, dataset_->will_read(upcoming_));
  }
  told_ = true;
}

std::optional<ItemRef> DatasetSource::operator()() {
  if (!advance()) return std::nullopt;
  if (dataset_ && !told_) tell();
  return ItemRef{current_[next_++], epoch_};
}

std::size_t DatasetSource::skip(std::size_t count) {
  std::size_t skipped = 0;
  for (; skipped < count && advance(); ++skipped) ++next_;
  return skipped;
}

Sample ReadSample::operator()(ItemRef ref) const {
  Sample sample = dataset_->read(static_cast<std::size_t>(ref.index));
  sample.index = ref.index;
  sample.epoch = ref.epoch;
  return sample;
}

}  // namespace stoke::nodes
