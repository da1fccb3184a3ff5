// The MPI communicator: every collective is MPI's non-blocking one, tested until it completes or
// the timeout passes (Open MPI progresses it inside those calls). To name the ranks a timed-out
// collective waited for, each rank also sends every other one a small "arrived at collective n"
// message on a communicator of their own: the ranks whose message has not come are the ones that
// did not reach it. That costs 2 x (world - 1) tiny messages per collective, which is nothing
// beside a gradient bucket at the world sizes of a few nodes; a much larger world would want a
// tree instead.
#include "mpi_communicator.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace stoke::dist::detail {

namespace {

using Clock = std::chrono::steady_clock;

// Serialises the process's MPI calls (MPI_THREAD_SERIALIZED): the gradient thread's collectives
// and the training thread's interleave call by call, on communicators of their own.
std::mutex& mpi_mutex() {
  static std::mutex mutex;
  return mutex;
}

[[noreturn]] void fail(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(std::string("MPI: ") + call +
                           " failed: " + std::string(text, static_cast<std::size_t>(length)) + " (" + file + ":" +
                           std::to_string(line) + ")");
}

#define STOKE_MPI_CHECK(call)                                                             \
  do {                                                                                    \
    const int stoke_mpi_code_ = (call);                                                   \
    if (stoke_mpi_code_ != MPI_SUCCESS) fail(stoke_mpi_code_, #call, __FILE__, __LINE__); \
  } while (0)

// MPI for the process: initialised by the first communicator, finalised when the last one (and
// the process's reference) is gone -- at exit.
class Session {
 public:
  Session() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      STOKE_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
      owned_ = true;
      if (provided < MPI_THREAD_SERIALIZED) {
        throw std::runtime_error("MPI: this MPI gives thread level " + std::to_string(provided) +
                                 "; stoke needs MPI_THREAD_SERIALIZED (its gradient thread calls MPI)");
      }
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  ~Session() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && !finalized) MPI_Finalize();
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

 private:
  bool owned_ = false;
};

std::shared_ptr<Session> session() {
  static const std::shared_ptr<Session> instance = std::make_shared<Session>();
  return instance;
}

int count_of(std::size_t n) {
  if (n > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw std::invalid_argument("MPI: a collective of " + std::to_string(n) + " elements is more than one call takes");
  }
  return static_cast<int>(n);
}

MPI_Op op_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return MPI_SUM;
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::max:
      return MPI_MAX;
  }
  return MPI_SUM;
}

std::string seconds(std::chrono::milliseconds t) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(t.count()) / 1000.0);
  return text;
}

std::string list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  }
  return out;
}

constexpr int kArrivalTag = 7;

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(std::shared_ptr<Session> session, MPI_Comm parent, std::chrono::milliseconds timeout, int local_rank,
                  int local_world)
      : session_(std::move(session)), timeout_(timeout) {
    std::lock_guard lock(mpi_mutex());
    STOKE_MPI_CHECK(MPI_Comm_dup(parent, &comm_));
    STOKE_MPI_CHECK(MPI_Comm_dup(parent, &arrivals_));
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(arrivals_, MPI_ERRORS_RETURN);
    STOKE_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    STOKE_MPI_CHECK(MPI_Comm_size(comm_, &world_));
    if (local_world > 0) {
      local_rank_ = local_rank;
      local_world_ = local_world;
    } else {  // the ranks sharing this node's memory
      MPI_Comm node = MPI_COMM_NULL;
      STOKE_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
      MPI_Comm_rank(node, &local_rank_);
      MPI_Comm_size(node, &local_world_);
      MPI_Comm_free(&node);
    }
  }

  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    std::lock_guard lock(mpi_mutex());
    MPI_Comm_free(&arrivals_);
    MPI_Comm_free(&comm_);
  }

  int rank() const noexcept override { return rank_; }
  int world() const noexcept override { return world_; }
  int local_rank() const noexcept override { return local_rank_; }
  int local_world() const noexcept override { return local_world_; }
  std::string describe() const override {
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string name(version, static_cast<std::size_t>(length));
    name = name.substr(0, name.find_first_of(",\n"));
    return "mpi (" + name + "), rank " + std::to_string(rank_) + " of " + std::to_string(world_);
  }

  void all_reduce(std::span<float> values, ReduceOp op) override {
    reduce(values.data(), values.size(), MPI_FLOAT, op);
  }
  void all_reduce(std::span<double> values, ReduceOp op) override {
    reduce(values.data(), values.size(), MPI_DOUBLE, op);
  }
  void all_reduce(std::span<std::int64_t> values, ReduceOp op) override {
    reduce(values.data(), values.size(), MPI_INT64_T, op);
  }

  void broadcast(std::span<std::byte> bytes, int root) override {
    if (root < 0 || root >= world_) {
      throw std::invalid_argument("broadcast from rank " + std::to_string(root) + " in a world of " +
                                  std::to_string(world_));
    }
    run("broadcast",
        [&](MPI_Request* r) { return MPI_Ibcast(bytes.data(), count_of(bytes.size()), MPI_BYTE, root, comm_, r); });
  }

  std::vector<std::byte> all_gather(std::span<const std::byte> bytes) override {
    std::vector<std::byte> out(bytes.size() * static_cast<std::size_t>(world_));
    const int n = count_of(bytes.size());
    run("all-gather",
        [&](MPI_Request* r) { return MPI_Iallgather(bytes.data(), n, MPI_BYTE, out.data(), n, MPI_BYTE, comm_, r); });
    return out;
  }

  void barrier() override {
    run("barrier", [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
  }

  std::unique_ptr<Communicator> split() override {
    return std::make_unique<MpiCommunicator>(session_, comm_, timeout_, local_rank_, local_world_);
  }

  [[noreturn]] void abort(const std::string& message, int code) override {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; should it, end this process at least
  }

  void set_timeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }
  std::chrono::milliseconds timeout() const noexcept override { return timeout_; }

 private:
  void reduce(void* data, std::size_t n, MPI_Datatype type, ReduceOp op) {
    if (n == 0) return;
    run("all-reduce",
        [&](MPI_Request* r) { return MPI_Iallreduce(MPI_IN_PLACE, data, count_of(n), type, op_of(op), comm_, r); });
  }

  // Runs one collective, started by `start`, to its end or the timeout, with the arrival messages
  // that name the ranks it waited for.
  template <class Start>
  void run(const char* what, Start start) {
    const std::uint64_t sequence = ++sequence_;
    const auto others = static_cast<std::size_t>(world_ - 1);
    std::vector<std::uint64_t> arrived(static_cast<std::size_t>(world_), 0);
    std::vector<int> peers;
    std::vector<MPI_Request> requests;  // [collective, receives..., sends...]
    requests.reserve(1 + 2 * others);
    requests.push_back(MPI_REQUEST_NULL);
    {
      std::lock_guard lock(mpi_mutex());
      for (int peer = 0; peer < world_; ++peer) {
        if (peer == rank_) continue;
        peers.push_back(peer);
        requests.push_back(MPI_REQUEST_NULL);
        STOKE_MPI_CHECK(MPI_Irecv(&arrived[static_cast<std::size_t>(peer)], 1, MPI_UINT64_T, peer, kArrivalTag,
                                  arrivals_, &requests.back()));
      }
      for (const int peer : peers) {
        requests.push_back(MPI_REQUEST_NULL);
        STOKE_MPI_CHECK(MPI_Isend(&sequence, 1, MPI_UINT64_T, peer, kArrivalTag, arrivals_, &requests.back()));
      }
      const int code = start(&requests.front());
      if (code != MPI_SUCCESS) fail(code, what, __FILE__, __LINE__);
    }
    const auto deadline = Clock::now() + timeout_;
    if (!wait(requests, peers.size(), deadline)) {
      std::vector<int> missing;
      std::lock_guard lock(mpi_mutex());
      for (std::size_t i = 0; i < peers.size(); ++i) {
        int done = 0;
        MPI_Test(&requests[1 + i], &done, MPI_STATUS_IGNORE);
        if (!done) missing.push_back(peers[i]);
      }
      std::string message = "rank " + std::to_string(rank_) + ": the " + what + " #" + std::to_string(sequence) +
                            " did not complete within " + seconds(timeout_) + ": ";
      message += missing.empty() ? std::string("every rank reached it, but it did not finish (the network?)")
                                 : (missing.size() == 1 ? "rank " : "ranks ") + list(missing) +
                                       " did not reach it (stopped, hung or busy elsewhere)";
      message += "; the limit is --dist-timeout";
      throw Timeout(message, std::move(missing));
    }
    for (const int peer : peers) {
      const std::uint64_t theirs = arrived[static_cast<std::size_t>(peer)];
      if (theirs != sequence) {
        throw std::runtime_error("rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) +
                                 " was at collective #" + std::to_string(theirs) + " when this rank was at #" +
                                 std::to_string(sequence) + " (" + what +
                                 "): the ranks called collectives in different orders (a bug in the caller)");
      }
    }
  }

  // Tests `requests` -- the collective, then `peers` arrival receives -- until all complete (true)
  // or `deadline` passes (false). Open MPI moves a collective's data on only inside these tests,
  // so once every peer has arrived (the data is flowing) they come back to back, yielding the
  // core between them; while a peer has not arrived yet (it is still computing, or stopped) the
  // rank sleeps between tests, backing off to 200 us, and leaves the cores to the work. (Sleeping
  // while the data flows made a 42 MiB all-reduce between two local ranks 6x slower.)
  static bool wait(std::vector<MPI_Request>& requests, std::size_t peers, Clock::time_point deadline) {
    bool everyone_here = peers == 0;
    auto pause = std::chrono::microseconds(20);
    for (int round = 0;; ++round) {
      int done = 0;
      {
        std::lock_guard lock(mpi_mutex());
        STOKE_MPI_CHECK(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE));
        if (!done && !everyone_here) {
          int here = 0;
          STOKE_MPI_CHECK(MPI_Testall(static_cast<int>(peers), requests.data() + 1, &here, MPI_STATUSES_IGNORE));
          everyone_here = here != 0;
        }
      }
      if (done) return true;
      if (Clock::now() > deadline) return false;
      if (everyone_here || round < 256) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(200));
      }
    }
  }

  std::shared_ptr<Session> session_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm arrivals_ = MPI_COMM_NULL;
  int rank_ = 0;
  int world_ = 1;
  int local_rank_ = 0;
  int local_world_ = 1;
  std::chrono::milliseconds timeout_;
  std::uint64_t sequence_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const ConnectOptions& options) {
  return std::make_unique<MpiCommunicator>(session(), MPI_COMM_WORLD, options.timeout, -1, -1);
}

}  // namespace stoke::dist::detail
