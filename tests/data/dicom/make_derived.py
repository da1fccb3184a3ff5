#!/usr/bin/python3
"""Writes the derived test files of tests/data/dicom from pydicom's MR_small.dcm.

Run from this folder with Debian 12's pydicom 2.3.1 and numpy 1.24 (apt-get install python3-pydicom):
    /usr/bin/python3 make_derived.py
Each file is MR_small.dcm (64x64, signed 16-bit, values 127..2145) with one thing changed:

  MR_small_bits12.dcm        Bits Stored 12, High Bit 11: the low 12 bits of each sample are MR_small's,
                             bits 12..15 are random garbage a reader must mask off (then sign-extend
                             bit 11, as Pixel Representation is 1).
  MR_small_rescale.dcm       Rescale Slope 0.5, Rescale Intercept -3.25: non-integer modality values.
  MR_small_modality_lut.dcm  a Modality LUT Sequence: 1800 entries for stored values from 200 up,
                             16 bits, entry i = (37 * i) % 65536.
"""
import numpy as np
import pydicom
from pydicom.dataset import Dataset
from pydicom.sequence import Sequence

source = pydicom.dcmread("MR_small.dcm")
values = source.pixel_array.astype(np.int64)

ds = pydicom.dcmread("MR_small.dcm")
garbage = np.random.default_rng(7).integers(0, 16, values.shape)
ds.BitsStored = 12
ds.HighBit = 11
ds.PixelData = ((values & 0xFFF) | (garbage << 12)).astype("<u2").tobytes()
ds.save_as("MR_small_bits12.dcm")

ds = pydicom.dcmread("MR_small.dcm")
ds.RescaleSlope = "0.5"
ds.RescaleIntercept = "-3.25"
ds.RescaleType = "US"
ds.save_as("MR_small_rescale.dcm")

ds = pydicom.dcmread("MR_small.dcm")
item = Dataset()
item.add_new(0x00283002, "US", [1800, 200, 16])  # LUT Descriptor
item.ModalityLUTType = "US"
item.add_new(0x00283006, "US", [(37 * i) % 65536 for i in range(1800)])  # LUT Data
ds.ModalityLUTSequence = Sequence([item])
ds.save_as("MR_small_modality_lut.dcm")
