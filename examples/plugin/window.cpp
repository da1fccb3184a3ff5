// An example stoke plugin: "window", the intensity windowing of medical imaging (CT, X-ray).
// A window of `width` grey levels centred on `center` is stretched to the full 0..255 range;
// values below it become 0, values above it 255. It shows a plugin's whole shape: a Transform
// subclass, a factory reading typed parameters, and the STOKE_PLUGIN entry point.
//
//   stoke bench pipeline --plugin ./libstoke_example_plugin.so --transform "window center=128 width=64"
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <stdexcept>
#include <string>

#include "stoke/nodes/plugin.hpp"

namespace {

namespace sn = stoke::nodes;

class Window final : public sn::Transform {
 public:
  /// `width` > 0, in grey levels; `luma`: window the luma (Rec. 601) and write it to all three
  /// channels, else window each channel on its own; `invert`: dark for high values (MONOCHROME1).
  Window(double center, double width, bool luma, bool invert)
      : center_(center), width_(width), luma_(luma), invert_(invert) {
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
           " mode=" + (luma_ ? "luma" : "channels") + " invert=" + (invert_ ? "true" : "false");
  }

 protected:
  void apply_impl(sn::Image& image, sn::ItemRng& /*rng*/) const override {
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
  cv::Mat lut_ = cv::Mat(1, 256, CV_8U);
};

void register_nodes(sn::Registry& registry) {
  registry.add({
      .name = "window",
      .doc = "intensity windowing (CT/X-ray): maps [center - width/2, center + width/2] to 0..255, clamping outside",
      .params =
          {
              {"center", "double", "128", "centre of the window, in grey levels (0..255)"},
              {"width", "double", "256", "width of the window, in grey levels (> 0)"},
              {"mode", "string", "channels",
               "channels: window R, G and B separately; luma: window the luma, output grey"},
              {"invert", "bool", "false", "map high values to dark (MONOCHROME1 display)"},
          },
      .make =
          [](const sn::Params& p) {
            const std::string mode = p.get_string("mode", "channels");
            if (mode != "channels" && mode != "luma") {
              throw std::invalid_argument("window: mode='" + mode + "' is not one of channels, luma");
            }
            return std::make_shared<const Window>(p.get_double("center", 128), p.get_double("width", 256),
                                                  mode == "luma", p.get_bool("invert", false));
          },
  });
}

}  // namespace

STOKE_PLUGIN("stoke_example_plugin", "1.0.0", register_nodes)
