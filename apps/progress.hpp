// Progress on stderr shared by the `stoke` commands.
#pragma once

#include <filesystem>

namespace stoke::app {

/// train::builtin_dataset(), saying on stderr (unless `quiet`) that it is being written, the first
/// time, with a count of the images written.
std::filesystem::path builtin_dataset_with_progress(bool quiet);

}  // namespace stoke::app
