// Test-only plugins that load_plugin must refuse, one per value of STOKE_TEST_PLUGIN_FAULT:
//   1  built for another plugin ABI (STOKE_PLUGIN_ABI + 1)
//   2  built against another stoke release (9.9.0)
//   3  built with the other libstdc++ string ABI (_GLIBCXX_USE_CXX11_ABI flipped)
//   4  no stoke_plugin_v1 entry point
//   5  register_nodes adds a transform, then throws
//   6  register_nodes adds a transform, register_formats a data format, then throws
// The descriptor is written by hand, as the STOKE_PLUGIN macro would, with one field changed.
#include <memory>
#include <stdexcept>

#include "stoke/nodes/plugin.hpp"

#ifndef STOKE_TEST_PLUGIN_FAULT
#error "define STOKE_TEST_PLUGIN_FAULT (see the top of this file)"
#endif

#if STOKE_TEST_PLUGIN_FAULT != 4
namespace {

class Nothing final : public stoke::nodes::Transform {
 public:
  std::string_view name() const noexcept override { return "test_partial"; }

 protected:
  void apply_impl(stoke::nodes::Image&, stoke::nodes::ItemRng&) const override {}
};

void register_nodes(stoke::nodes::Registry& registry) {
  registry.add({"test_partial",
                "a transform that must not stay registered",
                {},
                [](const stoke::nodes::Params&) -> stoke::nodes::TransformPtr { return std::make_shared<Nothing>(); }});
  if (STOKE_TEST_PLUGIN_FAULT == 5) throw std::runtime_error("deliberate failure after one add");
}

void register_formats(stoke::nodes::DatasetRegistry& formats) {
  formats.add({.name = "test_partial_format",
               .doc = "a data format that must not stay registered",
               .params = {},
               .open = [](const std::filesystem::path&, const stoke::nodes::Params&) -> stoke::nodes::DatasetPtr {
                 return nullptr;
               }});
  if (STOKE_TEST_PLUGIN_FAULT == 6) throw std::runtime_error("deliberate failure after one data format");
}

}  // namespace

extern "C" STOKE_PLUGIN_EXPORT const stoke::nodes::PluginDescriptor* stoke_plugin_v1() {
  static const stoke::nodes::PluginDescriptor descriptor{
      .abi = STOKE_TEST_PLUGIN_FAULT == 1 ? STOKE_PLUGIN_ABI + 1 : STOKE_PLUGIN_ABI,
      .stoke_version = STOKE_TEST_PLUGIN_FAULT == 2 ? "9.9.0" : STOKE_PLUGIN_STOKE_VERSION,
      .stdlib = STOKE_PLUGIN_STDLIB,
      .stdlib_version = STOKE_PLUGIN_STDLIB_VERSION,
      .stdlib_abi = STOKE_TEST_PLUGIN_FAULT == 3 ? 1 - STOKE_PLUGIN_STDLIB_ABI : STOKE_PLUGIN_STDLIB_ABI,
      .name = "bad_plugin",
      .version = "0.0.1",
      .register_nodes = &register_nodes,
      .register_formats = &register_formats,
  };
  return &descriptor;
}
#else
// Something exported, so the library is a valid plugin-shaped module in every other respect.
extern "C" STOKE_PLUGIN_EXPORT int stoke_plugin_without_entry_point() { return 42; }
#endif
