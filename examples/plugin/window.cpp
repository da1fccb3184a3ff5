// An example stoke plugin: "window", the intensity windowing of medical imaging (CT, X-ray).
// A window of `width` values centred on `center`, in the pixels' own units (Hounsfield units for
// CT decoded with stoke::dicom, grey levels for 8-bit images), is stretched to 0..255 (or to 0..1
// float32); values below it become the bottom, values above it the top. It shows a plugin's whole
// shape: a Transform subclass, a factory reading typed parameters, and the STOKE_PLUGIN entry point.
//
//   stoke bench pipeline --plugin ./libstoke_example_plugin.so --transform "window center=128 width=64"
//   window preset=lung              CT: center -600 HU, width 1500 HU (preset=soft_tissue: 40/400)
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

#include "stoke/nodes/plugin.hpp"

namespace {

namespace sn = stoke::nodes;

// The usual CT windows (center, width) in Hounsfield units.
struct Preset {
  std::string_view name;
  double center;
  double width;
};
constexpr std::array<Preset, 4> presets{{{"lung", -600, 1500},
                                         {"soft_tissue", 40, 400},
                                         {"bone", 400, 1800},
                                         {"brain", 40, 80}}};

class Window final : public sn::Transform {
 public:
  /// `width` > 0, in the pixels' units; `luma`: window the luma (Rec. 601) of 8-bit RGB and write
  /// it to all three channels, else window each channel on its own; `invert`: dark for high
  /// values (MONOCHROME1); `as_float`: 0..1 float32 out instead of 0..255 uint8.
  Window(double center, double width, bool luma, bool invert, bool as_float)
      : center_(center), width_(width), luma_(luma), invert_(invert), as_float_(as_float) {
    if (!(width > 0)) throw std::invalid_argument("window: width must be > 0, got " + std::to_string(width));
    const double lo = center - width / 2;
    for (int v = 0; v < 256; ++v) {
      const double t = std::clamp((v - lo) / width, 0.0, 1.0);
      lut_.at<uchar>(v) = cv::saturate_cast<uchar>(255.0 * (invert ? 1.0 - t : t));
    }
  }

  std::string_view name() const noexcept override { return "window"; }
  std::string describe() const override {
    return "window center=" + cv::format("%g", center_) + " width=" + cv::format("%g", width_) +
           " mode=" + (luma_ ? "luma" : "channels") + " invert=" + (invert_ ? "true" : "false") +
           (as_float_ ? " output=float" : "");
  }

 protected:
  void apply_impl(sn::Image& image, sn::ItemRng& /*rng*/) const override {
    if (luma_ && image.pixels.type() != CV_8UC3) {
      // (OpenCV's names, not stoke's describe_pixels: a plugin calls only what the host surely exports.)
      throw std::invalid_argument("window: mode=luma takes 8-bit RGB, but " +
                                  (image.name.empty() ? "item " + std::to_string(image.index) : image.name) + " is " +
                                  cv::typeToString(image.pixels.type()) + "; use mode=channels");
    }
    if (image.pixels.depth() != CV_8U || as_float_) {
      // Any depth (int16 Hounsfield units, uint16, float): (v - lo) / width, clamped to 0..1.
      const double lo = center_ - width_ / 2;
      cv::Mat unit;
      image.pixels.convertTo(unit, CV_32F, 1.0 / width_, -lo / width_);
      unit = cv::min(cv::max(unit, 0.0), 1.0);
      if (invert_) cv::subtract(1.0, unit, unit);
      if (as_float_) {
        image.pixels = unit;
      } else {
        unit.convertTo(image.pixels, CV_8U, 255.0);
      }
      return;
    }
    cv::Mat out;
    if (luma_) {
      cv::Mat gray;
      cv::cvtColor(image.pixels, gray, cv::COLOR_RGB2GRAY);
      cv::LUT(gray, lut_, gray);
      cv::cvtColor(gray, out, cv::COLOR_GRAY2RGB);
    } else {
      cv::LUT(image.pixels, lut_, out);
    }
    image.pixels = std::move(out);
  }

 private:
  double center_;
  double width_;
  bool luma_;
  bool invert_;
  bool as_float_;
  cv::Mat lut_ = cv::Mat(1, 256, CV_8U);
};

void register_nodes(sn::Registry& registry) {
  registry.add({
      .name = "window",
      .doc = "intensity windowing (CT/X-ray): maps [center - width/2, center + width/2] of the pixels' units "
             "(Hounsfield units for CT) to 0..255, clamping outside",
      .params =
          {
              {"center", "double", "128", "centre of the window, in the pixels' units (grey levels, HU)"},
              {"width", "double", "256", "width of the window, in the pixels' units (> 0)"},
              {"preset", "string", "none",
               "a CT window in HU: lung (-600/1500), soft_tissue (40/400), bone (400/1800), brain (40/80); "
               "center= and width= given too win"},
              {"mode", "string", "channels",
               "channels: window each channel separately; luma: window the luma of 8-bit RGB, output grey"},
              {"invert", "bool", "false", "map high values to dark (MONOCHROME1 display)"},
              {"output", "string", "u8", "u8: 0..255 uint8; float: 0..1 float32"},
          },
      .make =
          [](const sn::Params& p) {
            const std::string mode = p.get_string("mode", "channels");
            if (mode != "channels" && mode != "luma") {
              throw std::invalid_argument("window: mode='" + mode + "' is not one of channels, luma");
            }
            const std::string output = p.get_string("output", "u8");
            if (output != "u8" && output != "float") {
              throw std::invalid_argument("window: output='" + output + "' is not one of u8, float");
            }
            double center = 128;
            double width = 256;
            const std::string preset = p.get_string("preset", "none");
            if (preset != "none") {
              const auto* found = std::find_if(presets.begin(), presets.end(),
                                               [&](const Preset& candidate) { return candidate.name == preset; });
              if (found == presets.end()) {
                throw std::invalid_argument("window: preset='" + preset +
                                            "' is not one of none, lung, soft_tissue, bone, brain");
              }
              center = found->center;
              width = found->width;
            }
            return std::make_shared<const Window>(p.get_double("center", center), p.get_double("width", width),
                                                  mode == "luma", p.get_bool("invert", false), output == "float");
          },
  });
}

}  // namespace

STOKE_PLUGIN("stoke_example_plugin", "1.0.0", register_nodes)
