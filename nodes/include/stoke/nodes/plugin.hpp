// Plugins: shared libraries that add transforms to a Registry and data formats to a
// DatasetRegistry at run time, so that a domain team's preprocessing node (medical windowing, a
// sensor's debayer, ...) or its own storage format runs inside the prebuilt apps
// (`stoke bench pipeline --plugin libmy_plugin.so --transform "my_node k=v" --format "my_format"`)
// and under stoke.Loader(plugins=[...]) without rebuilding them.
//
// Writing one (see examples/plugin/):
//
//   #include <stoke/nodes/plugin.hpp>
//   namespace {
//   class MyNode final : public stoke::nodes::Transform { ... };
//   void register_nodes(stoke::nodes::Registry& registry) {
//     registry.add({"my_node", "one-line doc", {{"k", "double", "1", "what k does"}},
//                   [](const stoke::nodes::Params& p) { return std::make_shared<MyNode>(p.get_double("k", 1)); }});
//   }
//   }  // namespace
//   STOKE_PLUGIN("my_plugin", "1.0", register_nodes)
//
// A plugin with data formats (a Dataset subclass and a DatasetEntry, dataset_registry.hpp) names
// a second function, `void register_formats(stoke::nodes::DatasetRegistry&)`:
//
//   STOKE_PLUGIN_WITH_FORMATS("my_plugin", "1.0", register_nodes, register_formats)
//
// and build it as a MODULE library that links OpenCV but no stoke library (CMake:
// add_library(my_plugin MODULE ...), include directories from stoke::nodes).
//
// How symbols are shared, and why. C++ objects cross the boundary both ways: the plugin derives
// from Transform, fills a TransformEntry and calls Registry::add; the host calls the plugin's
// virtual functions and destroys its objects. The plugin therefore does not carry its own copy of
// stoke: its references to stoke's out-of-line symbols (Transform's vtable and typeinfo,
// Registry::add, the Params getters, ...) stay undefined and dlopen resolves them against the
// host executable, which must export its symbols (CMake ENABLE_EXPORTS ON, i.e. -rdynamic). A
// plugin that linked stoke_nodes statically would get a second Transform typeinfo and a second
// Registry::builtin(), the classic duplicate-singleton bug. load_plugin (plugin.cpp) makes sure
// the symbols a plugin may need are linked into any host that calls it, even when the host itself
// uses no more than the registry. A C-only, header-only interface would avoid the exported-symbol
// requirement but not the real constraint, which is that both sides must agree on the layout of
// std::string, std::function, std::shared_ptr and cv::Mat; that agreement is what the descriptor
// checks below (stoke's ABI number and version, the C++ standard library and its ABI flavour).
//
// Why a loaded plugin is never unloaded: the registry keeps the plugin's factories
// (std::function objects whose code lives in the library), and every transform the plugin made
// has its vtable there; those may live in any pipeline, registry or copy of an Augment until the
// process exits. dlclose while one of them is alive would leave dangling code pointers, so the
// library stays mapped until exit, like a plugin in most long-running hosts.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "stoke/nodes/dataset_registry.hpp"
#include "stoke/nodes/registry.hpp"

/// The version of the C++ interface a plugin sees (Transform, Image, Params, TransformEntry,
/// Registry::add, Dataset, Sample, DatasetEntry, DatasetRegistry::add and the descriptor below).
/// Bumped whenever any of them changes in a way that breaks compiled plugins; a plugin built with
/// another number is refused. 2: data formats (register_formats).
#define STOKE_PLUGIN_ABI 2

/// The stoke release this header belongs to; a plugin records the one it was built against, and
/// load_plugin requires the same major.minor (stoke is below 1.0, so any minor release may change
/// the interface). Must equal project(VERSION) in the top-level CMakeLists.txt (a test checks it).
#define STOKE_PLUGIN_STOKE_VERSION "0.1.0"

// The C++ standard library the translation unit is compiled with, and the flavour of its ABI that
// decides the layout of std::string and friends.
#if defined(_LIBCPP_VERSION)
#define STOKE_PLUGIN_STDLIB "libc++"
#define STOKE_PLUGIN_STDLIB_VERSION static_cast<long>(_LIBCPP_VERSION)
#define STOKE_PLUGIN_STDLIB_ABI static_cast<int>(_LIBCPP_ABI_VERSION)
#elif defined(__GLIBCXX__)
#define STOKE_PLUGIN_STDLIB "libstdc++"
#define STOKE_PLUGIN_STDLIB_VERSION static_cast<long>(__GLIBCXX__)
#define STOKE_PLUGIN_STDLIB_ABI static_cast<int>(_GLIBCXX_USE_CXX11_ABI)
#else
#define STOKE_PLUGIN_STDLIB "unknown"
#define STOKE_PLUGIN_STDLIB_VERSION 0L
#define STOKE_PLUGIN_STDLIB_ABI 0
#endif

#if defined(_WIN32)
#define STOKE_PLUGIN_EXPORT __declspec(dllexport)
#else
#define STOKE_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

namespace stoke::nodes {

/// What a plugin's entry point returns. Plain C types only, and `abi` first: whatever else changes,
/// the host can always read `abi` and refuse a plugin it does not understand. Written by the
/// STOKE_PLUGIN macro; static storage in the plugin, never freed.
struct PluginDescriptor {
  int abi;                    ///< STOKE_PLUGIN_ABI at the plugin's build
  const char* stoke_version;  ///< STOKE_PLUGIN_STOKE_VERSION at the plugin's build, "major.minor.patch"
  const char* stdlib;         ///< "libstdc++", "libc++" or "unknown"
  long stdlib_version;        ///< __GLIBCXX__ (a date) or _LIBCPP_VERSION; informative only
  int stdlib_abi;             ///< _GLIBCXX_USE_CXX11_ABI or _LIBCPP_ABI_VERSION; must match the host's
  const char* name;           ///< the plugin's name, e.g. "stoke_example_plugin"
  const char* version;        ///< the plugin's own version, free-form
  void (*register_nodes)(Registry& registry);  ///< adds the plugin's transforms; may throw; may be null
  /// adds the plugin's data formats; may throw; null when it has none (one of the two is set)
  void (*register_formats)(DatasetRegistry& registry);
};

/// The name of the entry point, an extern "C" function `const PluginDescriptor* stoke_plugin_v1()`.
/// The "v1" is the version of this lookup protocol (a function returning a descriptor whose first
/// field is `abi`), which is meant never to change; the interface itself is versioned by `abi`.
inline constexpr const char* kPluginEntryPoint = "stoke_plugin_v1";

/// A loaded plugin. The library stays loaded for the rest of the process (see the top of this
/// file), so a Plugin is plain information and may be copied or dropped freely.
struct Plugin {
  std::filesystem::path path;           ///< absolute path of the library
  std::string name;                     ///< from the descriptor
  std::string version;                  ///< from the descriptor
  std::string stoke_version;            ///< the stoke version it was built against
  std::vector<std::string> transforms;  ///< the names it registered, sorted
  std::vector<std::string> formats;     ///< the data formats it registered, sorted
  void* handle = nullptr;               ///< dlopen's handle (never closed)
};

/// Loads the shared library at `path` (a relative path is taken from the current directory, never
/// searched for on the library path), checks its descriptor against this build of stoke and adds
/// its transforms to `registry` and its data formats to `formats`. Registration is all-or-nothing:
/// register_nodes and register_formats fill staging registries, whose entries are added only when
/// both returned and none of their names is taken, so a failing plugin leaves both unchanged.
/// Loading a library again into the built-in registries (Registry::builtin() and
/// DatasetRegistry::builtin(): a second stoke.Loader with the same plugins) returns the Plugin of
/// its first load and registers nothing; into other registries it is refused as a taken name.
///
/// Throws std::runtime_error naming the file when it does not exist, is not a loadable shared
/// library (dlerror's text included), has no stoke_plugin_v1 entry point, was built against
/// another STOKE_PLUGIN_ABI, stoke major.minor or C++ standard library ABI (both sides' values
/// and "rebuild the plugin against stoke X.Y"), or when register_nodes throws or registers a
/// name `registry` already has. Thread-safe to the extent Registry::add is; meant for startup.
///
/// The calling executable must export its symbols (CMake: ENABLE_EXPORTS ON).
Plugin load_plugin(const std::filesystem::path& path, Registry& registry,
                   DatasetRegistry& formats = DatasetRegistry::builtin());

}  // namespace stoke::nodes

/// Defines the plugin's entry point. `plugin_name` and `plugin_version` are string literals,
/// `register_function` a function `void(stoke::nodes::Registry&)`. Use once per library, at
/// namespace scope.
#define STOKE_PLUGIN(plugin_name, plugin_version, register_function) \
  STOKE_PLUGIN_WITH_FORMATS(plugin_name, plugin_version, register_function, nullptr)

/// STOKE_PLUGIN for a plugin that adds data formats too: `register_formats` is a function
/// `void(stoke::nodes::DatasetRegistry&)`; `register_function` may be nullptr when the plugin adds
/// no transform.
#define STOKE_PLUGIN_WITH_FORMATS(plugin_name, plugin_version, register_function, register_formats_function) \
  extern "C" STOKE_PLUGIN_EXPORT const ::stoke::nodes::PluginDescriptor* stoke_plugin_v1() {                 \
    static const ::stoke::nodes::PluginDescriptor descriptor{                                                \
        .abi = STOKE_PLUGIN_ABI,                                                                             \
        .stoke_version = STOKE_PLUGIN_STOKE_VERSION,                                                         \
        .stdlib = STOKE_PLUGIN_STDLIB,                                                                       \
        .stdlib_version = STOKE_PLUGIN_STDLIB_VERSION,                                                       \
        .stdlib_abi = STOKE_PLUGIN_STDLIB_ABI,                                                               \
        .name = plugin_name,                                                                                 \
        .version = plugin_version,                                                                           \
        .register_nodes = register_function,                                                                 \
        .register_formats = register_formats_function,                                                       \
    };                                                                                                       \
    return &descriptor;                                                                                      \
  }
