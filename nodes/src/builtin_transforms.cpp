// The built-in transforms' registry entries: names, one-line docs, typed parameters, factories.
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "stoke/nodes/center_crop.hpp"
#include "stoke/nodes/color_jitter.hpp"
#include "stoke/nodes/filter_boxes.hpp"
#include "stoke/nodes/normalize.hpp"
#include "stoke/nodes/random_horizontal_flip.hpp"
#include "stoke/nodes/random_resized_crop.hpp"
#include "stoke/nodes/registry.hpp"
#include "stoke/nodes/resize.hpp"

namespace stoke::nodes {

namespace {

Interpolation interpolation_param(const Params& params) {
  return parse_interpolation(params.get_string("interpolation", "bilinear"), params.transform());
}

ParamDoc interpolation_doc() {
  return {"interpolation", "string", "bilinear",
          "bilinear (area averaging when shrinking 2x or more), area (for every shrink) or nearest"};
}

std::vector<float> per_channel(const Params& params, const char* key, const std::vector<double>& fallback) {
  const std::vector<double> values = params.get_list(key, fallback);
  if (values.empty())
    throw std::invalid_argument(params.transform() + ": " + key + " needs one value per channel, or one for all");
  return {values.begin(), values.end()};
}

}  // namespace

void register_builtin_transforms(Registry& registry) {
  registry.add({"random_resized_crop",
                "crop a random area and aspect ratio (torchvision's get_params), resize it to size",
                {{"size", "size", "", "output size: N (NxN) or WxH", true},
                 {"scale", "range", "0.08:1", "crop area as a fraction of the image's, 0 < min <= max <= 1"},
                 {"ratio", "range", "0.75:1.3333333333333333", "crop aspect ratio (width / height), 0 < min <= max"},
                 interpolation_doc()},
                [](const Params& p) -> TransformPtr {
                  const auto scale = p.get_range("scale", {0.08, 1.0});
                  const auto ratio = p.get_range("ratio", {3.0 / 4.0, 4.0 / 3.0});
                  return std::make_shared<RandomResizedCrop>(
                      p.get_size("size", {}), RandomResizedCrop::Range{scale.first, scale.second},
                      RandomResizedCrop::Range{ratio.first, ratio.second}, interpolation_param(p));
                }});

  registry.add({"resize",
                "resize: shorter side to N keeping the aspect ratio (torchvision Resize(N)), or exactly WxH",
                {{"size", "size", "", "N (shorter side) or WxH (exact)", true}, interpolation_doc()},
                [](const Params& p) -> TransformPtr {
                  const Interpolation interpolation = interpolation_param(p);
                  if (p.get_string("size", "").find('x') != std::string::npos) {
                    return std::make_shared<Resize>(p.get_size("size", {}), interpolation);
                  }
                  return std::make_shared<Resize>(p.get_int("size", 0), interpolation);
                }});

  registry.add({"center_crop",
                "cut out the centred WxH rectangle, zero-padding images smaller than it (torchvision)",
                {{"size", "size", "", "output size: N (NxN) or WxH", true}},
                [](const Params& p) -> TransformPtr { return std::make_shared<CenterCrop>(p.get_size("size", {})); }});

  registry.add(
      {"random_horizontal_flip",
       "mirror left-right with probability p (uint8 or normalized images)",
       {{"p", "double", "0.5", "flip probability, 0..1"}},
       [](const Params& p) -> TransformPtr { return std::make_shared<RandomHorizontalFlip>(p.get_double("p", 0.5)); }});

  registry.add({"filter_boxes",
                "drop detection boxes the crops have cut down: less than min_visible of their area left, or a side "
                "under min_size pixels (after the geometric steps)",
                {{"min_visible", "double", "0", "the fraction of a box's area that must be left, 0..1"},
                 {"min_size", "double", "0", "the least width and height in pixels"}},
                [](const Params& p) -> TransformPtr {
                  return std::make_shared<FilterBoxes>(
                      BoxFilter{.min_visible = static_cast<float>(p.get_double("min_visible", 0)),
                                .min_size = static_cast<float>(p.get_double("min_size", 0))});
                }});

  registry.add({"color_jitter",
                "random brightness, contrast, saturation and hue in a random order (torchvision ColorJitter)",
                {{"brightness", "double", "0", "factor in [max(0, 1-b), 1+b]; 0 = off"},
                 {"contrast", "double", "0", "factor in [max(0, 1-c), 1+c]; 0 = off"},
                 {"saturation", "double", "0", "factor in [max(0, 1-s), 1+s]; 0 = off"},
                 {"hue", "double", "0", "hue shift in [-h, h] turns, 0 <= h <= 0.5; 0 = off"}},
                [](const Params& p) -> TransformPtr {
                  return std::make_shared<ColorJitter>(p.get_double("brightness", 0), p.get_double("contrast", 0),
                                                       p.get_double("saturation", 0), p.get_double("hue", 0));
                }});

  registry.add({"normalize",
                "HWC pixels (any type, any channels) -> float CHW, (v/range - mean) / std per channel; the last "
                "step (train, evaluate and classify run it on the compute device, after the copy)",
                {{"mean", "list", "0.485,0.456,0.406", "mean per channel (or one for all), after the division by range"},
                 {"std", "list", "0.229,0.224,0.225", "standard deviation per channel (or one for all), > 0"},
                 {"range", "double", "0",
                  "the pixel value that means 1.0; 0: the type's full scale (255, 65535, 32767, 1 for float); "
                  "1 keeps raw units such as Hounsfield"}},
                [](const Params& p) -> TransformPtr {
                  return std::make_shared<Normalize>(per_channel(p, "mean", {0.485, 0.456, 0.406}),
                                                     per_channel(p, "std", {0.229, 0.224, 0.225}),
                                                     static_cast<float>(p.get_double("range", 0)));
                }});
}

}  // namespace stoke::nodes
