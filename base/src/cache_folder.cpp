#include "stoke/base/cache_folder.hpp"

#include <cstdlib>

namespace stoke::base {
namespace {

const char* nonempty_env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

}  // namespace

std::filesystem::path cache_folder() {
  if (const char* dir = nonempty_env("STOKE_CACHE")) return dir;
  if (const char* dir = nonempty_env("XDG_CACHE_HOME")) return std::filesystem::path(dir) / "stoke";
  if (const char* home = nonempty_env("HOME")) return std::filesystem::path(home) / ".cache" / "stoke";
  return {};
}

}  // namespace stoke::base
