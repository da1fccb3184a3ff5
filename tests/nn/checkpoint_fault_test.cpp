// Faults while a checkpoint is written: a process killed (SIGKILL) at random moments while it saves
// checkpoints to one path over and over, and a full disk (RLIMIT_FSIZE) while it saves over a good
// checkpoint. The last complete checkpoint must always load, a save that returned is never lost,
// and a failed save throws naming the file and leaves the previous file byte for byte.
//
// The saving runs in a fork()ed child: a checkpoint is built and saved with host copies only (no
// kernel, so no TBB worker exists in the parent when it forks).
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <new>
#include <random>
#include <stdexcept>
#include <stoke/nn/checkpoint.hpp>
#include <stoke/nn/layer.hpp>
#include <stoke/nn/models.hpp>
#include <stoke/nn/tensor.hpp>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "temp_folder.hpp"

namespace stoke::nn {
namespace {

namespace fs = std::filesystem;

constexpr ModelOptions model_options{.classes = 2, .seed = 1, .width = 8};

std::unique_ptr<Sequential> small_model() { return make_model("small_cnn", model_options); }

// Every f32 parameter and buffer of `model` set to `value`: a checkpoint's tensors then say which
// save wrote them.
void fill_with(Layer& model, float value) {
  const auto fill = [&](Tensor& t) {
    if (t.dtype() == DType::f32)
      for (float& v : t.f32()) v = value;
  };
  model.for_each_parameter([&](const std::string&, Parameter& p) { fill(p.value); });
  model.for_each_buffer([&](const std::string&, Tensor& t) { fill(t); });
}

// The names of the f32 tensors of `model` that do not all hold `value` ("" when none).
std::string tensors_not_holding(Layer& model, float value) {
  std::string wrong;
  const auto check = [&](const std::string& name, const Tensor& t) {
    if (t.dtype() != DType::f32) return;
    for (const float v : t.to_vector()) {
      if (v != value) {
        wrong += (wrong.empty() ? "" : ", ") + name;
        return;
      }
    }
  };
  model.for_each_parameter([&](const std::string& name, Parameter& p) { check(name, p.value); });
  model.for_each_buffer([&](const std::string& name, Tensor& t) { check(name, t); });
  return wrong;
}

std::vector<char> file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> folder_entries(const fs::path& folder) {
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

// ---- a child process

using stoke::test::ChildResult;
using stoke::test::describe;
using stoke::test::run_in_child;
using enum stoke::test::ChildExit;

// Saves `model` filled with `step`, its training state saying so.
void save_step(const fs::path& path, Layer& model, std::int64_t step) {
  fill_with(model, static_cast<float>(step));
  save_checkpoint(path, model, nullptr, {.epoch = 1, .step = step, .seed = 7, .extra = {{"model", "small_cnn"}}});
}

// The step of the checkpoint at `path`, after checking that its header and its tensors agree;
// -1 with a failure added when the file does not load.
std::int64_t loaded_step(const fs::path& path, const std::string& context) {
  try {
    const TrainingState header = read_checkpoint_metadata(path);
    auto model = small_model();
    const TrainingState state = load_checkpoint(path, *model, nullptr);
    EXPECT_EQ(header, state) << context;
    EXPECT_EQ(state.extra.at("model"), "small_cnn") << context;
    const std::string wrong = tensors_not_holding(*model, static_cast<float>(state.step));
    EXPECT_EQ(wrong, "") << context << ": tensors of another save than step " << state.step;
    return state.step;
  } catch (const std::exception& error) {
    ADD_FAILURE() << context << ": the checkpoint does not load: " << error.what();
    return -1;
  }
}

using CheckpointFaultTest = testing::TempFolderTest;

// A process saving checkpoints to one path in a loop, SIGKILLed after a random delay, round after
// round: the path always holds a complete checkpoint (metadata and tensors of one save), never
// older than the last save that returned, and a leftover temporary file does not stop later saves.
TEST_F(CheckpointFaultTest, SigkillWhileSavingAlwaysLeavesTheLastCompleteCheckpoint) {
  const fs::path path = dir_ / "run.safetensors";
  constexpr int rounds = 40;
  constexpr std::uint32_t seed = 20240611;
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> delay_us(0, 30000);

  // The last step whose save returned, written by the child, read by the parent after the kill.
  void* shared =
      ::mmap(nullptr, sizeof(std::atomic<std::int64_t>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  auto* committed = new (shared) std::atomic<std::int64_t>(-1);

  std::int64_t last_loaded = -1;  // the step the path held after the previous round
  int killed_mid_save = 0;        // rounds that left the temporary file behind
  int no_file_rounds = 0;
  for (int round = 0; round < rounds; ++round) {
    const std::string context = "round " + std::to_string(round) + " (seed " + std::to_string(seed) + ")";
    const std::int64_t first = std::int64_t{round} * 100000;  // float-exact steps, distinct per round
    committed->store(-1);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      try {
        auto model = small_model();
        for (std::int64_t step = first;; ++step) {
          save_step(path, *model, step);
          committed->store(step);
        }
      } catch (...) {
        ::_exit(1);
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(random)));
    ::kill(pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << context << ": the saving child failed";
    const std::int64_t returned_step = committed->load();
    if (fs::exists(fs::path(path) += ".tmp")) ++killed_mid_save;

    if (!fs::exists(path)) {
      // Only before any save has completed: never once a checkpoint was there.
      EXPECT_EQ(last_loaded, -1) << context << ": the checkpoint of step " << last_loaded << " is gone";
      EXPECT_EQ(returned_step, -1) << context << ": the save of step " << returned_step << " returned but left no file";
      ++no_file_rounds;
      continue;
    }
    const std::int64_t step = loaded_step(path, context);
    if (returned_step >= 0) {
      // The last save that returned, or the one after it (renamed into place, then killed).
      EXPECT_TRUE(step == returned_step || step == returned_step + 1)
          << context << ": loaded step " << step << " but the save of step " << returned_step << " had returned";
    } else {
      // No save returned this round: the previous round's checkpoint, or this round's first.
      EXPECT_TRUE(step == last_loaded || step == first)
          << context << ": loaded step " << step << ", expected " << last_loaded << " or " << first;
    }
    last_loaded = step;
  }
  ::munmap(shared, sizeof(std::atomic<std::int64_t>));
  EXPECT_LT(no_file_rounds, rounds) << "no save ever completed: the test tested nothing";
  EXPECT_GT(killed_mid_save, 0) << "no kill landed inside a save: the test tested little";
  RecordProperty("killed_mid_save", killed_mid_save);
  std::cout << "[ info ] " << killed_mid_save << " of " << rounds << " kills left a temporary file (mid-save), "
            << no_file_rounds << " found no checkpoint yet\n";

  // A save after all this (over a leftover temporary file, maybe) works and leaves only the file.
  const ChildResult last = run_in_child([&] {
    auto model = small_model();
    save_step(path, *model, 12345678);
  });
  ASSERT_EQ(last.exit_code, returned) << describe(last);
  EXPECT_EQ(loaded_step(path, "after the rounds"), 12345678);
  EXPECT_EQ(folder_entries(dir_), std::vector<std::string>{"run.safetensors"});
}

// A full disk (the file size limit) while saving over a good checkpoint: the save throws naming
// the file, and the previous checkpoint is there byte for byte, with no temporary file left.
TEST_F(CheckpointFaultTest, FullDiskWhileSavingThrowsNamingTheFileAndKeepsThePreviousOne) {
  const fs::path path = dir_ / "epoch_1.safetensors";
  const ChildResult good = run_in_child([&] {
    auto model = small_model();
    save_step(path, *model, 1);
  });
  ASSERT_EQ(good.exit_code, returned) << describe(good);
  const std::vector<char> before = file_bytes(path);
  ASSERT_GT(before.size(), 4096u);

  for (const rlim_t limit : {rlim_t{0}, rlim_t{4096}, static_cast<rlim_t>(before.size() - 1)}) {
    const std::string context = "file size limit " + std::to_string(limit);
    const ChildResult full = run_in_child([&] {
      auto model = small_model();
      std::signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG instead of killing
      const rlimit cap{.rlim_cur = limit, .rlim_max = limit};
      if (::setrlimit(RLIMIT_FSIZE, &cap) != 0) throw std::logic_error("setrlimit failed");
      save_step(path, *model, 2);
    });
    ASSERT_FALSE(full.hung) << context << ": " << describe(full);
    RecordProperty("message", full.message);  // in --gtest_output=xml
    EXPECT_EQ(full.exit_code, threw) << context << ": the save should have thrown; " << describe(full);
    EXPECT_NE(full.message.find(path.string()), std::string::npos)
        << context << ": the message does not name the file: " << full.message;
    EXPECT_NE(full.message.find("File too large"), std::string::npos)
        << context << ": the message does not say why: " << full.message;

    const std::vector<char> after = file_bytes(path);
    EXPECT_TRUE(after == before) << context << ": the previous checkpoint changed (" << after.size() << " bytes, was "
                                 << before.size() << ")";
    EXPECT_EQ(loaded_step(path, context), 1);
    EXPECT_EQ(folder_entries(dir_), std::vector<std::string>{"epoch_1.safetensors"}) << context;
  }
}

}  // namespace
}  // namespace stoke::nn
