"""stoke's loader through its C ABI (libstoke_c.so, python/src/stoke_c.h), loaded with ctypes.

The same interface as the pybind11 extension stoke._native (NativeLoader), for the Pythons that
extension was not built for: the C ABI does not depend on Python's version, so one build serves
any CPython 3 (the GPU machines' 3.12 as Debian's 3.11). stoke.Loader picks it when _native does
not import, or when STOKE_BINDING=ctypes.
"""

import ctypes
import json
import os

_STATUS_BATCH, _STATUS_END, _STATUS_TIMEOUT = 1, 0, 2
_ERRORS = {-1: ValueError, -2: RuntimeError, -3: MemoryError}
_DLTENSOR = b"dltensor"  # lives as long as the module: capsules keep a pointer to it


def _library_path():
    """STOKE_C_LIBRARY, else libstoke_c.so beside this file (a build tree), else in the lib/ of
    the install prefix this package sits in (<prefix>/python/stoke: a bundle)."""
    if os.environ.get("STOKE_C_LIBRARY"):
        return os.environ["STOKE_C_LIBRARY"]
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "libstoke_c.so"), os.path.join(here, "..", "..", "lib", "libstoke_c.so")):
        if os.path.exists(candidate):
            return os.path.normpath(candidate)
    raise ImportError(f"stoke: libstoke_c.so is neither beside {here} nor in ../../lib (build the target stoke_c, "
                      "or set STOKE_C_LIBRARY to its path)")


def _load():
    # torch first, where it is there: a relocated stoke (the bundle) carries the libstdc++ it was built
    # with, older than the one torch may need; loaded first, the newer one serves both.
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    # RTLD_GLOBAL: plugins (Loader(plugins=[...])) resolve stoke's C++ symbols in it.
    lib = ctypes.CDLL(_library_path(), mode=os.RTLD_GLOBAL)
    c_int, c_char_p, c_void_p, u32, u64 = ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64
    p = ctypes.POINTER
    signatures = {
        "stoke_last_error": (c_char_p, []),
        "stoke_string_free": (None, [c_void_p]),
        "stoke_loader_new": (c_int, [c_char_p, p(c_void_p)]),
        "stoke_loader_settings": (c_int, [p(c_void_p)]),
        "stoke_loader_free": (None, [c_void_p]),
        "stoke_loader_size": (c_int, [c_void_p, p(u64)]),
        "stoke_loader_items_per_epoch": (c_int, [c_void_p, p(u64)]),
        "stoke_loader_shape": (c_int, [c_void_p, p(c_void_p)]),
        "stoke_loader_normalization": (c_int, [c_void_p, p(c_void_p)]),
        "stoke_loader_begin": (c_int, [c_void_p]),
        "stoke_loader_next": (c_int, [c_void_p, c_int, p(c_void_p)]),
        "stoke_loader_set_epoch": (c_int, [c_void_p, u32]),
        "stoke_loader_position": (c_int, [c_void_p, p(u32), p(u64)]),
        "stoke_loader_seek": (c_int, [c_void_p, u32, u64]),
        "stoke_loader_stats_json": (c_int, [c_void_p, p(c_void_p)]),
        "stoke_loader_write_report": (c_int, [c_void_p, c_char_p]),
        "stoke_batch_describe": (c_int, [c_void_p, p(c_void_p)]),
        "stoke_batch_tensor": (c_int, [c_void_p, c_int, p(c_void_p)]),
        "stoke_tensor_free": (None, [c_void_p]),
        "stoke_batch_free": (None, [c_void_p]),
        "stoke_set_capsule_api": (None, [c_void_p, c_void_p]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype, function.argtypes = restype, argtypes
    api = ctypes.pythonapi
    lib.stoke_set_capsule_api(ctypes.cast(api.PyCapsule_IsValid, c_void_p), ctypes.cast(api.PyCapsule_GetPointer, c_void_p))
    new_capsule = api.PyCapsule_New
    new_capsule.restype, new_capsule.argtypes = ctypes.py_object, [c_void_p, c_char_p, c_void_p]
    destructor = ctypes.cast(lib.stoke_dlpack_capsule_destructor, c_void_p).value
    return lib, new_capsule, destructor


_lib, _new_capsule, _destructor = _load()


def _check(status):
    if status < 0:
        raise _ERRORS.get(status, RuntimeError)(_lib.stoke_last_error().decode("utf-8", "replace"))
    return status


def _take_string(call, *args):
    """Calls a stoke_* function that returns a string through char**, and frees it."""
    out = ctypes.c_void_p()
    _check(call(*args, ctypes.byref(out)))
    try:
        return ctypes.string_at(out.value).decode("utf-8", "replace")
    finally:
        _lib.stoke_string_free(out)


def loader_settings():
    """The settings a loader takes, as JSON (see stoke._native.loader_settings)."""
    return _take_string(_lib.stoke_loader_settings)


class NativeLoader:
    """stoke::train::Loader through the C ABI (see stoke._native.NativeLoader)."""

    def __init__(self, settings_json):
        handle = ctypes.c_void_p()
        _check(_lib.stoke_loader_new(settings_json.encode(), ctypes.byref(handle)))
        self._handle = handle

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle and _lib is not None:
            _lib.stoke_loader_free(handle)
            self._handle = None

    def __len__(self):
        n = ctypes.c_uint64()
        _check(_lib.stoke_loader_size(self._handle, ctypes.byref(n)))
        return n.value

    def items_per_epoch(self):
        n = ctypes.c_uint64()
        _check(_lib.stoke_loader_items_per_epoch(self._handle, ctypes.byref(n)))
        return n.value

    def shape(self):
        return _take_string(_lib.stoke_loader_shape, self._handle)

    def normalization(self):
        return _take_string(_lib.stoke_loader_normalization, self._handle)

    def begin(self):
        _check(_lib.stoke_loader_begin(self._handle))

    def next(self):
        """The next batch as the extension gives it (a dict of DLPack capsules by field, "names",
        "epoch", "address", "block"), or None at the epoch's end. ctypes lets the GIL go during each
        call; waiting 100 ms at a time lets Python raise KeyboardInterrupt between them."""
        batch = ctypes.c_void_p()
        while True:
            status = _check(_lib.stoke_loader_next(self._handle, 100, ctypes.byref(batch)))
            if status == _STATUS_END:
                return None
            if status == _STATUS_BATCH:
                break
        try:
            out = json.loads(_take_string(_lib.stoke_batch_describe, batch))
            out["block"] = tuple(out["block"])
            for k, name in enumerate(out.pop("fields")):
                tensor = ctypes.c_void_p()
                _check(_lib.stoke_batch_tensor(batch, k, ctypes.byref(tensor)))
                try:
                    out[name] = _new_capsule(tensor, _DLTENSOR, _destructor)
                except BaseException:  # (MemoryError) no capsule owns the tensor: it would hold its slot
                    _lib.stoke_tensor_free(tensor)
                    raise
            return out
        finally:
            _lib.stoke_batch_free(batch)

    def set_epoch(self, epoch):
        _check(_lib.stoke_loader_set_epoch(self._handle, epoch))

    def position(self):
        epoch, position = ctypes.c_uint32(), ctypes.c_uint64()
        _check(_lib.stoke_loader_position(self._handle, ctypes.byref(epoch), ctypes.byref(position)))
        return epoch.value, position.value

    def seek(self, epoch, position):
        _check(_lib.stoke_loader_seek(self._handle, epoch, position))

    def stats_json(self):
        return _take_string(_lib.stoke_loader_stats_json, self._handle)

    def write_report(self, path):
        _check(_lib.stoke_loader_write_report(self._handle, os.fsencode(path)))
