// The host transport: buckets of CPU gradients packed into one buffer each and all-reduced by a
// thread of the transport's, one after the other in index order, while the training thread goes
// on with backward.
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "stoke/dist/gradient_sync.hpp"

namespace stoke::dist {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class HostTransport final : public BucketTransport {
 public:
  explicit HostTransport(std::unique_ptr<Communicator> channel)
      : channel_(std::move(channel)), thread_([this] { run(); }) {}

  ~HostTransport() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  int world() const noexcept override { return channel_->world(); }

  void start(std::size_t index, std::span<const nn::Tensor> gradients) override {
    std::unique_lock lock(mutex_);
    rethrow_locked();
    if (index >= buckets_.size()) buckets_.resize(index + 1);
    Bucket& b = buckets_[index];
    // The thread is done with this bucket's buffer: each sync waits for all its buckets.
    lock.unlock();
    std::size_t floats = 0;
    for (const nn::Tensor& g : gradients) {
      if (!g.device().is_cpu() || g.dtype() != nn::DType::f32) {
        throw std::invalid_argument("host_transport sums f32 CPU gradients; " + g.describe() +
                                    " is not (on a GPU: use nccl_transport)");
      }
      floats += static_cast<std::size_t>(g.numel());
    }
    b.buffer.resize(floats);
    b.gradients.assign(gradients.begin(), gradients.end());
    float* out = b.buffer.data();
    for (const nn::Tensor& g : gradients) {
      std::memcpy(out, g.data(), g.bytes());
      out += static_cast<std::size_t>(g.numel());
    }
    lock.lock();
    queue_.push_back(index);
    ++started_;
    stats_.bytes += static_cast<std::int64_t>(floats * sizeof(float));
    wake_.notify_all();
  }

  void finish() override {
    const auto t = Clock::now();
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, [&] { return done_ == started_ || error_; });
    stats_.exposed_seconds += since(t);
    rethrow_locked();
    stats_.buckets += static_cast<std::int64_t>(started_);
    ++stats_.syncs;
    const std::size_t n = started_;
    started_ = done_ = 0;
    lock.unlock();
    for (std::size_t i = 0; i < n; ++i) {
      const float* in = buckets_[i].buffer.data();
      for (const nn::Tensor& g : buckets_[i].gradients) {
        std::memcpy(g.data(), in, g.bytes());
        in += static_cast<std::size_t>(g.numel());
      }
      buckets_[i].gradients.clear();
    }
  }

  TransportStats stats() const override {
    std::lock_guard lock(mutex_);
    return stats_;
  }

 private:
  struct Bucket {
    std::vector<float> buffer;
    std::vector<nn::Tensor> gradients;
  };

  void run() {
    for (;;) {
      std::size_t index = 0;
      std::vector<float>* buffer = nullptr;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        index = queue_.front();
        queue_.pop_front();
        buffer = &buckets_[index].buffer;
      }
      const auto t = Clock::now();
      std::exception_ptr error;
      try {
        channel_->all_reduce(std::span<float>(*buffer), ReduceOp::sum);
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard lock(mutex_);
        stats_.reduce_seconds += since(t);
        if (error && !error_) error_ = error;
        ++done_;
      }
      done_cv_.notify_all();
    }
  }

  void rethrow_locked() {
    if (error_) std::rethrow_exception(error_);
  }

  std::unique_ptr<Communicator> channel_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_cv_;
  std::deque<std::size_t> queue_;
  std::deque<Bucket> buckets_;  // stable addresses: the thread holds a buffer while start() adds buckets
  std::size_t started_ = 0;
  std::size_t done_ = 0;
  std::exception_ptr error_;
  TransportStats stats_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the rest is made
};

}  // namespace

std::unique_ptr<BucketTransport> host_transport(std::unique_ptr<Communicator> channel) {
  if (!channel) throw std::invalid_argument("host_transport: no communicator");
  return std::make_unique<HostTransport>(std::move(channel));
}

}  // namespace stoke::dist
