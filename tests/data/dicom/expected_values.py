#!/usr/bin/python3
"""Prints the expected values that tests/nodes/dicom_codec_test.cpp checks, computed by pydicom.

Run from this folder with Debian 12's pydicom 2.3.1, numpy 1.24 and Pillow 9.4
(apt-get install python3-pydicom python3-pil):
    /usr/bin/python3 expected_values.py

modality(file) is pydicom's apply_modality_lut(ds.pixel_array, ds) -- for MR_small_bits12.dcm after
masking to Bits Stored and sign-extending, which pydicom 2 leaves out (pydicom 3 does it). checksum
is sum(value[i] * (i % 1000 + 1)) over the array in C order (row, column, channel), as an integer
for integer arrays.
"""
import numpy as np
import pydicom
from pydicom.pixel_data_handlers.util import apply_modality_lut, convert_color_space

PIXELS = [(0, 0), (0, 127), (127, 0), (127, 127), (10, 20), (20, 10), (31, 64), (64, 31), (50, 50), (63, 63),
          (100, 3), (3, 100)]


def modality(path):
    ds = pydicom.dcmread(path)
    arr = ds.pixel_array
    if ds.BitsStored < ds.BitsAllocated:
        bits = ds.BitsStored
        arr = arr.astype(np.int64) & ((1 << bits) - 1)
        if ds.PixelRepresentation == 1:
            arr = (arr ^ (1 << (bits - 1))) - (1 << (bits - 1))
    return apply_modality_lut(arr, ds)


def checksum(arr):
    flat = arr.reshape(-1)
    flat = flat.astype(np.float64) if flat.dtype.kind == "f" else flat.astype(np.int64)
    weights = np.arange(flat.size) % 1000 + 1
    total = (flat * weights).sum()
    return float(total) if flat.dtype.kind == "f" else int(total)


def report(label, arr, pixels=()):
    print(f"{label}: shape {arr.shape} dtype {arr.dtype} min {arr.min()} max {arr.max()} sum {arr.sum()} "
          f"checksum {checksum(arr)}")
    if pixels:
        print("  " + ", ".join(f"({r}, {c}) {arr[r, c].tolist()}" for r, c in pixels))


report("CT_small.dcm", modality("CT_small.dcm"), PIXELS)
report("MR_small.dcm", modality("MR_small.dcm"), [(r % 64, c % 64) for r, c in PIXELS])
report("MR_small_bits12.dcm", modality("MR_small_bits12.dcm"), [(r % 64, c % 64) for r, c in PIXELS[:6]])
report("MR_small_rescale.dcm", modality("MR_small_rescale.dcm"), [(r % 64, c % 64) for r, c in PIXELS[:6]])
report("MR_small_modality_lut.dcm", modality("MR_small_modality_lut.dcm"), [(r % 64, c % 64) for r, c in PIXELS[:6]])
report("SC_rgb_rle.dcm", pydicom.dcmread("SC_rgb_rle.dcm").pixel_array, [(0, 0), (5, 50), (50, 5), (99, 99)])
report("SC_rgb_rle_16bit.dcm", pydicom.dcmread("SC_rgb_rle_16bit.dcm").pixel_array, [(0, 0), (5, 50), (50, 5), (99, 99)])
report("SC_rgb_small_odd.dcm", pydicom.dcmread("SC_rgb_small_odd.dcm").pixel_array)
report("ExplVR_BigEnd.dcm", pydicom.dcmread("ExplVR_BigEnd.dcm").pixel_array, [(0, 0), (30, 40), (59, 79)])
ybr = pydicom.dcmread("SC_ybr_full_422_uncompressed.dcm").pixel_array  # expanded to YBR_FULL by pydicom
report("SC_ybr_full_422_uncompressed.dcm as RGB", convert_color_space(ybr, "YBR_FULL", "RGB"), [(0, 0), (50, 50), (99, 99)])
report("SC_rgb_jpeg_dcmtk.dcm (Pillow)", pydicom.dcmread("SC_rgb_jpeg_dcmtk.dcm").pixel_array)
report("image_dfl.dcm", modality("image_dfl.dcm"), [(0, 0), (256, 256), (100, 400)])
report("liver_1frame.dcm", modality("liver_1frame.dcm"), [(0, 0), (256, 256)])
report("rtdose.dcm frame 0", modality("rtdose.dcm")[0], [(0, 0), (5, 5), (9, 9)])
