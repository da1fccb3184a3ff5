// stoke._native: the pybind11 binding of stoke::train::Loader (c_api.cpp is the other, for ctypes;
// both read the settings with train's loader_settings.hpp and share batch_fields.cpp). The stoke package
// (python/stoke/) wraps it in stoke.Loader, which turns the DLPack capsules made here into torch tensors.
#include <pybind11/pybind11.h>
#include <pybind11/stl/filesystem.h>

#include <chrono>
#include <optional>
#include <span>
#include <stdexcept>
#include <stoke/train/json.hpp>
#include <stoke/train/loader.hpp>
#include <stoke/train/loader_settings.hpp>
#include <string>

#include "batch_fields.hpp"
#include "dlpack_export.hpp"

namespace py = pybind11;

namespace stoke::python {

namespace {

using namespace std::chrono_literals;

// One batch as Python sees it: a dict of DLPack capsules by field name (LoaderBatch::fields()),
// "names" (a list of str), "epoch", "address" (the slot's pixel memory, for tests of zero-copy)
// and "block" (address, bytes): the slot's whole block, which device="cuda" pins once.
py::dict batch_dict(train::LoaderBatch batch) {
  py::dict out;
  const std::span<const std::byte> block = batch.block();
  out["address"] = reinterpret_cast<std::uintptr_t>(block.data());  // the pixels lie at the block's start
  out["block"] = py::make_tuple(reinterpret_cast<std::uintptr_t>(block.data()), block.size());
  out["epoch"] = batch.epoch();
  py::list names;
  for (const std::string& name : batch.names()) names.append(name);
  out["names"] = names;
  auto owner = std::make_shared<const train::LoaderBatch>(std::move(batch));
  for (const train::BatchField& field : owner->fields())
    out[field.name.c_str()] = py::reinterpret_steal<py::object>(dlpack_capsule(dlpack_tensor(owner, field)));
  return out;
}

// The loader and what Python asks of it.
class NativeLoader {
 public:
  explicit NativeLoader(const train::LoaderSettings& s) : loader_(train::make_loader(s)) {}

  std::size_t size() const { return loader_.size(); }
  void begin() { loader_.begin(); }

  // The next batch, or None at the epoch's end. Waits without the GIL, looking at signals every
  // 100 ms, so that Ctrl-C (KeyboardInterrupt) interrupts a wait promptly.
  py::object next() {
    for (;;) {
      std::optional<train::LoaderBatch> batch;
      {
        py::gil_scoped_release no_gil;
        batch = loader_.next(100ms);
      }
      if (batch) {
        if (!batch->valid()) return py::none();
        return batch_dict(std::move(*batch));
      }
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
  }

  train::Loader& loader() { return loader_; }

 private:
  train::Loader loader_;
};

}  // namespace

}  // namespace stoke::python

PYBIND11_MODULE(_native, m) {
  using namespace stoke;
  using python::NativeLoader;
  m.doc() = "stoke's C++ input pipeline (stoke::train::Loader); use it through stoke.Loader";
  // Every std::out_of_range (an epoch past the run's end, a position past the epoch's) is a
  // ValueError, as from the C ABI, whose status map gives ValueError for each std::logic_error;
  // pybind11's own translation would make it IndexError.
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const std::out_of_range& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  m.def(
      "loader_settings", [] { return train::describe_loader_settings().dump(); },
      "the settings a loader takes, as JSON: [{name, type, default, doc}...] in order");
  py::class_<NativeLoader>(m, "NativeLoader")
      .def(py::init([](const std::string& settings_json) {
             return new NativeLoader(train::loader_settings_from_json(settings_json));
           }),
           py::arg("settings_json"), py::call_guard<py::gil_scoped_release>())
      .def("__len__", &NativeLoader::size)
      .def("begin", &NativeLoader::begin, py::call_guard<py::gil_scoped_release>())
      .def("next", &NativeLoader::next)
      .def("items_per_epoch", [](NativeLoader& l) { return l.loader().items_per_epoch(); })
      .def("shape", [](NativeLoader& l) { return l.loader().shape().describe(); })
      .def("normalization", [](NativeLoader& l) { return train::loader_normalization(l.loader()).dump(); })
      .def("set_epoch", [](NativeLoader& l, std::uint32_t epoch) { l.loader().set_epoch(epoch); })
      .def("position",
           [](NativeLoader& l) {
             const train::LoaderPosition at = l.loader().position();
             return py::make_tuple(at.epoch, at.position);
           })
      .def("seek",
           [](NativeLoader& l, std::uint32_t epoch, std::size_t position) {
             l.loader().seek({epoch, position});
           })
      .def("stats_json",
           [](NativeLoader& l) { return train::to_json(l.loader().stats(), l.loader().position()).dump(); })
      .def("write_report", [](NativeLoader& l, const std::filesystem::path& path) { l.loader().write_report(path); });
}
