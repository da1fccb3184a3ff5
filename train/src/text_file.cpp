#include "text_file.hpp"

#include <cerrno>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>

namespace stoke::train::detail {

namespace fs = std::filesystem;

void write_text_atomically(const fs::path& path, std::string_view text, std::string_view what) {
  fs::path temporary = path;
  temporary += ".tmp";
  const auto fail = [&](const std::string& why) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw std::runtime_error("cannot write the " + std::string(what) + " " + path.string() + ": " + why);
  };
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) fail(std::generic_category().message(errno) + " (check that its folder exists and is writable)");
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!out.flush()) fail("write failed (disk full?)");
  }
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) fail(error.message());
}

}  // namespace stoke::train::detail
