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

# Plugins (Loader(plugins=[...])) resolve stoke's C++ symbols in the extension: load it with
# RTLD_GLOBAL so that they can.
_flags = sys.getdlopenflags()
sys.setdlopenflags(_flags | os.RTLD_GLOBAL)
try:
    from . import _native  # noqa: E402
finally:
    sys.setdlopenflags(_flags)

from .loader import Batch, Loader  # noqa: E402

__all__ = ["Batch", "Loader"]
