#include "stoke/nodes/dataset_registry.hpp"

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "dataset_support.hpp"
#include "spec_entries.hpp"

namespace stoke::nodes {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kKind = "data format";

const char* what_it_takes(DataPath takes) {
  switch (takes) {
    case DataPath::folder:
      return "a folder";
    case DataPath::file:
      return "a file";
    case DataPath::any:
      break;
  }
  return "a file or folder";
}

// The entry's factory over `path`: a dataset, having read every value the spec gave.
DatasetPtr open_entry(const DatasetEntry& entry, const fs::path& path, const Params& params) {
  DatasetPtr dataset = entry.open(path, params);
  if (!dataset) throw std::logic_error(entry.name + ": the data format's open returned no dataset");
  detail::check_all_read(entry.name, params);
  return dataset;
}

}  // namespace

void DatasetRegistry::add(DatasetEntry entry) {
  detail::check_entry("DatasetRegistry::add: data format", entry.name, static_cast<bool>(entry.open), entry.params);
  if (entry.name == "auto") {
    throw std::invalid_argument("DatasetRegistry::add: 'auto' is not a data format's name (it asks for the guess)");
  }
  const std::unique_lock lock(mutex_);
  if (entries_.contains(entry.name)) {
    std::vector<std::string> known;
    for (const auto& [name, unused] : entries_) known.push_back(name);
    throw std::invalid_argument("data format '" + entry.name + "' is already registered; registered: " +
                                detail::join(known, ", ") + " (was a plugin loaded twice?)");
  }
  std::string name = entry.name;
  entries_.emplace(std::move(name), std::move(entry));
}

DatasetPtr DatasetRegistry::open(const fs::path& path, std::string_view format) const {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  const std::string_view spec = detail::trim(format);
  if (spec.empty() || spec == "auto") return guess(path, status);

  const auto [entry, params] = bind(spec);
  const std::string& name = entry->name;
  if (!fs::exists(status) && !(entry->recognise && entry->recognise(path, status))) {
    throw std::runtime_error(path.string() + ": no such file or folder (the " + name + " format takes " +
                             what_it_takes(entry->takes) + ")");
  }
  const bool folder = fs::is_directory(status);
  if (fs::exists(status) &&
      ((entry->takes == DataPath::folder && !folder) || (entry->takes == DataPath::file && folder))) {
    throw std::runtime_error(path.string() + ": --format " + name + " needs " + what_it_takes(entry->takes));
  }
  return open_entry(*entry, path, params);
}

DatasetPtr DatasetRegistry::guess(const fs::path& path, fs::file_status status) const {
  std::vector<const DatasetEntry*> order;
  {
    const std::shared_lock lock(mutex_);
    for (const auto& [name, entry] : entries_) {
      if (entry.recognise) order.push_back(&entry);
    }
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const DatasetEntry* a, const DatasetEntry* b) { return a->guess_order < b->guess_order; });
  for (const DatasetEntry* entry : order) {
    if (entry->recognise(path, status)) {
      // A guessed format gets no values, as if named alone: its factory reads the defaults.
      return open_entry(*entry, path, detail::bind(entry->name, entry->name, Params(entry->name, {}), entry->params));
    }
  }
  if (!fs::exists(status)) {
    throw std::runtime_error(path.string() + ": no such file or folder (give an image folder, a segmentation folder, " +
                             "a .stoke pack, a list file, a CIFAR folder or tar shards -- data formats " + choices() +
                             "; `stoke gen-shapes --out DIR` makes a small dataset)");
  }
  throw std::runtime_error(path.string() + ": no data format recognises it; name one (" + choices() + ")");
}

void DatasetRegistry::check(std::string_view format) const {
  const std::string_view spec = detail::trim(format);
  if (spec.empty() || spec == "auto") return;
  const auto [entry, params] = bind(spec);
  // The values are parsed as their declared types: a value that does not parse fails here too.
  for (const ParamDoc& p : entry->params) {
    if (params.has(p.name)) detail::read_as_declared(params, p);
  }
}

std::pair<const DatasetEntry*, Params> DatasetRegistry::bind(std::string_view spec) const {
  std::string name;
  const Params parsed = Params::parse(spec, name, kKind);
  const DatasetEntry* entry = find(name);
  if (!entry) throw std::invalid_argument(detail::unknown_name(kKind, name, names()));
  return {entry, detail::bind(spec, name, parsed, entry->params)};
}

const DatasetEntry* DatasetRegistry::find(std::string_view name) const {
  const std::shared_lock lock(mutex_);
  const auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

std::vector<std::string> DatasetRegistry::names() const {
  const std::shared_lock lock(mutex_);
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, unused] : entries_) out.push_back(name);
  return out;
}

std::string DatasetRegistry::choices() const { return "auto, " + detail::join(names(), ", "); }

std::string DatasetRegistry::help() const {
  const std::shared_lock lock(mutex_);
  std::string out;
  for (const auto& [name, entry] : entries_) out += detail::help_of(name, entry.doc, entry.params);
  return out;
}

DatasetRegistry& DatasetRegistry::builtin() {
  // A constructor that throws leaves the static uninitialized, so the next call starts afresh.
  struct Builtin {
    DatasetRegistry registry;
    Builtin() { register_builtin_datasets(registry); }
  };
  static Builtin instance;
  return instance.registry;
}

}  // namespace stoke::nodes
