#!/usr/bin/env python3
"""Print the tensors of a safetensors file, one per line, without numpy or safetensors.

    python3 scripts/read_safetensors.py model.safetensors

Each line is tab-separated: name, dtype, shape (comma-separated, empty for a scalar), then the
values separated by spaces (floats as Python's repr, which reads back exactly). Lines starting
with "# " give the metadata. An independent check of stoke's writer (gpu/src/nn/safetensors.cpp):
tests/nn/safetensors_test.cpp runs it and compares the values.
"""
import json
import struct
import sys

# dtype -> (bytes per element, how to turn the little-endian bytes into Python numbers)
def _bf16(raw):
    # bfloat16 is the top half of a float32: shift it back into place.
    halves = struct.unpack("<%dH" % (len(raw) // 2), raw)
    return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]

FORMATS = {
    "F32": (4, lambda raw: list(struct.unpack("<%df" % (len(raw) // 4), raw))),
    "F16": (2, lambda raw: list(struct.unpack("<%de" % (len(raw) // 2), raw))),
    "BF16": (2, _bf16),
    "U8": (1, lambda raw: list(raw)),
    "I32": (4, lambda raw: list(struct.unpack("<%di" % (len(raw) // 4), raw))),
}


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    metadata = header.pop("__metadata__", {})
    tensors = []
    for name, info in header.items():
        begin, end = info["data_offsets"]
        size, decode = FORMATS[info["dtype"]]
        count = 1
        for dim in info["shape"]:
            count *= dim
        if end - begin != count * size:
            raise ValueError("%s: tensor %r: %d bytes for %s %s" % (path, name, end - begin, info["dtype"], info["shape"]))
        tensors.append((begin, name, info["dtype"], info["shape"], decode(data[begin:end])))
    tensors.sort(key=lambda t: t[0])
    return metadata, tensors


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: read_safetensors.py FILE")
    metadata, tensors = read(sys.argv[1])
    for key in sorted(metadata):
        print("# %s=%s" % (key, metadata[key]))
    for _, name, dtype, shape, values in tensors:
        print("%s\t%s\t%s\t%s" % (name, dtype, ",".join(str(d) for d in shape), " ".join(repr(v) for v in values)))


if __name__ == "__main__":
    main()
