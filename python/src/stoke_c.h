/* stoke's loader behind a plain C ABI, for Python's ctypes (python/stoke/_cabi.py): unlike the
 * pybind11 module it does not depend on a Python version, so one build loads in any CPython 3
 * (the GPU machines' 3.12 as Debian's 3.11). Batches leave as DLPack tensors that view their
 * slot; ctypes wraps each in a "dltensor" capsule whose destructor is stoke_dlpack_capsule_destructor.
 *
 * Every function that can fail returns an int status: 0 (or a count) on success, a negative
 * STOKE_E_* code on failure, with the message in stoke_last_error() (per thread). Strings the
 * library returns through char** belong to the caller: free them with stoke_string_free(). */
#ifndef STOKE_C_H
#define STOKE_C_H

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STOKE_C_API __attribute__((visibility("default")))

enum {
  STOKE_E_VALUE = -1,   /* a bad argument (Python: ValueError) */
  STOKE_E_RUNTIME = -2, /* anything else that failed, a file, a stage, an item (RuntimeError) */
  STOKE_E_MEMORY = -3,  /* out of memory (MemoryError) */
};

typedef struct stoke_loader stoke_loader;
typedef struct stoke_batch stoke_batch;

/* The calling thread's last error message (valid until its next failing call). */
STOKE_C_API const char* stoke_last_error(void);
STOKE_C_API void stoke_string_free(char* text);

/* A loader over the settings, a JSON object keyed by the settings' names
 * (stoke::train::LoaderSettings; stoke_loader_settings lists them). */
STOKE_C_API int stoke_loader_new(const char* settings_json, stoke_loader** out);
/* The settings a loader takes, as JSON: [{"name", "type", "default", "doc"}...] in order
 * (stoke::train::describe_loader_settings). */
STOKE_C_API int stoke_loader_settings(char** json);
STOKE_C_API void stoke_loader_free(stoke_loader* loader);
STOKE_C_API int stoke_loader_size(stoke_loader* loader, uint64_t* batches);
STOKE_C_API int stoke_loader_items_per_epoch(stoke_loader* loader, uint64_t* items);
STOKE_C_API int stoke_loader_shape(stoke_loader* loader, char** text);
/* What the caller applies to the uint8 images when the settings' normalize_on_device left the
 * normalize to it: {"mean", "stddev", "range"}, or null (stoke::train::loader_normalization). */
STOKE_C_API int stoke_loader_normalization(stoke_loader* loader, char** json);
STOKE_C_API int stoke_loader_begin(stoke_loader* loader);
/* 1 and a batch in *out; 0 at the epoch's end; 2 when none came within timeout_ms. */
STOKE_C_API int stoke_loader_next(stoke_loader* loader, int timeout_ms, stoke_batch** out);
STOKE_C_API int stoke_loader_set_epoch(stoke_loader* loader, uint32_t epoch);
STOKE_C_API int stoke_loader_position(stoke_loader* loader, uint32_t* epoch, uint64_t* position);
STOKE_C_API int stoke_loader_seek(stoke_loader* loader, uint32_t epoch, uint64_t position);
STOKE_C_API int stoke_loader_stats_json(stoke_loader* loader, char** json);
STOKE_C_API int stoke_loader_write_report(stoke_loader* loader, const char* path);

/* A batch: a JSON object {"epoch", "names", "address", "block": [address, bytes], "fields": [name...]},
 * then one DLPack tensor per field (by its index in "fields"), each keeping the slot alive until
 * its deleter runs. stoke_batch_free drops the handle's own reference. */
STOKE_C_API int stoke_batch_describe(stoke_batch* batch, char** json);
STOKE_C_API int stoke_batch_tensor(stoke_batch* batch, int field, DLManagedTensor** out);
/* Deletes a tensor from stoke_batch_tensor that no capsule took (PyCapsule_New failed). */
STOKE_C_API void stoke_tensor_free(DLManagedTensor* tensor);
STOKE_C_API void stoke_batch_free(stoke_batch* batch);

/* The capsule destructor for the capsules ctypes makes: deletes a tensor nobody consumed. Needs
 * Python's PyCapsule_IsValid and PyCapsule_GetPointer, given once by stoke_set_capsule_api. */
STOKE_C_API void stoke_set_capsule_api(void* is_valid, void* get_pointer);
STOKE_C_API void stoke_dlpack_capsule_destructor(void* capsule);

#ifdef __cplusplus
}
#endif

#endif /* STOKE_C_H */
