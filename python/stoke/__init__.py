"""stoke for PyTorch: a loader that replaces torch.utils.data.DataLoader in a training loop.

    import stoke
    loader = stoke.Loader("photos/train", batch_size=64, size=224, seed=0,
                          transforms=["random_resized_crop size=224", "random_horizontal_flip", "normalize"])
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:          # torch tensors, viewing stoke's batch memory
            ...

The input pipeline (read, decode, augment, batch) is stoke's C++ one, on threads of its own: no
worker processes, no copies of the dataset, the GIL released while it works. Batches are handed
over through DLPack without a copy; see Loader for the rules that keep memory bounded.
"""

import os
import sys


def _binding():
    """The binding of stoke's C++ loader: the pybind11 extension _native where it was built for
    this Python, else the C ABI through ctypes (_cabi), which loads under any CPython 3.
    STOKE_BINDING=pybind11 or ctypes insists on one."""
    wanted = os.environ.get("STOKE_BINDING", "")
    if wanted not in ("", "pybind11", "ctypes"):
        raise ImportError(f"stoke: STOKE_BINDING={wanted!r}; it takes pybind11 or ctypes")
    if wanted != "ctypes":
        # Plugins (Loader(plugins=[...])) resolve stoke's C++ symbols in the extension: load it
        # with RTLD_GLOBAL so that they can.
        flags = sys.getdlopenflags()
        sys.setdlopenflags(flags | os.RTLD_GLOBAL)
        try:
            from . import _native

            return _native
        except ImportError:
            if wanted == "pybind11":
                raise
        finally:
            sys.setdlopenflags(flags)
    from . import _cabi

    return _cabi


binding = _binding()

from .loader import Batch, Loader  # noqa: E402

__all__ = ["Batch", "Loader", "binding"]
