// libarchive's handles, owned, and its errors as text (private to stoke::nodes: TarShards reads
// shards with it, TarShardWriter writes them).
#pragma once

#include <archive.h>

#include <memory>
#include <string>

namespace stoke::nodes::detail {

struct ArchiveReadFree {
  void operator()(archive* a) const noexcept { archive_read_free(a); }
};
struct ArchiveWriteFree {
  void operator()(archive* a) const noexcept { archive_write_free(a); }
};
using ArchiveReader = std::unique_ptr<archive, ArchiveReadFree>;
using ArchiveWriter = std::unique_ptr<archive, ArchiveWriteFree>;

/// libarchive's message for the last failure on `a`.
inline std::string archive_error(archive* a) {
  const char* text = archive_error_string(a);
  return text != nullptr ? text : "unknown error";
}

}  // namespace stoke::nodes::detail
