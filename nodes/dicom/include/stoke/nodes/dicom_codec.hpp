// dicom_codec: DICOM (medical images: CT, MR, X-ray, ...) for stoke, through DCMTK.
//
//   std::vector<std::byte> bytes = ...;                        // a whole DICOM Part 10 file
//   stoke::nodes::DicomInfo info = stoke::nodes::probe_dicom(bytes, "ct/0001.dcm");
//   cv::Mat hu = stoke::nodes::decode_dicom(bytes, "ct/0001.dcm");   // CT: Hounsfield units
//
// Part of the optional target stoke::dicom (link it; it exists when DCMTK does, see the top-level
// option STOKE_DICOM).
#pragma once

#include <cstddef>
#include <opencv2/core/mat.hpp>
#include <span>
#include <string>

#include "stoke/nodes/decode.hpp"

namespace stoke::nodes {

/// What a DICOM file's header says about its first frame.
struct DicomInfo {
  int width = 0;     ///< Columns, pixels
  int height = 0;    ///< Rows, pixels
  int channels = 0;  ///< Samples per Pixel: 1 (grayscale, palette) or 3 (colour)
  int frames = 1;    ///< Number of Frames (1 when absent)
  int bits_allocated = 0;  ///< bits per stored sample (1, 8, 16 or 32)
  int bits_stored = 0;     ///< significant bits of a sample (<= bits_allocated)
  bool is_signed = false;  ///< Pixel Representation 1: samples are two's complement
  double slope = 1;        ///< Rescale Slope (1 when absent)
  double intercept = 0;    ///< Rescale Intercept (0 when absent); CT: Hounsfield units = stored * slope + intercept
  std::string photometric;      ///< Photometric Interpretation as stored: "MONOCHROME2", "RGB", "YBR_FULL_422", ...
  std::string transfer_syntax;  ///< the Transfer Syntax UID, e.g. "1.2.840.10008.1.2.1" (explicit VR little endian)
  std::string modality;         ///< "CT", "MR", "CR", ... ("" when absent)
};

/// True for DICOM Part 10 bytes: a 128-byte preamble followed by "DICM". Files without it (bare
/// data sets, as some old archives hold) are not recognised, and decode_dicom refuses them.
bool looks_like_dicom(std::span<const std::byte> bytes) noexcept;

/// The header fields of `bytes` (a DICOM Part 10 file in memory), without decoding the Pixel
/// Data: the file is parsed (its elements copied out of `bytes`), nothing is decompressed. `name`
/// names the file in messages. It does not check that decode_dicom can decode the file
/// (transfer_syntax may be JPEG 2000, which it cannot), and a file cut or damaged inside its Pixel
/// Data still probes. Throws DecodeError naming the file when the bytes are not DICOM Part 10, the
/// header is damaged or truncated, or Rows, Columns or Samples per Pixel are missing or zero.
/// Thread-safe, like decode_dicom.
DicomInfo probe_dicom(std::span<const std::byte> bytes, const std::string& name);

/// The first frame of `bytes` (a DICOM Part 10 file in memory; nothing is written to disk) as
/// *modality* values: the stored samples masked to Bits Stored and sign-extended when Pixel
/// Representation is 1, then mapped by the Modality LUT Sequence if there is one, else by Rescale
/// Slope and Intercept if both are present (CT: Hounsfield units). These are exactly the values of
/// pydicom's `apply_modality_lut(ds.pixel_array, ds)` (pydicom 3 masks to Bits Stored; pydicom 2
/// does not, which matters only for files with garbage above Bits Stored). No VOI LUT or window
/// is applied, and MONOCHROME1 is not inverted: larger values are what the modality measured
/// more of, whatever the display convention.
///
/// Grayscale result (Samples per Pixel 1), a new h x w matrix the caller owns:
/// - a Modality LUT: CV_8UC1 for an 8-bit LUT, else CV_16UC1 (the LUT's entries);
/// - a rescale with integer slope and intercept whose every result fits in 16 bits signed:
///   CV_16SC1 (so the type can differ between two files of one CT series; convert with
///   cv::Mat::convertTo where one type is needed);
/// - no rescale (absent, or slope 1 and intercept 0): CV_8UC1 for unsigned 8-bit and for 1-bit
///   samples (0 or 1), CV_16UC1 for unsigned 16-bit, CV_16SC1 for signed 8- or 16-bit;
/// - otherwise CV_32FC1: the result computed in double, then rounded to float (32-bit samples
///   above 2^24 lose their low bits).
/// PALETTE COLOR images give their palette indices, as pydicom's pixel_array does.
/// Colour result (Samples per Pixel 3): RGB order (not OpenCV's BGR), CV_8UC3 for 8-bit samples
/// and CV_16UC3 for 16-bit ones; RGB is returned as stored, YBR_FULL and YBR_FULL_422 are
/// converted to RGB (PS3.3 C.7.6.3.1.2), and JPEG-compressed colour comes out as RGB. No rescale is
/// applied to colour.
///
/// Transfer syntaxes: implicit and explicit VR little endian, explicit VR big endian, deflated
/// explicit VR little endian, RLE lossless, JPEG baseline, extended and lossless (processes 1, 2/4
/// and 14, through DCMTK's dcmjpeg) and JPEG-LS lossless and near-lossless (dcmjpls). JPEG 2000,
/// HTJ2K, MPEG and other video syntaxes are refused with a DecodeError naming the syntax (DCMTK's
/// free edition has no JPEG 2000 decoder; convert such files first, e.g. `gdcmconv --raw`).
///
/// Throws DecodeError naming the file ("<name>: DICOM: <reason>") when the bytes are not DICOM
/// Part 10, are damaged or truncated, have no Pixel Data, zero Rows or Columns, an unsupported
/// transfer syntax or sample layout, or more than 64,000,000 pixels in a frame (checked from the
/// header before anything image-sized is allocated).
///
/// Thread-safe: any number of threads may decode different (or the same) bytes at once. DCMTK's
/// decompression codecs are registered once, on the first call, with their default options;
/// stoke never unregisters them. DCMTK logs parse errors of damaged files to its logger
/// (stderr by default) before this throws; configure DCMTK's oflog to silence it.
cv::Mat decode_dicom(std::span<const std::byte> bytes, const std::string& name);

/// decode_dicom as an OtherFormatDecoder, for DecodeOptions::other_formats with
/// DecodeOptions::color = DecodeColor::keep (the modality values are not 8-bit RGB): a Decoder
/// then decodes DICOM files like any image, crops and regions included. Bytes that are not DICOM
/// go to `others` (opencv_codec(DecodeColor::keep), say), or without it are a DecodeError.
///
///   stoke::nodes::Decoder decoder({.other_formats = stoke::nodes::dicom_codec(),
///                                  .color = stoke::nodes::DecodeColor::keep});
///
/// Thread-safe when `others` is.
OtherFormatDecoder dicom_codec(OtherFormatDecoder others = {});

}  // namespace stoke::nodes
