// file_list_fuzz: a libFuzzer harness for file lists (file_list.hpp), both the legacy `path,label`
// lines and the column format (a header naming path, label, mask and target columns): the input
// is the list's text. FileList parses it; then every item's label and name are read, and the
// items whose files lie in the harness's folder are read too (two small files, a.jpg and m.png,
// are there; other names there are missing files). Paths elsewhere are not opened, so that a list
// naming /dev/zero cannot make the harness hang.
//
// Any outcome but a dataset or a std::runtime_error -- a crash, a sanitizer report, another
// exception, a hang -- is a bug; so is a label outside -1..999999 or classes(), or a target whose
// values do not fill its shape.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>

#include "fuzz_files.hpp"
#include "stoke/nodes/file_list.hpp"

namespace {

namespace fs = std::filesystem;

const fs::path& folder() {
  static const fs::path dir = [] {
    const fs::path d = fs::canonical(stoke::fuzz::scratch_dir());
    const std::uint8_t image[] = {0xff, 0xd8, 0xff, 0xd9};
    stoke::fuzz::write_file(d / "a.jpg", image);
    stoke::fuzz::write_file(d / "m.png", image);
    return d;
  }();
  return dir;
}

bool in_folder(const fs::path& path) {
  std::error_code error;
  const fs::path resolved = fs::weakly_canonical(path, error);
  return !error && resolved.parent_path() == folder();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path list = folder() / "list.csv";
  stoke::fuzz::write_file(list, {data, size});
  try {
    const stoke::nodes::FileList dataset(list);
    for (std::size_t i = 0; i < dataset.size(); ++i) {
      const int label = dataset.label(i);
      if (label < -1 || label > 999999 || (label >= 0 && static_cast<std::size_t>(label) >= dataset.classes().size())) {
        std::abort();
      }
      (void)dataset.name(i);
      const fs::path& mask = dataset.mask_path(i);
      if (!in_folder(dataset.path(i)) || (!mask.empty() && !in_folder(mask))) continue;
      try {
        const stoke::nodes::Sample sample = dataset.read(i);
        if (sample.targets.size() > dataset.target_columns().size()) std::abort();
        for (const auto& [name, target] : sample.targets) {
          if (target.elements() != static_cast<std::int64_t>(target.values.size())) std::abort();
        }
      } catch (const std::runtime_error&) {
      }
    }
  } catch (const std::runtime_error&) {
  }
  return 0;
}
