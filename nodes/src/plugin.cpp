#include "stoke/nodes/plugin.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <typeinfo>

namespace stoke::nodes {

namespace {

// A plugin's undefined references are resolved against the host executable, but a static library
// only contributes the objects the host itself references. This table, which the compiler must
// keep ([[gnu::used]]), makes any host that calls load_plugin link transform.cpp's object
// (Transform's vtable and typeinfo, operator(), plan) next to registry.cpp's (Registry, Params),
// whether or not the host uses them itself.
[[gnu::used]] const void* const plugin_symbol_anchors[] = {
    &typeid(Transform),
};

std::string describe(const std::filesystem::path& path) { return "plugin '" + path.string() + "'"; }

std::string dl_error() {
  const char* text = dlerror();
  return text ? text : "unknown error";
}

struct VersionNumber {
  int major = -1;
  int minor = -1;
};

VersionNumber major_minor(const char* version) {
  VersionNumber v;
  if (version && std::sscanf(version, "%d.%d", &v.major, &v.minor) == 2) return v;
  return {};
}

std::string stdlib_identity(const char* stdlib, long version, int abi) {
  std::string out = stdlib ? stdlib : "(null)";
  if (out == "libstdc++")
    return out + " " + std::to_string(version) + " with _GLIBCXX_USE_CXX11_ABI=" + std::to_string(abi);
  if (out == "libc++") return out + " " + std::to_string(version) + " with _LIBCPP_ABI_VERSION=" + std::to_string(abi);
  return out;
}

// Refuses a plugin whose descriptor does not match this build. Only `abi` is read before it has
// been found equal: the other fields' layout belongs to that ABI.
void check_descriptor(const std::filesystem::path& path, const PluginDescriptor& d) {
  const VersionNumber host = major_minor(STOKE_PLUGIN_STOKE_VERSION);
  const std::string rebuild = "; rebuild the plugin against stoke " + std::to_string(host.major) + "." +
                              std::to_string(host.minor) + " (its headers and the compiler it was built with)";
  if (d.abi != STOKE_PLUGIN_ABI) {
    throw std::runtime_error(describe(path) + " was built for stoke plugin ABI " + std::to_string(d.abi) +
                             ", but this stoke " STOKE_PLUGIN_STOKE_VERSION " has plugin ABI " +
                             std::to_string(STOKE_PLUGIN_ABI) + rebuild);
  }
  const std::string who = describe(path) + " (" + (d.name ? d.name : "?") + " " + (d.version ? d.version : "?") + ")";
  const VersionNumber built = major_minor(d.stoke_version);
  if (built.major != host.major || built.minor != host.minor) {
    throw std::runtime_error(who + " was built against stoke " + (d.stoke_version ? d.stoke_version : "(null)") +
                             ", but this is stoke " STOKE_PLUGIN_STOKE_VERSION " (major.minor must match)" + rebuild);
  }
  if (!d.stdlib || std::strcmp(d.stdlib, STOKE_PLUGIN_STDLIB) != 0 || d.stdlib_abi != STOKE_PLUGIN_STDLIB_ABI) {
    throw std::runtime_error(
        who + " was built with " + stdlib_identity(d.stdlib, d.stdlib_version, d.stdlib_abi) +
        ", but this stoke with " +
        stdlib_identity(STOKE_PLUGIN_STDLIB, STOKE_PLUGIN_STDLIB_VERSION, STOKE_PLUGIN_STDLIB_ABI) +
        "; C++ objects cannot cross between the two" + rebuild);
  }
  if (!d.name || !d.version || (!d.register_nodes && !d.register_formats)) {
    throw std::runtime_error(who +
                             ": its descriptor lacks a name, a version or a register function; define it with "
                             "STOKE_PLUGIN(name, version, register_function)");
  }
}

// Runs one of the plugin's register functions (when it has it) into a staging registry.
template <class Staging>
void register_into(const std::string& who, const char* what, void (*register_function)(Staging&), Staging& staging) {
  if (!register_function) return;
  try {
    register_function(staging);
  } catch (const std::exception& e) {
    throw std::runtime_error(who + ": registering its " + what + " failed: " + e.what());
  } catch (...) {
    throw std::runtime_error(who + ": registering its " + what + " failed with a non-standard exception");
  }
}

template <class Target>
void refuse_taken(const std::string& who, const char* what, const std::vector<std::string>& names,
                  const Target& target) {
  for (const auto& name : names) {
    if (target.find(name)) {
      throw std::runtime_error(who + " registers " + what + " '" + name +
                               "', which is already registered (is the plugin loaded twice, or does its name clash "
                               "with a built-in or another plugin's?); nothing of the plugin was registered");
    }
  }
}

// The libraries loaded into both built-in registries, by dlopen handle: loading one again (a second
// stoke.Loader with the same plugins) finds it here. Those registries live as long as the process,
// so the record cannot outlive what it describes, as it could for registries a caller owns.
class BuiltinLoads {
 public:
  static BuiltinLoads& instance() {
    static BuiltinLoads loads;
    return loads;
  }
  static bool applies(const Registry& registry, const DatasetRegistry& formats) {
    return &registry == &Registry::builtin() && &formats == &DatasetRegistry::builtin();
  }
  std::optional<Plugin> find(void* handle) const {
    const std::lock_guard lock(mutex_);
    const auto it = loaded_.find(handle);
    return it == loaded_.end() ? std::nullopt : std::optional<Plugin>(it->second);
  }
  void add(const Plugin& plugin) {
    const std::lock_guard lock(mutex_);
    loaded_.emplace(plugin.handle, plugin);
  }
  /// Held through a load into the built-in registries, so two threads loading one library do not
  /// both register it.
  std::mutex& serial() noexcept { return serial_; }

 private:
  mutable std::mutex mutex_;
  std::mutex serial_;
  std::map<void*, Plugin> loaded_;
};

}  // namespace

Plugin load_plugin(const std::filesystem::path& path, Registry& registry, DatasetRegistry& formats) {
  std::error_code ec;
  const std::filesystem::path file = std::filesystem::absolute(path, ec);
  if (ec || !std::filesystem::exists(file, ec)) {
    throw std::runtime_error(
        describe(path) + ": no such file" +
        (path.is_relative() ? " (relative to the current directory " + std::filesystem::current_path(ec).string() + ")"
                            : std::string()) +
        "; pass the path of the plugin's .so file");
  }
  if (std::filesystem::is_directory(file, ec)) {
    throw std::runtime_error(describe(path) + " is a directory; pass the path of the plugin's .so file");
  }

  dlerror();
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const std::string error = dl_error();
    std::string hint = "; is it a shared library built for this platform?";
    if (error.find("undefined symbol") != std::string::npos) {
      hint = "; either the plugin was built against another stoke (rebuild it against stoke " STOKE_PLUGIN_STOKE_VERSION
             ") or the program loading it does not export its symbols (CMake ENABLE_EXPORTS ON, -rdynamic)";
    }
    throw std::runtime_error(describe(path) + ": cannot load it: " + error + hint);
  }

  const bool builtin = BuiltinLoads::applies(registry, formats);
  std::unique_lock<std::mutex> serial;
  if (builtin) {
    serial = std::unique_lock(BuiltinLoads::instance().serial());
    if (std::optional<Plugin> loaded = BuiltinLoads::instance().find(handle)) {
      dlclose(handle);  // the reference this call took; the library stays loaded
      return *loaded;
    }
  }

  // Up to register_nodes no code or object of the library is in use, so a refused plugin is closed.
  using EntryPoint = const PluginDescriptor* (*)();
  dlerror();
  void* symbol = dlsym(handle, kPluginEntryPoint);
  if (!symbol) {
    const std::string error = dl_error();
    dlclose(handle);
    throw std::runtime_error(describe(path) + " has no entry point " + kPluginEntryPoint + " (" + error +
                             "); is it a stoke plugin? A plugin defines it with STOKE_PLUGIN(name, version, "
                             "register_function) from <stoke/nodes/plugin.hpp>");
  }
  const PluginDescriptor* descriptor = reinterpret_cast<EntryPoint>(symbol)();
  try {
    if (!descriptor) throw std::runtime_error(describe(path) + ": its entry point returned no descriptor");
    check_descriptor(path, *descriptor);
  } catch (...) {
    dlclose(handle);
    throw;
  }

  const std::string who = describe(path) + " (" + descriptor->name + " " + descriptor->version + ")";
  // From here on the library is never closed (see plugin.hpp): its factories or transforms, or an
  // exception object it threw, may be alive.
  Registry staging;
  DatasetRegistry staging_formats;
  register_into(who, "transforms", descriptor->register_nodes, staging);
  register_into(who, "data formats", descriptor->register_formats, staging_formats);

  Plugin plugin{
      file,  descriptor->name, descriptor->version, descriptor->stoke_version, staging.names(), staging_formats.names(),
      handle};
  refuse_taken(who, "transform", plugin.transforms, registry);
  refuse_taken(who, "data format", plugin.formats, formats);
  for (const auto& name : plugin.transforms) registry.add(*staging.find(name));
  for (const auto& name : plugin.formats) formats.add(*staging_formats.find(name));
  if (builtin) BuiltinLoads::instance().add(plugin);
  return plugin;
}

}  // namespace stoke::nodes
