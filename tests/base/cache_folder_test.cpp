// base::cache_folder: the one rule for where stoke keeps what it can rebuild.
#include "stoke/base/cache_folder.hpp"

#include <gtest/gtest.h>

#include <filesystem>

#include "scoped_environment.hpp"

namespace stoke::base {
namespace {

namespace fs = std::filesystem;
using stoke::test::ScopedEnvironment;

TEST(CacheFolder, StokeCacheThenXdgThenHomeThenNone) {
  const fs::path root = "/somewhere";
  {
    const ScopedEnvironment stoke("STOKE_CACHE", (root / "stoke").string());
    const ScopedEnvironment xdg("XDG_CACHE_HOME", (root / "xdg").string());
    const ScopedEnvironment home("HOME", (root / "home").string());
    EXPECT_EQ(cache_folder(), root / "stoke");
  }
  {
    const ScopedEnvironment stoke("STOKE_CACHE", "");  // empty counts as unset
    const ScopedEnvironment xdg("XDG_CACHE_HOME", (root / "xdg").string());
    const ScopedEnvironment home("HOME", (root / "home").string());
    EXPECT_EQ(cache_folder(), root / "xdg" / "stoke");
  }
  {
    const ScopedEnvironment stoke("STOKE_CACHE", "");
    const ScopedEnvironment xdg("XDG_CACHE_HOME", "");
    const ScopedEnvironment home("HOME", (root / "home").string());
    EXPECT_EQ(cache_folder(), root / "home" / ".cache" / "stoke");
  }
  {
    const ScopedEnvironment stoke("STOKE_CACHE", "");
    const ScopedEnvironment xdg("XDG_CACHE_HOME", "");
    const ScopedEnvironment home("HOME", "");
    EXPECT_EQ(cache_folder(), fs::path());
  }
}

}  // namespace
}  // namespace stoke::base
