// Libraries stoke opens at run time with dlopen instead of linking them (NVML, NCCL): named by an
// environment variable or a default name, their functions resolved by name, and a message saying
// why one is unusable. Each library type lists its own functions:
//
//   struct Nvml : stoke::gpu::RuntimeLibrary {
//     int (*init)() = nullptr;
//     bool resolve_all(std::string& missing) { return resolve("nvmlInit_v2", init, missing); }
//   };
//   const Nvml& nvml = stoke::gpu::load_runtime_library<Nvml>(spec);
//   if (!nvml.error().empty()) ...  // says why, naming the file and what to do
//
// A library is loaded once per process and name, and stays loaded. Thread-safe.
#pragma once

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace stoke::gpu {

// Where a run-time library is found, and what its messages add when it is unusable (all literals).
struct RuntimeLibrarySpec {
  const char* variable;       // the environment variable naming the file, e.g. "STOKE_NVML_LIBRARY"
  const char* default_name;   // when the variable is unset or empty, found on the library path
  const char* what;           // the library's name in messages, e.g. "NVML"
  const char* named_hint;     // follows "NAME not found (...), named by VARIABLE; "
  const char* default_hint;   // follows "DEFAULT_NAME not found (...); "
  const char* unusable_hint;  // follows "NAME is not a usable WHAT: SYMBOL is missing (...); "
};

// One library opened at run time, or why it could not be used. A library type derives from it,
// adds its function pointers and `bool resolve_all(std::string& missing)`, which fills them with
// resolve(), and is loaded with load_runtime_library().
class RuntimeLibrary {
 public:
  // The file opened: the variable's value or the default name.
  const std::string& name() const { return name_; }
  // Why the library is unusable, naming the file and what to do; empty when every function was found.
  const std::string& error() const { return error_; }

  // The steps load_runtime_library() takes.
  // Opens `name` (false, with error() saying why, when it cannot be); `from_variable`: the spec's
  // variable named it.
  bool open(const RuntimeLibrarySpec& spec, const std::string& name, bool from_variable);
  // Sets `function` to the library's `symbol`; false, with `missing` saying so, when there is none.
  template <class Function>
  bool resolve(const char* symbol, Function& function, std::string& missing) const {
    void* address = find(symbol, missing);
    if (address != nullptr) function = reinterpret_cast<Function>(address);
    return address != nullptr;
  }
  // Closes the library, which lacks what `missing` names; error() says so.
  void refuse(const RuntimeLibrarySpec& spec, const std::string& missing);

 private:
  void* find(const char* symbol, std::string& missing) const;

  std::string name_;
  std::string error_;
  void* handle_ = nullptr;
};

// The library `spec` names now: opened and resolved on first use, then shared, one per name.
template <class Library>
const Library& load_runtime_library(const RuntimeLibrarySpec& spec) {
  const char* variable = std::getenv(spec.variable);
  const bool from_variable = variable != nullptr && variable[0] != '\0';
  const std::string name = from_variable ? variable : spec.default_name;

  static std::mutex mutex;
  // Never destroyed, so that an object destroyed during static destruction still finds its library.
  static auto* libraries = new std::map<std::string, Library>();
  const std::lock_guard lock(mutex);
  auto [found, added] = libraries->try_emplace(name);
  Library& library = found->second;
  std::string missing;
  if (added && library.open(spec, name, from_variable) && !library.resolve_all(missing)) library.refuse(spec, missing);
  return library;
}

}  // namespace stoke::gpu
