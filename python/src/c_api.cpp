// The C ABI of stoke_c.h: stoke::train::Loader for ctypes. Each entry point turns a C++ exception
// into a status code and a message, so that none crosses the C boundary.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <stoke/train/json.hpp>
#include <stoke/train/loader.hpp>
#include <stoke/train/loader_settings.hpp>
#include <string>
#include <vector>

#include "batch_fields.hpp"
#include "stoke_c.h"

struct stoke_loader {
  stoke::train::Loader loader;
};

struct stoke_batch {
  stoke::python::BatchOwner owner;
};

namespace {

thread_local std::string last_error;

// The status code of an exception (Python's ValueError for a bad argument, as pybind11 maps
// std::invalid_argument), its message kept for stoke_last_error().
int status_of(const std::exception& e) noexcept {
  last_error = e.what();
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return STOKE_E_MEMORY;
  if (dynamic_cast<const std::logic_error*>(&e) != nullptr) return STOKE_E_VALUE;  // invalid_argument, out_of_range
  return STOKE_E_RUNTIME;
}

// Runs `work`, returning its status, or the code of the exception it threw.
template <typename Work>
int guarded(Work&& work) noexcept {
  try {
    return work();
  } catch (const std::exception& e) {
    return status_of(e);
  } catch (...) {
    last_error = "stoke: an unknown error";
    return STOKE_E_RUNTIME;
  }
}

char* copy_string(const std::string& text) {
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (out == nullptr) throw std::bad_alloc();
  std::memcpy(out, text.c_str(), text.size() + 1);
  return out;
}

using CapsuleIsValid = int (*)(void*, const char*);
using CapsuleGetPointer = void* (*)(void*, const char*);
CapsuleIsValid capsule_is_valid = nullptr;
CapsuleGetPointer capsule_get_pointer = nullptr;

}  // namespace

extern "C" {

const char* stoke_last_error(void) { return last_error.c_str(); }

void stoke_string_free(char* text) { std::free(text); }

int stoke_loader_new(const char* settings_json, stoke_loader** out) {
  return guarded([&] {
    *out = new stoke_loader{stoke::train::make_loader(stoke::train::loader_settings_from_json(settings_json))};
    return 0;
  });
}

int stoke_loader_settings(char** json) {
  return guarded([&] {
    *json = copy_string(stoke::train::describe_loader_settings().dump());
    return 0;
  });
}

void stoke_loader_free(stoke_loader* loader) { delete loader; }

int stoke_loader_size(stoke_loader* l, uint64_t* batches) {
  return guarded([&] {
    *batches = l->loader.size();
    return 0;
  });
}

int stoke_loader_items_per_epoch(stoke_loader* l, uint64_t* items) {
  return guarded([&] {
    *items = l->loader.items_per_epoch();
    return 0;
  });
}

int stoke_loader_shape(stoke_loader* l, char** text) {
  return guarded([&] {
    *text = copy_string(l->loader.shape().describe());
    return 0;
  });
}

int stoke_loader_normalization(stoke_loader* l, char** json) {
  return guarded([&] {
    *json = copy_string(stoke::train::loader_normalization(l->loader).dump());
    return 0;
  });
}

int stoke_loader_begin(stoke_loader* l) {
  return guarded([&] {
    l->loader.begin();
    return 0;
  });
}

int stoke_loader_next(stoke_loader* l, int timeout_ms, stoke_batch** out) {
  return guarded([&] {
    std::optional<stoke::train::LoaderBatch> batch = l->loader.next(std::chrono::milliseconds(timeout_ms));
    if (!batch) return 2;
    if (!batch->valid()) return 0;
    *out = new stoke_batch{std::make_shared<const stoke::train::LoaderBatch>(std::move(*batch))};
    return 1;
  });
}

int stoke_loader_set_epoch(stoke_loader* l, uint32_t epoch) {
  return guarded([&] {
    l->loader.set_epoch(epoch);
    return 0;
  });
}

int stoke_loader_position(stoke_loader* l, uint32_t* epoch, uint64_t* position) {
  return guarded([&] {
    const stoke::train::LoaderPosition at = l->loader.position();
    *epoch = at.epoch;
    *position = at.position;
    return 0;
  });
}

int stoke_loader_seek(stoke_loader* l, uint32_t epoch, uint64_t position) {
  return guarded([&] {
    l->loader.seek({epoch, static_cast<std::size_t>(position)});
    return 0;
  });
}

int stoke_loader_stats_json(stoke_loader* l, char** json) {
  return guarded([&] {
    *json = copy_string(stoke::train::to_json(l->loader.stats(), l->loader.position()).dump());
    return 0;
  });
}

int stoke_loader_write_report(stoke_loader* l, const char* path) {
  return guarded([&] {
    l->loader.write_report(path);
    return 0;
  });
}

int stoke_batch_describe(stoke_batch* b, char** json) {
  return guarded([&] {
    const stoke::train::LoaderBatch& batch = *b->owner;
    const auto block = reinterpret_cast<std::uintptr_t>(batch.block().data());  // the pixels lie at its start
    nlohmann::json out;
    out["epoch"] = batch.epoch();
    out["names"] = nlohmann::json::array();
    for (const std::string& name : batch.names()) out["names"].push_back(name);
    out["address"] = block;
    out["block"] = {block, batch.block().size()};
    out["fields"] = nlohmann::json::array();
    for (const auto& field : batch.fields()) out["fields"].push_back(field.name);
    // Names are paths: bytes that are not UTF-8 are replaced rather than failing the batch.
    *json = copy_string(out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    return 0;
  });
}

int stoke_batch_tensor(stoke_batch* b, int field, DLManagedTensor** out) {
  return guarded([&] {
    if (field < 0 || static_cast<std::size_t>(field) >= b->owner->fields().size())
      throw std::out_of_range("stoke_batch_tensor: no field " + std::to_string(field));
    *out = stoke::python::dlpack_tensor(b->owner, b->owner->fields()[static_cast<std::size_t>(field)]);
    return 0;
  });
}

void stoke_tensor_free(DLManagedTensor* tensor) {
  if (tensor != nullptr) tensor->deleter(tensor);
}

void stoke_batch_free(stoke_batch* b) { delete b; }

void stoke_set_capsule_api(void* is_valid, void* get_pointer) {
  capsule_is_valid = reinterpret_cast<CapsuleIsValid>(is_valid);
  capsule_get_pointer = reinterpret_cast<CapsuleGetPointer>(get_pointer);
}

void stoke_dlpack_capsule_destructor(void* capsule) {
  // Still named "dltensor": never consumed, so the capsule owns the tensor; a consumer renames it
  // "used_dltensor" and takes the ownership over (the DLPack exchange protocol).
  if (capsule_is_valid == nullptr || capsule_is_valid(capsule, "dltensor") == 0) return;
  auto* managed = static_cast<DLManagedTensor*>(capsule_get_pointer(capsule, "dltensor"));
  if (managed != nullptr) managed->deleter(managed);
}

}  // extern "C"
