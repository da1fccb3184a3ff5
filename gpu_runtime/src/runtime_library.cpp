#include "stoke/gpu/runtime_library.hpp"

#include <dlfcn.h>

namespace stoke::gpu {

namespace {

std::string dl_error() {
  const char* text = dlerror();
  return text ? text : "unknown error";
}

}  // namespace

bool RuntimeLibrary::open(const RuntimeLibrarySpec& spec, const std::string& name, bool from_variable) {
  name_ = name;
  dlerror();
  handle_ = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ != nullptr) return true;  // and stays loaded for the rest of the process
  const std::string error = dl_error();
  const bool missing = error.find("No such file") != std::string::npos;
  error_ = name + (missing ? " not found (" : " could not be loaded (") + error + ")";
  if (from_variable) {
    error_ += ", named by " + std::string(spec.variable) + "; " + spec.named_hint;
  } else {
    error_ += std::string("; ") + spec.default_hint;
  }
  return false;
}

void* RuntimeLibrary::find(const char* symbol, std::string& missing) const {
  dlerror();
  void* address = dlsym(handle_, symbol);
  if (address == nullptr) missing = std::string(symbol) + " is missing (" + dl_error() + ")";
  return address;
}

void RuntimeLibrary::refuse(const RuntimeLibrarySpec& spec, const std::string& missing) {
  error_ = name_ + " is not a usable " + spec.what + ": " + missing + "; " + spec.unusable_hint;
  dlclose(handle_);
  handle_ = nullptr;
}

}  // namespace stoke::gpu
