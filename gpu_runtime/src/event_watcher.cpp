#include "stoke/gpu/event_watcher.hpp"

#include <cstdio>
#include <optional>
#include <utility>

namespace stoke::gpu {

EventWatcher::EventWatcher(Device device, std::string name) : device_(device), name_(std::move(name)) {
  thread_ = std::thread([this] { loop(); });
}

EventWatcher::~EventWatcher() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void EventWatcher::after(const Event& event, Callback then, std::function<void(std::exception_ptr)> on_error) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(Entry{&event, std::move(then), std::move(on_error)});
  }
  wake_.notify_one();
}

std::size_t EventWatcher::pending() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

void EventWatcher::loop() {
  std::optional<DeviceGuard> guard;
  try {
    guard.emplace(device_);
  } catch (...) {  // a bad device fails each wait below, reported through on_error
  }
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything has run
    Entry entry = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    std::exception_ptr failure;
    try {
      entry.event->synchronize();  // sleeps in the driver: events are made with blocking_sync
    } catch (...) {
      failure = std::current_exception();
    }
    try {
      if (failure && entry.on_error) {
        entry.on_error(failure);
      } else {
        if (failure) std::fprintf(stderr, "stoke: %s: waiting for the GPU failed; going on\n", name_.c_str());
        entry.then();
      }
    } catch (const std::exception& error) {
      std::fprintf(stderr, "stoke: %s: a completion callback threw: %s\n", name_.c_str(), error.what());
    } catch (...) {
      std::fprintf(stderr, "stoke: %s: a completion callback threw\n", name_.c_str());
    }
    entry = Entry{};  // destroy what the callback owned before taking the lock again
    lock.lock();
  }
}

}  // namespace stoke::gpu
