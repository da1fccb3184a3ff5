#include "stoke/nodes/read_on_threads.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace stoke::nodes {

struct ReadOnThreads::Pool {
  struct Job {
    ItemRef ref;
    graph::Completion<Sample> done;
  };

  ReadSample read;
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<Job> jobs;  // bounded by the stage's concurrency
  bool stopping = false;
  std::vector<std::thread> threads;

  Pool(DatasetPtr dataset, int count) : read(std::move(dataset)) {
    for (int t = 0; t < std::max(1, count); ++t) threads.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      const std::lock_guard lock(mutex);
      stopping = true;
    }
    ready.notify_all();
    for (std::thread& thread : threads) thread.join();
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  void work() {
    for (;;) {
      std::unique_lock lock(mutex);
      ready.wait(lock, [&] { return stopping || !jobs.empty(); });
      if (jobs.empty()) return;  // stopping, nothing left
      Job job = std::move(jobs.front());
      jobs.pop_front();
      lock.unlock();
      std::exception_ptr error;
      try {
        job.done(read(job.ref));
        continue;
      } catch (...) {
        error = std::current_exception();
      }
      if (job.done.pending()) job.done.fail(error);
    }
  }
};

ReadOnThreads::ReadOnThreads(DatasetPtr dataset, int threads)
    : pool_(std::make_shared<Pool>(std::move(dataset), threads)) {}

void ReadOnThreads::operator()(ItemRef ref, graph::Completion<Sample> done) const {
  {
    const std::lock_guard lock(pool_->mutex);
    pool_->jobs.push_back({ref, std::move(done)});
  }
  pool_->ready.notify_one();
}

}  // namespace stoke::nodes
