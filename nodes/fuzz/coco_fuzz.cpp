// coco_fuzz: a libFuzzer harness for COCO annotation files (coco_dataset.hpp): the input is the
// JSON text. CocoDataset parses it twice, with the default options (skip bad annotations, keep
// crowd boxes and images without boxes) and with the opposite ones (fail, drop both); every
// item's name is then read, and its image -- which is missing, so read() throws naming it. (A
// file_name that leaves the images folder, "/dev/zero" say, is not read.)
//
// Any outcome but a dataset or a std::runtime_error -- a crash, a sanitizer report, another
// exception (nlohmann::json's own, say), a hang -- is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "fuzz_files.hpp"
#include "stoke/nodes/coco_dataset.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  using stoke::nodes::CocoOptions;
  static const fs::path annotations = stoke::fuzz::scratch_dir() / "instances.json";
  static const fs::path images = stoke::fuzz::scratch_dir() / "missing-images";
  stoke::fuzz::write_file(annotations, {data, size});
  for (const CocoOptions options : {CocoOptions{}, CocoOptions{CocoOptions::OnBad::fail, false, false}}) {
    try {
      const stoke::nodes::CocoDataset dataset(annotations, images, options);
      if (dataset.category_ids().size() != dataset.classes().size()) std::abort();
      for (std::size_t i = 0; i < dataset.size(); ++i) {
        const std::string name = dataset.name(i);
        if (!name.starts_with(images.string() + "/") || name.find("..") != std::string::npos) continue;
        try {
          (void)dataset.read(i);
          std::abort();  // the images folder does not exist
        } catch (const std::runtime_error&) {
        }
      }
    } catch (const std::runtime_error&) {
    }
  }
  return 0;
}
