// EventWatcher: learns that GPU work is done without making a pipeline thread wait for it.
//
// One thread per watcher waits on events in the order they were given (record them on one
// stream, so they complete in that order) and runs each event's callback once it has completed.
// The wait sleeps in the driver (events created with blocking_sync), so an idle watcher costs no
// CPU. This is how batch slots come back and async stages' Completions re-enter the graph: the
// oneTBB workers only ever enqueue work.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "stoke/gpu/callback.hpp"
#include "stoke/gpu/device.hpp"
#include "stoke/gpu/event.hpp"

namespace stoke::gpu {

class EventWatcher {
 public:
  /// Starts the thread, whose current CUDA device is `device`. `name` appears in error messages.
  EventWatcher(Device device, std::string name);
  /// Runs what is still pending (waiting for its events), then joins. Never throws.
  ~EventWatcher();
  EventWatcher(const EventWatcher&) = delete;
  EventWatcher& operator=(const EventWatcher&) = delete;

  /// Calls `then` on the watcher's thread once the work `event` captured is done. The event must
  /// stay alive, and not be recorded again, until `then` has run. If waiting fails (a CUDA error:
  /// the device is in a bad state), `on_error` gets the exception instead of `then`. Thread-safe.
  void after(const Event& event, Callback then, std::function<void(std::exception_ptr)> on_error = {});

  /// Callbacks not yet run.
  std::size_t pending() const;
  const std::string& name() const noexcept { return name_; }

 private:
  struct Entry {
    const Event* event;
    Callback then;
    std::function<void(std::exception_ptr)> on_error;
  };
  void loop();

  Device device_;
  std::string name_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Entry> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace stoke::gpu
