// stoke._native: the Python binding of stoke::train::Loader. The stoke package (python/stoke/)
// wraps it in stoke.Loader, which turns the DLPack capsules made here into torch tensors.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <stoke/nodes/plugin.hpp>
#include <stoke/nodes/registry.hpp>
#include <stoke/train/input.hpp>
#include <stoke/train/json.hpp>
#include <stoke/train/loader.hpp>
#include <string>
#include <vector>

#include "dlpack_export.hpp"

namespace py = pybind11;

namespace stoke::python {

namespace {

using namespace std::chrono_literals;

graph::OnError on_error_of(const std::string& word) {
  if (word == "skip") return graph::OnError::skip;
  if (word == "fail") return graph::OnError::fail;
  throw std::invalid_argument("on_error must be 'skip' or 'fail', not '" + word + "'");
}

nodes::ShardRemainder remainder_of(const std::string& word) {
  if (word == "pad") return nodes::ShardRemainder::pad;
  if (word == "drop") return nodes::ShardRemainder::drop;
  if (word == "uneven") return nodes::ShardRemainder::uneven;
  throw std::invalid_argument("remainder must be 'pad', 'drop' or 'uneven', not '" + word + "'");
}

nodes::DecodeColor color_of(const std::string& word) {
  if (word == "rgb") return nodes::DecodeColor::rgb;
  if (word == "keep") return nodes::DecodeColor::keep;
  throw std::invalid_argument("color must be 'rgb' or 'keep', not '" + word + "'");
}

std::int64_t as_dim(std::size_t n) { return static_cast<std::int64_t>(n); }

// One batch as Python sees it: a dict of DLPack capsules by field name, "names" (a list of str),
// "epoch", and "address" (the slot's pixel memory, for tests of zero-copy).
py::dict batch_dict(nodes::Batch batch) {
  const nodes::BatchShape& shape = batch.shape();
  const auto n = as_dim(batch.size());
  const cv::Size frame = batch.extent();
  py::dict out;
  out["address"] = reinterpret_cast<std::uintptr_t>(batch.data().data());
  out["epoch"] = batch.epoch();
  py::list names;
  for (const std::string& name : batch.names()) names.append(name);
  out["names"] = names;
  auto owner = std::make_shared<nodes::Batch>(std::move(batch));
  nodes::Batch& b = *owner;
  const auto put = [&](const char* field, const void* data, DLDataType type, std::vector<std::int64_t> dims) {
    out[field] = py::reinterpret_steal<py::object>(dlpack_capsule(owner, const_cast<void*>(data), type, std::move(dims)));
  };
  const std::vector<std::int64_t> pixels =
      shape.layout == nodes::BatchLayout::nchw
          ? std::vector<std::int64_t>{n, shape.channels, frame.height, frame.width}
          : std::vector<std::int64_t>{n, frame.height, frame.width, shape.channels};
  put("images", b.data().data(), dl_type(shape.pixel_type), pixels);
  put("labels", b.labels().data(), dl_type(nodes::ElementType::i32), {n});
  // uint64 indices as int64 (torch has no uint64 before 2.3; an index is below 2^63).
  put("indices", b.indices().data(), {kDLInt, 64, 1}, {n});
  if (shape.mask) put("mask", b.mask().data(), dl_type(*shape.mask), {n, frame.height, frame.width});
  for (std::size_t k = 0; k < shape.targets.size(); ++k) {
    std::vector<std::int64_t> dims{n};
    dims.insert(dims.end(), shape.targets[k].shape.begin(), shape.targets[k].shape.end());
    put(shape.targets[k].name.c_str(), b.target(k).data(), dl_type(nodes::ElementType::f32), std::move(dims));
  }
  if (shape.max_boxes > 0) {
    const auto boxes = as_dim(shape.max_boxes);
    put("boxes", b.boxes().data(), dl_type(nodes::ElementType::f32), {n, boxes, 4});
    put("box_classes", b.box_classes().data(), dl_type(nodes::ElementType::i32), {n, boxes});
    put("box_counts", b.box_counts().data(), dl_type(nodes::ElementType::i32), {n});
    if (shape.box_extras > 0)
      put("box_extras", b.box_extras().data(), dl_type(nodes::ElementType::f32), {n, boxes, shape.box_extras});
  }
  if (shape.variable_size) put("item_sizes", b.item_sizes().data(), dl_type(nodes::ElementType::i32), {n, 2});
  return out;
}

struct Settings {
  std::string data;
  std::vector<std::string> transforms;
  std::size_t batch_size = 64;
  int size = 224;
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool drop_last = false;
  std::uint32_t rank = 0;
  std::uint32_t world = 1;
  std::string remainder = "pad";
  int threads = 0;
  bool autotune = true;
  int cpu_budget = 0;
  std::string on_error = "skip";
  std::vector<std::string> plugins;
  std::size_t prefetch = 4;
  std::string format;
  std::string color = "rgb";
  bool fuse = true;
  int nice = 0;
};

train::InputConfig input_config(const Settings& s) {
  train::InputConfig c;
  c.batch_size = s.batch_size;
  c.size = s.size;
  c.transforms = s.transforms;
  c.shuffle = s.shuffle;
  c.seed = s.seed;
  c.drop_last = s.drop_last;
  c.rank = s.rank;
  c.world = s.world;
  c.remainder = remainder_of(s.remainder);
  c.threads = s.threads;
  c.autotune = s.autotune;
  c.tuning.cpu_budget = s.cpu_budget;
  c.on_error = on_error_of(s.on_error);
  c.prefetch = s.prefetch;
  c.fuse = s.fuse;
  c.nice = s.nice;
  c.decode = train::default_decode_options(color_of(s.color));
  if (s.world == 0 || s.rank >= s.world)
    throw std::invalid_argument("rank " + std::to_string(s.rank) + " is not below world " + std::to_string(s.world));
  if (s.batch_size == 0) throw std::invalid_argument("batch_size must be positive");
  return c;
}

// The loader and what Python asks of it.
class NativeLoader {
 public:
  explicit NativeLoader(const Settings& s) : loader_(open(s), input_config(s)) {}

  std::size_t size() const { return loader_.size(); }
  void begin() { loader_.begin(); }

  // The next batch, or None at the epoch's end. Waits without the GIL, looking at signals every
  // 100 ms, so that Ctrl-C (KeyboardInterrupt) interrupts a wait promptly.
  py::object next() {
    for (;;) {
      std::optional<nodes::Batch> batch;
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
  static nodes::DatasetPtr open(const Settings& s) {
    for (const std::string& plugin : s.plugins) nodes::load_plugin(plugin, nodes::Registry::builtin());
    return train::open_dataset(s.data, s.format);
  }

  train::Loader loader_;
};

// The C++ pipeline's own batches (add_input to a sink, no Loader), for the tests: each batch's
// pixels as bytes, labels and indices.
py::list reference_batches(const Settings& s, std::uint32_t epoch, std::uint32_t epochs) {
  train::InputConfig config = input_config(s);
  config.first_epoch = epoch;
  config.epochs = epochs;
  const nodes::DatasetPtr dataset = train::open_dataset(s.data, s.format);
  train::Input input = train::make_input(dataset, config);
  graph::Pipeline pipe(input.pipeline_options);
  struct Kept {
    std::string pixels;
    std::vector<std::int32_t> labels;
    std::vector<std::uint64_t> indices;
  };
  std::vector<Kept> kept;
  train::add_input(pipe, input, config).sink("keep", [&](nodes::Batch b) {
    kept.push_back({std::string(reinterpret_cast<const char*>(b.data().data()), b.data().size()),
                    {b.labels().begin(), b.labels().end()},
                    {b.indices().begin(), b.indices().end()}});
  });
  {
    py::gil_scoped_release no_gil;
    pipe.run();
  }
  py::list out;
  for (const Kept& k : kept) out.append(py::make_tuple(py::bytes(k.pixels), k.labels, k.indices));
  return out;
}

}  // namespace

}  // namespace stoke::python

PYBIND11_MODULE(_native, m) {
  using namespace stoke;
  using python::NativeLoader;
  using python::Settings;
  m.doc() = "stoke's C++ input pipeline (stoke::train::Loader); use it through stoke.Loader";

  py::class_<Settings>(m, "Settings")
      .def(py::init<>())
      .def_readwrite("data", &Settings::data)
      .def_readwrite("transforms", &Settings::transforms)
      .def_readwrite("batch_size", &Settings::batch_size)
      .def_readwrite("size", &Settings::size)
      .def_readwrite("shuffle", &Settings::shuffle)
      .def_readwrite("seed", &Settings::seed)
      .def_readwrite("drop_last", &Settings::drop_last)
      .def_readwrite("rank", &Settings::rank)
      .def_readwrite("world", &Settings::world)
      .def_readwrite("remainder", &Settings::remainder)
      .def_readwrite("threads", &Settings::threads)
      .def_readwrite("autotune", &Settings::autotune)
      .def_readwrite("cpu_budget", &Settings::cpu_budget)
      .def_readwrite("on_error", &Settings::on_error)
      .def_readwrite("plugins", &Settings::plugins)
      .def_readwrite("prefetch", &Settings::prefetch)
      .def_readwrite("format", &Settings::format)
      .def_readwrite("color", &Settings::color)
      .def_readwrite("fuse", &Settings::fuse)
      .def_readwrite("nice", &Settings::nice);

  py::class_<NativeLoader>(m, "NativeLoader")
      .def(py::init<const Settings&>(), py::arg("settings"), py::call_guard<py::gil_scoped_release>())
      .def("__len__", &NativeLoader::size)
      .def("begin", &NativeLoader::begin, py::call_guard<py::gil_scoped_release>())
      .def("next", &NativeLoader::next)
      .def("items_per_epoch", [](NativeLoader& l) { return l.loader().items_per_epoch(); })
      .def("shape", [](NativeLoader& l) { return l.loader().shape().describe(); })
      .def("set_epoch", [](NativeLoader& l, std::uint32_t epoch) { l.loader().set_epoch(epoch); })
      .def("position",
           [](NativeLoader& l) {
             const train::LoaderPosition at = l.loader().position();
             return py::make_tuple(at.epoch, at.position);
           })
      .def("seek", [](NativeLoader& l, std::uint32_t epoch,
                      std::size_t position) { l.loader().seek({epoch, position}); })
      .def("stats_json", [](NativeLoader& l) { return train::to_json(l.loader().stats(), l.loader().position()).dump(); })
      .def("write_report", [](NativeLoader& l, const std::filesystem::path& path) { l.loader().write_report(path); });

  m.def("reference_batches", &python::reference_batches, py::arg("settings"), py::arg("epoch") = 0,
        py::arg("epochs") = 1, "The C++ pipeline's batches without the Loader (for tests): (pixels, labels, indices)");
}
