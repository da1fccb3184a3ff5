// The built-in shapes dataset and the training defaults of `stoke train`: where the dataset is
// cached, the image size a model trains at, and the transforms used when none are given.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace stoke::train {

/// $STOKE_CACHE, else $XDG_CACHE_HOME/stoke, else ~/.cache/stoke, else ./.stoke-cache.
std::filesystem::path cache_folder();

/// Where builtin_dataset() keeps the dataset: a folder under cache_folder().
std::filesystem::path builtin_dataset_folder();

/// Called while the built-in dataset is written: images written so far, of `total`.
using WriteProgress = std::function<void(std::size_t written, std::size_t total)>;

/// The built-in shapes dataset (10 classes at 32 px, 5000 training and 200 validation images per
/// class) under cache_folder(), written on first use (about 3 s and 70 MB; `progress` is called
/// while it is written). Returns its root, holding train/ and val/. A marker file says the
/// dataset is complete, so an interrupted write is redone rather than trained on.
std::filesystem::path builtin_dataset(const WriteProgress& progress = {});

/// The image side a model trains at by default: 32 for small_cnn and mobilenet, 224 otherwise.
int default_image_size(const std::string& model);

/// The training augmentation when none is given, at `size`: for photos random crops
/// (random_resized_crop scale=0.35:1), flip, normalize; for the built-in shapes dataset
/// (`builtin`), whose images are already framed at their size and whose label a crop could cut
/// off, resize + center_crop, flip, normalize.
std::vector<std::string> default_train_transforms(int size, bool builtin);

/// The evaluation transforms at `size`: resize, center_crop, normalize.
std::vector<std::string> default_eval_transforms(int size);

}  // namespace stoke::train
