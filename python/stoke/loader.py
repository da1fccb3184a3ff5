"""stoke.Loader: stoke's C++ input pipeline as an iterable of torch tensors (see Loader)."""

import collections
import inspect
import json
import os
import textwrap

from . import binding as _native

STATE_VERSION = 1
# The settings the C++ loader takes, declared once there (stoke/train/loader_settings.hpp): each
# one's name, type, default and meaning, in order. Loader's signature and docstring are made from it.
_DECLARED = json.loads(_native.loader_settings())
_DEFAULTS = {d["name"]: d["default"] for d in _DECLARED}
# The loader's threads work at this nice value (lower priority than the training loop's): see Loader.
NICE = _DEFAULTS["nice"]


def _coerce(declared, value):
    """`value` as the setting's declared type ("int", "bool", "str", "list[str]"; "int?" and "bool?"
    where None leaves it empty); None for any other setting means its default."""
    kind = declared["type"]
    if value is None:
        return None if kind.endswith("?") else declared["default"]
    if kind in ("int", "int?"):
        return int(value)
    if kind in ("bool", "bool?"):
        return bool(value)
    if kind == "list[str]":
        return [str(value)] if isinstance(value, (str, os.PathLike)) else [str(v) for v in value]
    return str(value)


class Batch:
    """One batch: ``images`` and ``labels`` as torch tensors, every field by name.

    Unpacks as DataLoader's pair (``for images, labels in loader``); ``batch["mask"]``,
    ``batch["indices"]``, a named target ``batch["age"]``, ``batch.names`` (the items' files) and
    ``batch.fields`` (a dict of every tensor) give the rest. The tensors view stoke's batch memory
    (no copy): the batch's slot goes back to the loader's pool when the last of them is freed.
    """

    __slots__ = ("fields", "names", "epoch", "_address")

    def __init__(self, fields, names, epoch, address):
        self.fields = fields
        self.names = names
        self.epoch = epoch
        self._address = address

    @property
    def images(self):
        return self.fields["images"]

    @property
    def labels(self):
        return self.fields["labels"]

    def __iter__(self):
        return iter((self.fields["images"], self.fields["labels"]))

    def __len__(self):
        return 2

    def __getitem__(self, key):
        if isinstance(key, int):
            return (self.fields["images"], self.fields["labels"])[key]
        try:
            return self.fields[key]
        except KeyError:
            raise KeyError(f"this batch has no field {key!r}; it has {sorted(self.fields)}") from None

    def keys(self):
        return self.fields.keys()

    def __repr__(self):
        shapes = ", ".join(f"{k}={tuple(v.shape)}" for k, v in self.fields.items())
        return f"stoke.Batch(epoch={self.epoch}, {shapes})"


class _Epoch:
    """An iteration of a Loader. An iterator object, not a generator: a suspended generator's
    frame would keep the last batch's tensors, and so its slot, alive after the caller let go."""

    def __init__(self, loader):
        self._loader = loader
        self._mine = None  # the loader's iteration count when this one began

    def __iter__(self):
        return self

    def __next__(self):
        loader = self._loader
        if self._mine is None:
            self._mine = loader._begin()
        elif loader._iterations != self._mine:
            raise RuntimeError("stoke.Loader: this iteration was replaced by a newer one of the same loader "
                               "(a later iteration began its epoch); a Loader goes through one epoch at a time, "
                               "so finish or drop an iteration before beginning the next")
        batch = loader._next_batch()
        if batch is None:
            raise StopIteration
        return batch


class _ToDevice:
    """Moves host batches to a CUDA device for Loader(device="cuda"): each slot's block is pinned
    once (cudaHostRegister), every field is copied with non_blocking on a stream of its own, and
    torch's current stream waits for the copy through an event -- no host synchronisation. The host
    batch (its slot) is released once its copy is seen complete, so the pool bound holds; with
    two copies in flight the next batch waits for the oldest."""

    IN_FLIGHT = 2  # host batches held for their copies (the pool has prefetch + 2 slots)

    def __init__(self, device):
        import torch

        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"stoke.Loader: device={str(device)!r}; it takes 'cpu', 'cuda' or 'cuda:N'")
        if not torch.cuda.is_available():
            raise RuntimeError(f"stoke.Loader: device={str(device)!r}, but torch {torch.__version__} sees no CUDA "
                               "device (a build without CUDA, or no GPU); use device='cpu'")
        self._torch = torch
        self.device = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
        self._stream = torch.cuda.Stream(self.device)
        try:
            self._cudart = torch.cuda.cudart()  # cudaHostRegister / cudaHostUnregister
        except (AttributeError, RuntimeError):
            self._cudart = None
        self._pinned = {}  # block address -> bytes, the blocks this loader registered
        self._unpinned = set()  # blocks that could not be pinned (copied from pageable memory)
        self._in_flight = collections.deque()  # (event, host batch) of copies not yet seen complete

    def _pin(self, address, size):
        if address in self._pinned or address in self._unpinned:
            return
        status = -1 if self._cudart is None else int(self._cudart.cudaHostRegister(address, size, 0))
        if status == 0:
            self._pinned[address] = size
        else:  # e.g. already registered by someone else, or no pinned memory left: copy from pageable memory
            self._unpinned.add(address)
            import warnings

            warnings.warn(f"stoke.Loader: cannot pin a batch slot ({size} bytes; status {status}): its copies "
                          "to the device will not be asynchronous", RuntimeWarning, stacklevel=3)

    def retire(self):
        """Releases the host batches whose copies are done; waits for the oldest while IN_FLIGHT are
        held. Called before the loader waits for its next batch, so that the pipeline always has a
        free slot (at most IN_FLIGHT - 1 held, the pool has at least 2)."""
        while self._in_flight and (len(self._in_flight) >= self.IN_FLIGHT or self._in_flight[0][0].query()):
            done, _ = self._in_flight.popleft()
            done.synchronize()  # returns at once unless the GPU is IN_FLIGHT copies behind

    def __call__(self, batch, block):
        torch = self._torch
        self._pin(*block)
        current = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self._stream):
            fields = {name: t.to(self.device, non_blocking=True) for name, t in batch.fields.items()}
            done = torch.cuda.Event()
            done.record(self._stream)
        current.wait_event(done)
        for t in fields.values():
            t.record_stream(current)  # made on the copy stream, used on the current one
        self._in_flight.append((done, batch))
        return Batch(fields, batch.names, batch.epoch, batch._address)

    def close(self):
        """Waits for the copies in flight, releases their slots and unpins the blocks."""
        while self._in_flight:
            done, _ = self._in_flight.popleft()
            done.synchronize()
        for address in self._pinned:
            self._cudart.cudaHostUnregister(address)  # the pool frees the slots later
        self._pinned.clear()


class _Normalize:
    """The normalize a loader left to the tensors' device (normalize_on_device): uint8 NHWC images
    become float32 NCHW, (x / range - mean[c]) / stddev[c], computed in float32 as the pipeline's own
    Normalize computes it. One pass to NCHW, then the arithmetic in place, on the current stream."""

    def __init__(self, normalization):
        self._mean, self._stddev = normalization["mean"], normalization["stddev"]
        self._range = normalization["range"] or 255.0  # 0: the full scale of uint8
        self._constants = {}  # (device, channels) -> (range, mean, stddev) as (1, C, 1, 1) tensors

    def _for(self, device, channels):
        key = (device, channels)
        if key not in self._constants:
            import torch

            def per_channel(values):  # one value serves every channel; a longer list is used from its start
                values = values * channels if len(values) == 1 else values[:channels]
                on_host = torch.tensor(values, dtype=torch.float32).view(1, channels, 1, 1)
                return on_host.to(device, non_blocking=True)  # made once: no wait for the GPU

            self._constants[key] = (per_channel([self._range]), per_channel(self._mean), per_channel(self._stddev))
        return self._constants[key]

    def __call__(self, images):
        import torch

        n, h, w, c = images.shape
        scale, mean, stddev = self._for(images.device, c)
        out = torch.empty((n, c, h, w), dtype=torch.float32, device=images.device)
        out.copy_(images.permute(0, 3, 1, 2))
        return out.div_(scale).sub_(mean).div_(stddev)


def _leave_normalize(setting, device):
    """normalize_on_device as the loader takes it: as given, or (None) on for any device but the CPU."""
    return str(device) != "cpu" if setting is None else bool(setting)


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class Loader:
    """Batches of a dataset through stoke's input pipeline, as torch tensors.

    Args (``data`` and ``transforms`` may be given by position, the others by name):
{settings}
        device: "cpu" (tensors that view the batch slots, no copy) or "cuda" / "cuda:N": the
            tensors are on that GPU. Each slot is pinned once, each batch copied asynchronously on a
            stream of the loader's own, and torch's current stream (at the time the batch is
            yielded) waits for the copy through an event: no host synchronisation, and the copy of
            one batch overlaps the GPU work queued for the one before. Labels become int64 on the
            device. The slot goes back to the pool as soon as its copy is done, so on CUDA a loop
            that keeps tensors holds device memory, not slots.
        label_dtype: the labels' torch dtype: torch.int64 (the default: DataLoader's, what
            cross_entropy takes; a copy of batch_size numbers) or torch.int32 (stoke's own, a view
            of the batch like every other field).

    Memory is bounded: every batch is a slot of a pool of ``prefetch + 2`` batches allocated at the
    start, and the tensors a batch yields view its slot. A slot goes back to the pool when the last
    tensor viewing it is freed, so a training loop that keeps tensors (a list of them, a ``.numpy()``
    view) makes the loader wait for a free slot -- it never grows. Copy (``.clone()``) what you keep.

    The loader's threads start when it is made. A process that forks afterwards (a DataLoader
    worker, multiprocessing's "fork") cannot use it in the child: iterating there raises an error.
    Ctrl-C interrupts a wait for a batch (KeyboardInterrupt).
    """

    def __init__(self, data, transforms=None, *, device="cpu", label_dtype=None, **settings):
        unknown = sorted(set(settings) - set(_DEFAULTS))
        if unknown:
            raise TypeError(f"stoke.Loader: no setting {', '.join(map(repr, unknown))}; it takes "
                            f"{', '.join(list(_DEFAULTS)[2:] + ['device', 'label_dtype'])}")
        settings.update(data=data, transforms=transforms)
        s = {d["name"]: _coerce(d, settings[d["name"]]) if d["name"] in settings else d["default"] for d in _DECLARED}
        # A named format may take paths that are not files (a plugin's); "auto" wants one, a pattern
        # or a URL (remote tar shards).
        data = s["data"]
        remote = data.startswith(("http://", "https://", "s3://"))
        if s["format"] in ("", "auto") and not remote and not os.path.exists(data) and "{" not in data and "*" not in data:
            raise FileNotFoundError(f"stoke.Loader: {data} does not exist (a folder of images, a file list, a pack "
                                    "or tar shards)")
        self._settings = s
        import torch

        self._label_dtype = torch.int64 if label_dtype is None else label_dtype
        if self._label_dtype not in (torch.int64, torch.int32):
            raise ValueError(f"stoke.Loader: label_dtype must be torch.int64 or torch.int32, not {label_dtype}")
        from torch.utils.dlpack import from_dlpack

        self._from_dlpack = from_dlpack  # torch's, looked up once rather than for every batch
        self._convert_labels = self._label_dtype != torch.int32
        self._to_device = _ToDevice(device) if str(device) != "cpu" else None
        s["normalize_on_device"] = _leave_normalize(s["normalize_on_device"], device)
        self._native = _native.NativeLoader(json.dumps(s))
        normalization = json.loads(self._native.normalization())
        self._normalize = _Normalize(normalization) if normalization is not None else None
        self._iterations = 0  # iterations begun: an older one that goes on raises

    def __len__(self):
        """Batches per epoch (this rank's share; skipped files can make an epoch shorter)."""
        return len(self._native)

    def __iter__(self):
        """One epoch: the one set_epoch() or load_state_dict() named, else the one after the last
        (an iteration left early counts as done, as a DataLoader iterator dropped). It begins at
        its first batch; a later iteration that begins ends it (its next() raises RuntimeError)."""
        return _Epoch(self)

    def _begin(self):
        if self._native is None:
            raise RuntimeError("stoke.Loader: this loader was closed")
        self._native.begin()
        self._iterations += 1
        return self._iterations

    def _next_batch(self):
        """The epoch's next batch, or None at its end."""
        if self._to_device is not None:
            self._to_device.retire()
        raw = self._native.next()
        if raw is None:
            return None
        names = raw.pop("names")
        epoch = raw.pop("epoch")
        address = raw.pop("address")
        block = raw.pop("block")
        fields = {name: self._to_torch(self._from_dlpack, name, capsule) for name, capsule in raw.items()}
        batch = Batch(fields, names, epoch, address)
        if self._to_device is not None:
            batch = self._to_device(batch, block)
        if self._normalize is not None:  # the images came as uint8 NHWC, to be normalized here
            batch.fields["images"] = self._normalize(batch.fields["images"])
        if self._convert_labels:
            fields = batch.fields
            fields["labels"] = fields["labels"].to(self._label_dtype)
        return batch

    def close(self):
        """Stops the loader's threads and frees its batch memory (what deleting it does). On CUDA it
        first waits for the copies in flight and unpins the slots. Tensors already yielded stay valid."""
        if self._to_device is not None:
            self._to_device.close()
        self._native = None

    def __del__(self):
        to_device = getattr(self, "_to_device", None)
        if to_device is not None:
            try:
                to_device.close()
            except Exception:  # noqa: BLE001 -- at interpreter exit torch's CUDA state may be gone
                pass

    @staticmethod
    def _to_torch(from_dlpack, name, capsule):
        try:
            return from_dlpack(capsule)
        except (RuntimeError, TypeError) as e:  # e.g. uint16 pixels, which torch before 2.3 lacks
            import torch

            raise TypeError(f"stoke.Loader: torch {torch.__version__} cannot take the batch's {name!r} field "
                            f"({e}); end the transforms with normalize (float32), or use a torch that has "
                            "the type") from e

    @property
    def batch_size(self):
        return self._settings["batch_size"]

    @property
    def shape(self):
        """The batches' shape, e.g. "64 x 3x224x224 nchw f32"; with normalize_on_device, the uint8
        batches the pipeline makes, then what the images become."""
        shape = self._native.shape()
        return shape if self._normalize is None else shape + ", images normalized to float32 NCHW on their device"

    def set_epoch(self, epoch):
        """The epoch the next iteration goes through, from its start (DistributedSampler's call)."""
        if epoch < 0:
            raise ValueError(f"stoke.Loader.set_epoch: epoch {epoch} is negative")
        self._native.set_epoch(int(epoch))

    def state_dict(self):
        """Where the loader stands, to resume exactly (the StatefulDataLoader contract): after the
        batches yielded so far in the current epoch, or at the next epoch's start."""
        epoch, position = self._native.position()
        s = self._settings
        return {"version": STATE_VERSION, "epoch": epoch, "position": position, "seed": s["seed"],
                "shuffle": s["shuffle"], "rank": s["rank"], "world": s["world"],
                "items_per_epoch": self._native.items_per_epoch()}

    def load_state_dict(self, state):
        """Resume from a state_dict(): the next iteration yields the rest of its epoch. Raises
        ValueError when the state belongs to another order (seed, shuffle, world, dataset size)."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"stoke.Loader.load_state_dict: state version {state.get('version')!r}, "
                             f"this loader reads {STATE_VERSION}")
        mine = self.state_dict()
        for key in ("seed", "shuffle", "rank", "world", "items_per_epoch"):
            if state[key] != mine[key]:
                raise ValueError(f"stoke.Loader.load_state_dict: the state has {key}={state[key]!r} but this loader "
                                 f"{key}={mine[key]!r}; resume with the same data and settings")
        self._native.seek(int(state["epoch"]), int(state["position"]))

    def stats(self):
        """A dict: the pipeline's stages (busy, starved, blocked seconds, threads), the bottleneck
        ("consumer" when batches wait for the training loop), the scheduler's moves
        ("decisions"), "skipped" (one per file and epoch) and "skipped_files" (each file once:
        {"file", "reason", "epochs"}, the epochs as set_epoch counts them), the seconds the loop
        waited for batches ("waited_s"), where the loader stands. Counted since the pipeline
        (re)started. Apart from the skipped files, "left_out" counts what the dataset left out when
        it opened (never read: a file outside a class folder, a tar member that is a link or whose
        .cls is not a number, a sample without an image, ...) and "left_out_files" lists the first
        100 of them ({"file", "reason"}). "network" (None for local data) says what remote shards
        cost: requests, retries, bytes, wait_s, the shard cache's hits, misses and bytes, and the shards
        streamed into memory (stream_shards, stream_peak_bytes, stream_budget)."""
        return json.loads(self._native.stats_json())

    def write_report(self, path):
        """stats() as a JSON file (written atomically)."""
        self._native.write_report(str(path))

    def __repr__(self):
        return f"stoke.Loader({self._settings['data']!r}, {self.shape}, {len(self)} batches per epoch)"


def _settings_doc():
    """The Args entries of the declared settings, for Loader's docstring."""
    lines = []
    for d in _DECLARED:
        lines += textwrap.wrap(f"{d['name']}: {d['doc']}", width=104, initial_indent=" " * 8,
                               subsequent_indent=" " * 12, break_on_hyphens=False)
    return "\n".join(lines)


def _signature():
    """Loader.__init__'s signature as help() and inspect show it: data and transforms, then every
    declared setting with its default, then the Python-side device and label_dtype."""
    assert [d["name"] for d in _DECLARED[:2]] == ["data", "transforms"], "the declaration starts with them"
    P = inspect.Parameter
    params = [P("self", P.POSITIONAL_OR_KEYWORD), P("data", P.POSITIONAL_OR_KEYWORD),
              P("transforms", P.POSITIONAL_OR_KEYWORD, default=None)]
    params += [P(d["name"], P.KEYWORD_ONLY, default=d["default"]) for d in _DECLARED[2:]]
    params += [P("device", P.KEYWORD_ONLY, default="cpu"), P("label_dtype", P.KEYWORD_ONLY, default=None)]
    return inspect.Signature(params)


if Loader.__doc__:  # not under python -OO
    Loader.__doc__ = Loader.__doc__.replace("{settings}", _settings_doc())
Loader.__init__.__signature__ = _signature()
