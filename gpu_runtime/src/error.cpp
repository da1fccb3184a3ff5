#include "stoke/gpu/error.hpp"

#include <cstdio>
#include <string_view>
#include <utility>

#include "internal.hpp"

namespace stoke::gpu {
namespace {

// A file inside stoke's source tree is named by its path there ("gpu_runtime/src/cuda/memory.cpp"); any
// other (a user's) is left as the compiler spelled it.
std::string_view short_file(std::string_view file) {
#ifdef STOKE_SOURCE_DIR
  constexpr std::string_view source_dir = STOKE_SOURCE_DIR;
  if (!source_dir.empty() && file.starts_with(source_dir)) {
    file.remove_prefix(source_dir.size());
    while (file.starts_with('/')) file.remove_prefix(1);
  }
#endif
  return file;
}

std::string call_message(const std::string& code_name, const std::string& text, const std::string& call,
                         const std::string& file, int line, const std::string& context) {
  std::string message;
  if (!context.empty()) message = context + "; ";
  message += std::string(short_file(file)) + ":" + std::to_string(line) + ": " + call + " failed: " + code_name;
  if (!text.empty()) message += " (" + text + ")";
  return message;
}

}  // namespace

GpuCallError::GpuCallError(std::string library, int code, std::string code_name, std::string text, std::string call,
                           std::string file, int line, std::string context)
    : GpuError(call_message(code_name, text, call, file, line, context)),
      library_(std::move(library)),
      code_(code),
      code_name_(std::move(code_name)),
      text_(std::move(text)),
      call_(std::move(call)),
      file_(std::move(file)),
      line_(line) {}

void detail::report_failure(const char* code_name, const char* text, const char* call, const char* file,
                            int line) noexcept {
  try {
    const std::string message = call_message(code_name, text, call, file, line, {});
    std::fprintf(stderr, "stoke: warning: %s; ignored during cleanup\n", message.c_str());
  } catch (...) {  // no memory for the message: say what failed without it
    std::fprintf(stderr, "stoke: warning: %s failed (%s); ignored during cleanup\n", call, code_name);
  }
}

}  // namespace stoke::gpu
