// nn's checkpoints: a round trip of parameters, buffers, momentum and training state; the
// file as an independent reader sees it; every kind of mismatch in one message; an atomic write
// that leaves the old checkpoint on failure; and weights-only loading.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/checkpoint.hpp>
#include <stoke/nn/layer.hpp>
#include <stoke/nn/optimizer.hpp>
#include <stoke/nn/safetensors.hpp>
#include <stoke/nn/tensor.hpp>
#include <string>
#include <utility>
#include <vector>

#include "../gpu/expect_throw.hpp"
#include "temp_folder.hpp"

namespace stoke::nn {
namespace {

namespace fs = std::filesystem;
using gpu::test::expect_throw_mentioning;

// A layer that only holds state: a decayed "weight" (in a chosen memory layout), an undecayed
// "bias" and a "running_mean" buffer, filled with values that follow from `start`.
class Holder final : public Layer {
 public:
  Holder(const Shape& weight_shape, const Shape& bias_shape, float start, TensorLayout layout = TensorLayout::nchw) {
    weight_.value = Tensor(weight_shape, DType::f32, Device::cpu(), layout);
    bias_.value = Tensor(bias_shape);
    bias_.decay = false;
    running_mean_ = Tensor(bias_shape);
    fill(weight_.value, start, 0.25f);
    fill(bias_.value, -start, -1);
    fill(running_mean_, 10 * start, 0.5f);
  }
  Parameter& weight() { return weight_; }
  Parameter& bias() { return bias_; }
  Tensor& running_mean() { return running_mean_; }

  void for_each_parameter(const ParameterVisitor& visit, const std::string& prefix) override {
    visit(join(prefix, "weight"), weight_);
    visit(join(prefix, "bias"), bias_);
  }
  void for_each_buffer(const BufferVisitor& visit, const std::string& prefix) override {
    visit(join(prefix, "running_mean"), running_mean_);
  }
  std::string describe() const override { return "Holder()"; }

 protected:
  Tensor forward_impl(const Tensor& x, Context&) override { return x; }
  Tensor backward_impl(const Tensor& dy, Context&) override { return dy; }

 private:
  // Memory order: start, start + step, ...
  static void fill(const Tensor& t, float start, float step) {
    float value = start;
    for (float& v : t.f32()) {
      v = value;
      value += step;
    }
  }

  Parameter weight_;
  Parameter bias_;
  Tensor running_mean_;
};

// Two Holders, "0" and "1", the first with values from `start`.
std::unique_ptr<Sequential> two_holders(float start) {
  auto model = std::make_unique<Sequential>();
  model->emplace<Holder>("", Shape{2, 3}, Shape{2}, start);
  model->emplace<Holder>("", Shape{1, 2, 2, 2}, Shape{1}, start + 100);
  return model;
}

// Everything a checkpoint holds, by name, as floats.
std::vector<std::pair<std::string, std::vector<float>>> snapshot(Layer& model, Sgd* sgd) {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  model.for_each_parameter([&](const std::string& name, Parameter& p) { out.emplace_back(name, p.value.to_vector()); });
  model.for_each_buffer([&](const std::string& name, Tensor& t) { out.emplace_back(name, t.to_vector()); });
  if (sgd != nullptr) {
    sgd->for_each_state(
        [&](const std::string& name, Tensor& t) { out.emplace_back("momentum " + name, t.to_vector()); });
  }
  return out;
}

// Momentum values by hand (no kernel needed): buffer i holds i + 0.5, i + 1.5, ...
void fill_momentum(Sgd& sgd) {
  float value = 0.5f;
  sgd.for_each_state([&](const std::string&, Tensor& t) {
    for (float& v : t.f32()) v = value++;
  });
}

std::string read_text(const fs::path& path) {
  std::string text(fs::file_size(path), '\0');
  std::ifstream(path, std::ios::binary).read(text.data(), static_cast<std::streamsize>(text.size()));
  return text;
}

TrainingState sample_state() {
  return {.epoch = 3,
          .step = 1234,
          .lr = 0.1,
          .loss_scale = 1.0 / 3.0,
          .seed = (std::uint64_t{1} << 63) + 5,
          .extra = {{"model", "two holders"}, {"argv", "train --epochs 90"}}};
}

class Checkpoints : public testing::TempFolderTest {
 protected:
  std::unique_ptr<Backend> backend_ = make_backend(Device::cpu());
};

TEST_F(Checkpoints, RoundTripRestoresValuesBuffersMomentumAndState) {
  auto saved = two_holders(1);
  Sgd saved_sgd(*saved, *backend_);
  fill_momentum(saved_sgd);
  const fs::path path = dir_ / "epoch_3.safetensors";
  save_checkpoint(path, *saved, &saved_sgd, sample_state());

  auto loaded = two_holders(-7);
  Sgd loaded_sgd(*loaded, *backend_);
  const TrainingState state = load_checkpoint(path, *loaded, &loaded_sgd);
  EXPECT_EQ(state, sample_state());
  EXPECT_EQ(snapshot(*loaded, &loaded_sgd), snapshot(*saved, &saved_sgd));
  EXPECT_FALSE(fs::exists(dir_ / "epoch_3.safetensors.tmp"));
}

TEST_F(Checkpoints, TheFileNamesTensorsAsPyTorchDoesWithTheStateInItsMetadata) {
  auto model = two_holders(1);
  Sgd sgd(*model, *backend_);
  const fs::path path = dir_ / "model.safetensors";
  save_checkpoint(path, *model, &sgd, sample_state());
  const SafetensorsFile file = read_safetensors(path);
  std::vector<std::string> names;
  for (const TensorRecord& t : file.tensors) names.push_back(t.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "0.running_mean", "1.running_mean",
                                      "optimizer.momentum_buffer.0.weight", "optimizer.momentum_buffer.0.bias",
                                      "optimizer.momentum_buffer.1.weight", "optimizer.momentum_buffer.1.bias"}));
  EXPECT_EQ(file.tensors[2].shape, (std::vector<std::int64_t>{1, 2, 2, 2}));
  EXPECT_EQ(file.metadata.at("stoke.format"), "1");
  EXPECT_EQ(file.metadata.at("stoke.epoch"), "3");
  EXPECT_EQ(file.metadata.at("stoke.step"), "1234");
  EXPECT_EQ(file.metadata.at("stoke.seed"), "9223372036854775813");
  EXPECT_EQ(file.metadata.at("stoke.lr"), "0.10000000000000001");  // 17 significant digits read back exactly
  EXPECT_EQ(file.metadata.at("model"), "two holders");
}

TEST_F(Checkpoints, ChannelsLastTensorsAreStoredInPyTorchsOrder) {
  Sequential saved;
  Holder& nhwc = saved.emplace<Holder>("conv", Shape{2, 3, 1, 2}, Shape{2}, 1.0f, TensorLayout::nhwc);
  const fs::path path = dir_ / "nhwc.safetensors";
  save_checkpoint(path, saved, nullptr, {});
  const SafetensorsFile file = read_safetensors(path);
  const std::vector<float> planar = to_layout(nhwc.weight().value, TensorLayout::nchw).to_vector();
  std::vector<float> stored(planar.size());
  std::memcpy(stored.data(), file.tensors[0].data.data(), file.tensors[0].data.size());
  EXPECT_EQ(stored, planar);
  EXPECT_NE(stored, nhwc.weight().value.to_vector());  // the memory order differs: the test means something

  Sequential loaded;
  Holder& back = loaded.emplace<Holder>("conv", Shape{2, 3, 1, 2}, Shape{2}, 5.0f, TensorLayout::nhwc);
  load_weights(path, loaded);
  EXPECT_EQ(back.weight().value.to_vector(), nhwc.weight().value.to_vector());
}

#ifndef STOKE_READ_SAFETENSORS_SCRIPT
#error "tests/nn/CMakeLists.txt defines STOKE_READ_SAFETENSORS_SCRIPT (scripts/read_safetensors.py)"
#endif

TEST_F(Checkpoints, APythonReaderSeesTheValuesAndMetadata) {
  if (std::system("python3 -c 'import json, struct' > /dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  auto model = two_holders(1);
  const fs::path path = dir_ / "model.safetensors";
  save_checkpoint(path, *model, nullptr, sample_state());
  const fs::path out = dir_ / "read.txt";
  const std::string command =
      "python3 '" STOKE_READ_SAFETENSORS_SCRIPT "' '" + path.string() + "' > '" + out.string() + "' 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << read_text(out);
  const std::string text = read_text(out);
  EXPECT_NE(text.find("# stoke.epoch=3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# model=two holders\n"), std::string::npos) << text;
  EXPECT_NE(text.find("0.weight\tF32\t2,3\t1.0 1.25 1.5 1.75 2.0 2.25\n"), std::string::npos) << text;
  EXPECT_NE(text.find("0.running_mean\tF32\t2\t10.0 10.5\n"), std::string::npos) << text;
}

TEST_F(Checkpoints, EveryMismatchIsListedAndTheModelIsLeftAlone) {
  Sequential saved;
  saved.emplace<Holder>("fc", Shape{4, 2}, Shape{4}, 1.0f);
  saved.emplace<Holder>("old", Shape{1}, Shape{1}, 1.0f);
  const fs::path path = dir_ / "other.safetensors";
  save_checkpoint(path, saved, nullptr, {});

  Sequential model;
  Holder& fc = model.emplace<Holder>("fc", Shape{2, 2}, Shape{4}, 3.0f);
  fc.bias().value = Tensor::zeros({4}, DType::bf16);
  model.emplace<Holder>("new", Shape{1}, Shape{1}, 3.0f);
  const auto before = snapshot(model, nullptr);
  try {
    (void)load_checkpoint(path, model, nullptr);
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    for (const std::string& fragment :
         {path.string(), std::string("missing in the checkpoint: new.weight, new.bias, new.running_mean"),
          std::string("not in the model: old.weight, old.bias, old.running_mean"),
          std::string("shape mismatch: fc.weight is [2, 2] in the model but [4, 2] in the checkpoint"),
          std::string("dtype mismatch: fc.bias is bf16 in the model but f32 in the checkpoint")}) {
      EXPECT_NE(message.find(fragment), std::string::npos) << "'" << message << "' lacks '" << fragment << "'";
    }
  }
  EXPECT_EQ(snapshot(model, nullptr), before);
}

TEST_F(Checkpoints, AnOptimizerCannotLoadFromACheckpointWithoutItsState) {
  auto saved = two_holders(1);
  const fs::path path = dir_ / "weights_only.safetensors";
  save_checkpoint(path, *saved, nullptr, sample_state());
  auto model = two_holders(2);
  Sgd sgd(*model, *backend_);
  expect_throw_mentioning<std::runtime_error>([&] { (void)load_checkpoint(path, *model, &sgd); }, "no optimizer state");
  // Without an optimizer the same file loads.
  EXPECT_EQ(load_checkpoint(path, *model, nullptr), sample_state());
  EXPECT_EQ(snapshot(*model, nullptr), snapshot(*saved, nullptr));
}

TEST_F(Checkpoints, AFailedWriteLeavesTheOldCheckpoint) {
  auto model = two_holders(1);
  const fs::path path = dir_ / "last.safetensors";
  save_checkpoint(path, *model, nullptr, sample_state());
  const std::string old_bytes = read_text(path);

  auto changed = two_holders(9);
  // The temporary file cannot be created where a folder of its name is (root or not).
  fs::create_directories(dir_ / "last.safetensors.tmp");
  EXPECT_THROW(save_checkpoint(path, *changed, nullptr, {}), std::runtime_error);
  EXPECT_EQ(read_text(path), old_bytes);
  fs::remove_all(dir_ / "last.safetensors.tmp");

  // A folder that does not exist: an error naming it, nothing written.
  expect_throw_mentioning<std::runtime_error>(
      [&] { save_checkpoint(dir_ / "missing" / "x.safetensors", *changed, nullptr, {}); }, "missing");

  // A reserved metadata key is refused before anything is written.
  TrainingState clash = sample_state();
  clash.extra["stoke.step"] = "7";
  expect_throw_mentioning<std::invalid_argument>([&] { save_checkpoint(path, *changed, nullptr, clash); },
                                                 "'stoke.step'");
  EXPECT_EQ(read_text(path), old_bytes);
  EXPECT_EQ(load_checkpoint(path, *model, nullptr), sample_state());
}

TEST_F(Checkpoints, LoadWeightsIgnoresOptimizerStateAndReadsPlainFiles) {
  auto saved = two_holders(1);
  Sgd sgd(*saved, *backend_);
  fill_momentum(sgd);
  const fs::path path = dir_ / "full.safetensors";
  save_checkpoint(path, *saved, &sgd, sample_state());
  auto model = two_holders(4);
  EXPECT_EQ(load_weights(path, *model), sample_state());
  EXPECT_EQ(snapshot(*model, nullptr), snapshot(*saved, nullptr));

  // A plain state_dict file (as safetensors' save_file writes from PyTorch): no stoke metadata.
  SafetensorsFile plain = read_safetensors(path);
  plain.metadata = {{"format", "pt"}};
  std::erase_if(plain.tensors, [](const TensorRecord& t) { return t.name.starts_with("optimizer."); });
  const fs::path plain_path = dir_ / "plain.safetensors";
  write_safetensors(plain_path, plain);
  auto fresh = two_holders(5);
  const TrainingState state = load_weights(plain_path, *fresh);
  EXPECT_EQ(state.step, 0);
  EXPECT_EQ(state.extra, (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_EQ(snapshot(*fresh, nullptr), snapshot(*saved, nullptr));
  // Resuming training needs stoke's state, so load_checkpoint refuses the plain file.
  expect_throw_mentioning<std::runtime_error>([&] { (void)load_checkpoint(plain_path, *fresh, nullptr); },
                                              "not a stoke checkpoint");
}

TEST_F(Checkpoints, ReadCheckpointMetadataGivesTheStateWithoutTheTensors) {
  auto model = two_holders(1);
  Sgd sgd(*model, *backend_);
  const fs::path path = dir_ / "run.safetensors";
  save_checkpoint(path, *model, &sgd, sample_state());
  EXPECT_EQ(read_checkpoint_metadata(path), sample_state());

  // Only the header is read, but the tensors' offsets are checked against the file's size: a
  // checkpoint cut short is an error naming it, not a state.
  const std::string whole = read_text(path);
  const fs::path cut = dir_ / "cut.safetensors";
  std::ofstream(cut, std::ios::binary) << whole.substr(0, whole.size() - 4);
  expect_throw_mentioning<std::runtime_error>([&] { (void)read_checkpoint_metadata(cut); }, cut.string());
  expect_throw_mentioning<std::runtime_error>([&] { (void)read_checkpoint_metadata(dir_ / "none.safetensors"); },
                                              "none.safetensors");
}

}  // namespace
}  // namespace stoke::nn
