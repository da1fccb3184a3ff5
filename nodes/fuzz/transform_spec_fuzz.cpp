// transform_spec_fuzz: a libFuzzer harness for transform specs (registry.hpp): the input is a
// ';'-separated chain such as "random_resized_crop size=32 scale=0.35:1; hflip; normalize",
// made by Registry::builtin().make_list. A chain that is made is then planned (Transform::plan,
// the fused-decode path) for a few source sizes and applied to a small image with a mask and
// boxes, so that the parameters are exercised too.
//
// Any outcome but transforms or a std::invalid_argument (a bad spec, or a step refusing the image
// it is given) -- a crash, a sanitizer report, another exception (std::logic_error: an entry's
// declared parameters and its factory disagree), a hang -- is a bug; so is a planned region that
// is empty or not inside its source, or an image whose fields no longer fit together.
//
// Chains with a number of 4 or more digits (not after a '.') are made but not applied: a
// "resize size=99999" would spend the harness's time and memory on a legitimately huge image.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <opencv2/core.hpp>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "stoke/nodes/image.hpp"
#include "stoke/nodes/registry.hpp"
#include "stoke/nodes/transform.hpp"

namespace {

using namespace stoke::nodes;

bool has_big_number(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    if (std::isdigit(static_cast<unsigned char>(text[i])) == 0) {
      ++i;
      continue;
    }
    const std::size_t start = i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) != 0) ++i;
    const bool fraction = start > 0 && text[start - 1] == '.';
    if (!fraction && i - start >= 4) return true;
  }
  return false;
}

Image test_image() {
  Image image;
  image.pixels = cv::Mat(20, 24, CV_8UC3);
  cv::randu(image.pixels, 0, 256);
  image.mask = cv::Mat(20, 24, CV_8UC1, cv::Scalar(1));
  image.boxes.add({2, 3, 12, 15}, 0);
  image.boxes.add({0, 0, 24, 20}, 1);
  image.name = "fuzz-image";
  return image;
}

void plan_all(const Augment& augment) {
  for (const TransformPtr& transform : augment.transforms()) {
    for (const cv::Size source : {cv::Size(1, 1), cv::Size(24, 20), cv::Size(3, 500), cv::Size(640, 480)}) {
      ItemRng rng = augment.rng_for(0, 7);
      const std::optional<Region> region = transform->plan(source, rng);
      if (!region) continue;
      const cv::Rect& crop = region->crop;
      if (crop.width < 1 || crop.height < 1 || crop.x < 0 || crop.y < 0 || crop.x > source.width - crop.width ||
          crop.y > source.height - crop.height || region->out.width < 1 || region->out.height < 1) {
        std::abort();
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 4096) return 0;
  const std::string_view spec(reinterpret_cast<const char*>(data), size);
  std::vector<TransformPtr> transforms;
  try {
    transforms = Registry::builtin().make_list(spec);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  for (const TransformPtr& transform : transforms) {
    if (transform == nullptr) std::abort();
    (void)transform->describe();
  }
  if (has_big_number(spec)) return 0;
  const Augment augment(transforms, 42);
  plan_all(augment);
  static const Image source = test_image();
  Image image = source;
  image.pixels = source.pixels.clone();
  image.mask = source.mask.clone();
  try {
    image = augment(std::move(image));
  } catch (const std::invalid_argument&) {
    return 0;
  }
  check_fields(image, "transform_spec_fuzz");
  return 0;
}
