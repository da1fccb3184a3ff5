// Checkpoints of a training run: a model's parameters and buffers, the optimizer's state and the
// training state, in one safetensors file (safetensors.hpp) that PyTorch reads as a state_dict,
// since the tensors are named as PyTorch names them.
//
//   save_checkpoint("run/epoch_10.safetensors", model, &sgd, {.epoch = 10, .step = 12510, .lr = lr});
//   TrainingState state = load_checkpoint("run/epoch_10.safetensors", model, &sgd);   // resume
//   load_weights("run/epoch_90.safetensors", model);                                   // inference
//
// The file holds:
// - "conv1.weight", "bn1.running_mean", ...: the model's parameters and buffers, row-major in
//   PyTorch's order whatever their memory layout (an NHWC tensor is written as NCHW);
// - "optimizer.<kind>.<parameter>": the optimizer's state (Optimizer::for_each_state), when one
//   is saved: Sgd's "optimizer.momentum_buffer.conv1.weight", ...; AdamW's
//   "optimizer.exp_avg.conv1.weight", "optimizer.exp_avg_sq.conv1.weight" and
//   "optimizer.step.conv1.weight" (an i32 scalar);
// - metadata "stoke.format" = "1", "stoke.epoch", "stoke.step", "stoke.seed" (decimal integers),
//   "stoke.lr", "stoke.loss_scale" (decimal doubles that read back exactly), and the state's extra
//   entries under their own keys; "stoke.optimizer" names the optimizer whose state the file
//   holds ("adamw"), except for Sgd's, whose checkpoints have always been written without it (an
//   optimizer state without the entry is Sgd's).
//
// Host code for any device: tensors on a GPU are copied through the host on the given stream.
// The functions keep no state; calls on different paths and models may run on several threads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "stoke/nn/device.hpp"
#include "stoke/nn/layer.hpp"
#include "stoke/nn/optimizer.hpp"

namespace stoke::nn {

/// Where a training run is, saved with its checkpoint.
struct TrainingState {
  std::int64_t epoch = 0;
  std::int64_t step = 0;   ///< optimizer steps taken
  double lr = 0;           ///< the last learning rate used
  double loss_scale = 1;   ///< mixed precision's dynamic loss scale
  std::uint64_t seed = 0;  ///< the run's seed
  /// Free-form entries (the model's name, the command line, ...), stored verbatim as metadata.
  /// Keys must not be the reserved "stoke.*" names above.
  std::map<std::string, std::string> extra;

  friend bool operator==(const TrainingState&, const TrainingState&) = default;
};

/// The prefix of the optimizer's tensors in a checkpoint: "optimizer.".
inline constexpr const char* optimizer_state_prefix = "optimizer.";

/// Saves model parameters ("conv1.weight", ...) and buffers ("bn1.running_mean") as PyTorch's
/// state_dict names them, the optimizer's state as "optimizer.<kind>.<name>" (when optimizer !=
/// nullptr), and the training state in the metadata (see above). Device
/// tensors are copied to the host on `stream` first (the call waits for it). Written atomically
/// via write_safetensors: a failure leaves whatever was at `path` before. Throws
/// std::invalid_argument for an extra key that is a reserved name, or two tensors of one name;
/// std::runtime_error naming the path for I/O errors.
void save_checkpoint(const std::filesystem::path& path, Layer& model, Optimizer* optimizer, const TrainingState& state,
                     StreamView stream = StreamView::host());

/// Loads a checkpoint into model, and into optimizer when given (a checkpoint without optimizer
/// state, or with the state of another kind of optimizer, is an error then, saying so; with
/// optimizer == nullptr the file's optimizer tensors are ignored). Checks every name, shape and dtype before copying
/// anything, and throws std::runtime_error naming the path and listing ALL mismatches, e.g. "missing in the checkpoint:
/// a, b; not in the model: c; shape mismatch: fc.weight is [10, 512] in the model but [1000, 512] in the checkpoint" --
/// the model is untouched then. Values are copied into the existing tensors (on their device and in their layout, on
/// `stream`; the call waits for it). Returns the training state. The file must be a stoke checkpoint ("stoke.format" =
/// "1"); read errors throw std::runtime_error naming the path.
TrainingState load_checkpoint(const std::filesystem::path& path, Layer& model, Optimizer* optimizer,
                              StreamView stream = StreamView::host());

/// Loads only the model's parameters and buffers, for inference or fine-tuning: as
/// load_checkpoint without an optimizer (the file's optimizer tensors are ignored), and also for
/// files without stoke's metadata (weights saved from PyTorch with safetensors' save_file), whose
/// training state comes back as the defaults.
TrainingState load_weights(const std::filesystem::path& path, Layer& model, StreamView stream = StreamView::host());

/// The training state of a checkpoint or a plain weights file, as load_weights returns it, read
/// from the file's header alone (no tensor is read): what an application needs to know (the
/// model's name, its classes in `extra`) to build the model before loading the weights into it.
/// Throws std::runtime_error naming the path for a file that cannot be read, is not a safetensors
/// file, is truncated, or has a stoke format this build does not read.
TrainingState read_checkpoint_metadata(const std::filesystem::path& path);

}  // namespace stoke::nn
