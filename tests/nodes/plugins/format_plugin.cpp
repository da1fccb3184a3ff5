// A test-only plugin that adds a data format, "stripes": a text file (X.stripes) with one class
// label per line, each line an item, read as a side x side raw RGB image whose red channel is
// 40 x label and whose green channel is the line number. It shows that a source added by a plugin
// opens by name (--format "stripes side=16", format="stripes") and is recognised by "auto" (the
// .stripes extension) from the CLI and Python, without touching train/ or apps/.
#include <algorithm>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "stoke/nodes/plugin.hpp"

namespace {

namespace sn = stoke::nodes;

class Stripes final : public sn::Dataset {
 public:
  Stripes(const std::filesystem::path& file, int side) : file_(file.string()), side_(side) {
    std::ifstream in(file);
    if (!in) throw std::runtime_error(file_ + ": cannot open the stripes file");
    int top = -1;
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      const int label = std::stoi(line);
      if (label < 0 || label > 5) {
        ignored_.push_back({file_ + ":" + std::to_string(labels_.size() + ignored_.size() + 1), "label out of 0..5"});
        continue;
      }
      labels_.push_back(label);
      top = std::max(top, label);
    }
    for (int c = 0; c <= top; ++c) classes_.push_back("stripe" + std::to_string(c));
  }

  std::size_t size() const noexcept override { return labels_.size(); }
  int label(std::size_t i) const override { return labels_.at(i); }
  std::string name(std::size_t i) const override { return file_ + "#" + std::to_string(i); }
  sn::Sample read(std::size_t i) const override {
    std::vector<std::byte> pixels(static_cast<std::size_t>(side_ * side_ * 3));
    for (std::size_t p = 0; p < pixels.size(); p += 3) {
      pixels[p] = static_cast<std::byte>(40 * labels_.at(i));
      pixels[p + 1] = static_cast<std::byte>(i % 256);
    }
    sn::Sample sample;
    sample.bytes = sn::Bytes(std::move(pixels));
    sample.encoding = sn::Encoding::raw_rgb;
    sample.width = side_;
    sample.height = side_;
    sample.label = labels_.at(i);
    sample.index = i;
    sample.name = name(i);
    return sample;
  }
  const std::vector<std::string>& classes() const noexcept override { return classes_; }
  const std::vector<sn::IgnoredFile>& ignored() const noexcept override { return ignored_; }

 private:
  std::string file_;
  int side_;
  std::vector<int> labels_;
  std::vector<std::string> classes_;
  std::vector<sn::IgnoredFile> ignored_;
};

void register_formats(sn::DatasetRegistry& formats) {
  formats.add({.name = "stripes",
               .doc = "test plugin: a .stripes file of class labels, one raw RGB image per line",
               .params = {{"side", "int", "8", "the images' side in pixels"}},
               .open = [](const std::filesystem::path& path, const sn::Params& p) -> sn::DatasetPtr {
                 const int side = p.get_int("side", 8);
                 if (side < 1 || side > 1024) throw std::invalid_argument("stripes: side must be in 1..1024");
                 return std::make_shared<Stripes>(path, side);
               },
               .takes = sn::DataPath::file,
               .recognise =
                   [](const std::filesystem::path& path, std::filesystem::file_status status) {
                     return std::filesystem::is_regular_file(status) && path.extension() == ".stripes";
                   }});
}

}  // namespace

STOKE_PLUGIN_WITH_FORMATS("stoke_test_format_plugin", "0.1.0", nullptr, register_formats)
