// nn's safetensors checkpoints: round trips of every dtype (scalars and empty tensors
// included) and of metadata, the exact bytes of a tiny file, the atomic write, argument errors,
// corrupt inputs (each with its message, and none crashing), and an independent reader in Python
// (scripts/read_safetensors.py) agreeing on the values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <stoke/gpu/dtype.hpp>
#include <stoke/nn/safetensors.hpp>
#include <string>
#include <vector>

#include "../gpu/expect_throw.hpp"
#include "temp_folder.hpp"

namespace stoke::nn {
namespace {

namespace fs = std::filesystem;

template <class T>
std::vector<std::byte> as_bytes(const std::vector<T>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(T));
  if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::vector<std::byte> as_bytes(std::string_view text) {
  std::vector<std::byte> bytes(text.size());
  if (!bytes.empty()) std::memcpy(bytes.data(), text.data(), text.size());
  return bytes;
}

std::vector<std::uint16_t> halves(const std::vector<float>& values, std::uint16_t (*convert)(float)) {
  std::vector<std::uint16_t> out;
  for (const float v : values) out.push_back(convert(v));
  return out;
}

// A file with a tensor of every dtype, a scalar, empty tensors and a name that needs escaping.
SafetensorsFile sample_file() {
  SafetensorsFile file;
  file.tensors.push_back({.name = "fc.weight",
                          .dtype = DType::f32,
                          .shape = {2, 3},
                          .data = as_bytes(std::vector<float>{1.5f, -2.25f, 3.0e-7f, 65504.0f, -0.0f, 1e30f})});
  file.tensors.push_back({.name = "fc.bias",
                          .dtype = DType::f16,
                          .shape = {4},
                          .data = as_bytes(halves({1.0f, -2.0f, 0.333251953125f, 6.103515625e-5f}, f16_from_float))});
  file.tensors.push_back({.name = "emb",
                          .dtype = DType::bf16,
                          .shape = {2, 2},
                          .data = as_bytes(halves({1.0f, -3.5f, 0.0078125f, 256.0f}, bf16_from_float))});
  file.tensors.push_back(
      {.name = "lut", .dtype = DType::u8, .shape = {3}, .data = as_bytes(std::vector<std::uint8_t>{0, 7, 255})});
  file.tensors.push_back(
      {.name = "step.scale", .dtype = DType::f32, .shape = {}, .data = as_bytes(std::vector<float>{0.125f})});
  file.tensors.push_back({.name = "labels",
                          .dtype = DType::i32,
                          .shape = {2},
                          .data = as_bytes(std::vector<std::int32_t>{-7, 2147483647})});
  file.tensors.push_back({.name = "empty", .dtype = DType::f16, .shape = {0, 5}, .data = {}});
  file.tensors.push_back({.name = "empty.u8", .dtype = DType::u8, .shape = {0}, .data = {}});
  file.tensors.push_back({.name = "quote\"back\\slash\ttab \xc3\xa9",  // é in UTF-8
                          .dtype = DType::bf16,
                          .shape = {1, 1, 1},
                          .data = as_bytes(halves({-1.0f}, bf16_from_float))});
  return file;
}

// A fresh folder per test, removed afterwards.
class SafetensorsFiles : public testing::TempFolderTest {};

std::vector<std::byte> read_all(const fs::path& path) {
  std::vector<std::byte> bytes(fs::file_size(path));
  std::ifstream(path, std::ios::binary)
      .read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

using stoke::gpu::test::expect_throw_mentioning;

TEST_F(SafetensorsFiles, EveryDtypeRoundTrips) {
  const SafetensorsFile file = sample_file();
  const fs::path path = dir_ / "model.safetensors";
  write_safetensors(path, file);
  const SafetensorsFile back = read_safetensors(path);
  ASSERT_EQ(back.tensors.size(), file.tensors.size());
  for (std::size_t i = 0; i < file.tensors.size(); ++i) {
    EXPECT_EQ(back.tensors[i], file.tensors[i]) << "tensor " << i << " '" << file.tensors[i].name << "'";
  }
  EXPECT_TRUE(back.metadata.empty());
  EXPECT_EQ(decode_safetensors(encode_safetensors(file), "memory"), file);
}

TEST_F(SafetensorsFiles, MetadataRoundTrips) {
  SafetensorsFile file = sample_file();
  file.metadata = {{"format", "pt"}, {"step", "1200"}, {"note", "tab\there \"q\" \\ \x01 \xc3\xbc"}, {"", ""}};
  const fs::path path = dir_ / "with_metadata.safetensors";
  write_safetensors(path, file);
  EXPECT_EQ(read_safetensors(path), file);

  SafetensorsFile only_metadata;
  only_metadata.metadata["k"] = "v";
  EXPECT_EQ(decode_safetensors(encode_safetensors(only_metadata), "memory"), only_metadata);
  EXPECT_EQ(decode_safetensors(encode_safetensors(SafetensorsFile{}), "memory"), SafetensorsFile{});
}

TEST(Safetensors, TinyFileHasTheExactBytes) {
  SafetensorsFile file;
  file.metadata["k"] = "v";
  file.tensors.push_back({.name = "a", .dtype = DType::u8, .shape = {2}, .data = {std::byte{1}, std::byte{2}}});
  // The JSON is 78 bytes: {"__metadata__":{"k":"v"}, is 26, "a": 4, {"dtype":"U8", 14, "shape":[2], 12,
  // "data_offsets":[0,2]} 21, the closing } 1; two spaces pad it to 80 = 0x50.
  const std::string json = R"({"__metadata__":{"k":"v"},"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})"
                           "  ";
  ASSERT_EQ(json.size(), 80u);
  std::vector<std::byte> expected = {std::byte{0x50}, {}, {}, {}, {}, {}, {}, {}};
  for (const char ch : json) expected.push_back(static_cast<std::byte>(ch));
  expected.push_back(std::byte{1});
  expected.push_back(std::byte{2});
  EXPECT_EQ(encode_safetensors(file), expected);
}

TEST(Safetensors, ControlCharactersAreWrittenAsUnicodeEscapes) {
  // Checkpoints keep lists one entry per line (the class names): every control character is
  // written \u00xx, as stoke's first checkpoints have it, never \n or \t, so the bytes of a
  // checkpoint do not change with the JSON library that writes them.
  SafetensorsFile file;
  file.metadata["k"] = "a\nb\tc\x01\"\\/\b\f\r\x7f";
  const std::vector<std::byte> bytes = encode_safetensors(file);
  const std::string json(reinterpret_cast<const char*>(bytes.data() + 8), bytes.size() - 8);
  std::string expected = R"({"__metadata__":{"k":"a\u000ab\u0009c\u0001\"\\/\u0008\u000c\u000d)"
                         "\x7f\"}}";
  expected.append((8 - expected.size() % 8) % 8, ' ');
  EXPECT_EQ(json, expected);
  EXPECT_EQ(decode_safetensors(bytes, "memory"), file);
}

TEST(Safetensors, EmptyFileIsAnEmptyObject) {
  // {} padded to 8: 2 + 6 spaces.
  const std::vector<std::byte> bytes = encode_safetensors(SafetensorsFile{});
  ASSERT_EQ(bytes.size(), 16u);
  EXPECT_EQ(bytes[0], std::byte{8});
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data() + 8), 8), "{}      ");
}

TEST_F(SafetensorsFiles, WriteLeavesNoTemporaryFileAndReplacesTheOld) {
  const fs::path path = dir_ / "model.safetensors";
  SafetensorsFile first;
  first.metadata["version"] = "1";
  write_safetensors(path, first);
  write_safetensors(path, sample_file());  // over the old one
  EXPECT_EQ(read_safetensors(path), sample_file());
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"model.safetensors"});
}

TEST_F(SafetensorsFiles, FailedWriteNamesThePathAndLeavesNoFile) {
  const fs::path path = dir_ / "missing" / "model.safetensors";
  expect_throw_mentioning<std::runtime_error>([&] { write_safetensors(path, sample_file()); },
                                              (dir_ / "missing" / "model.safetensors.tmp").string());
  expect_throw_mentioning<std::runtime_error>([&] { write_safetensors(path, sample_file()); }, std::strerror(ENOENT));
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(SafetensorsFiles, BadArgumentsThrowNamingTheTensorAndWriteNothing) {
  const fs::path path = dir_ / "model.safetensors";
  const auto expect_invalid = [&](const TensorRecord& bad, const std::string& fragment) {
    SafetensorsFile file = sample_file();
    file.tensors.push_back(bad);
    expect_throw_mentioning<std::invalid_argument>([&] { write_safetensors(path, file); }, fragment);
    EXPECT_TRUE(fs::is_empty(dir_));
  };
  expect_invalid({.name = "w", .dtype = DType::f32, .shape = {2, 3}, .data = std::vector<std::byte>(12)},
                 "tensor 'w': data holds 12 bytes but f32 [2, 3] needs 24");
  expect_invalid({.name = "w", .dtype = DType::f16, .shape = {}, .data = {}}, "tensor 'w': data holds 0 bytes");
  expect_invalid({.name = "w", .dtype = DType::u8, .shape = {-1}, .data = {}}, "tensor 'w': dimension -1");
  expect_invalid({.name = "fc.bias", .dtype = DType::u8, .shape = {0}, .data = {}},
                 "'fc.bias': the name appears twice");
  expect_invalid({.name = "", .dtype = DType::u8, .shape = {0}, .data = {}}, "empty name");
  expect_invalid({.name = "__metadata__", .dtype = DType::u8, .shape = {0}, .data = {}}, "reserved");
  expect_invalid({.name = "bad\xff", .dtype = DType::u8, .shape = {0}, .data = {}}, "not valid UTF-8");
  const std::int64_t big = std::int64_t{1} << 40;
  expect_invalid({.name = "huge", .dtype = DType::f32, .shape = {big, big}, .data = {}}, "needs more than 2^64");
}

// ---- corrupt input

// 8-byte length (the JSON's own unless given), the JSON, the data.
std::vector<std::byte> file_bytes(std::string_view json, std::size_t data_bytes = 0,
                                  std::uint64_t length = std::numeric_limits<std::uint64_t>::max()) {
  if (length == std::numeric_limits<std::uint64_t>::max()) length = json.size();
  std::vector<std::byte> bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<std::byte>((length >> (8 * i)) & 0xff));
  const std::vector<std::byte> text = as_bytes(json);
  bytes.insert(bytes.end(), text.begin(), text.end());
  bytes.resize(bytes.size() + data_bytes, std::byte{0x5a});
  return bytes;
}

// Decoding throws runtime_error whose message starts with the file's name and mentions `fragment`.
void expect_corrupt(const std::vector<std::byte>& bytes, const std::string& fragment) {
  try {
    (void)decode_safetensors(bytes, "model.safetensors");
    ADD_FAILURE() << "no exception; expected one mentioning '" << fragment << "'";
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.rfind("model.safetensors: ", 0), 0u) << "message '" << message << "' does not name the file";
    EXPECT_NE(message.find(fragment), std::string::npos)
        << "message '" << message << "' does not mention '" << fragment << "'";
  }
}

TEST(SafetensorsCorrupt, HeaderLength) {
  expect_corrupt(std::vector<std::byte>(5), "5 bytes is too short");
  expect_corrupt(file_bytes("{}", 0, 1000), "header length 1000 runs past the end of the file (10 bytes)");
  expect_corrupt(file_bytes("{}", 0, 11), "header length 11 runs past the end");
  expect_corrupt(file_bytes("{}", 0, std::uint64_t{1} << 63), "exceeds the 104857600-byte limit");
  expect_corrupt(file_bytes("{}", 0, ~std::uint64_t{0} - 1), "exceeds");
  // A length that cuts the JSON short.
  expect_corrupt(file_bytes(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 2, 20),
                 "header JSON at byte 20");
  expect_corrupt(file_bytes("", 0), "header JSON at byte 0: expected '{' at the start of the header, found the end");
}

TEST(SafetensorsCorrupt, BadJson) {
  const auto tensor = [](std::string_view inside) { return R"({"a":{)" + std::string(inside) + "}}"; };
  expect_corrupt(file_bytes("[1]"), "expected '{' at the start of the header, found '['");
  expect_corrupt(file_bytes(R"({"a" 1})"), "expected ':' after 'a'");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},})"), "expected a string");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}} x)"), "unexpected text after");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]})"), "expected '}'");
  expect_corrupt(file_bytes(R"({"a)"), "a string is not closed");
  expect_corrupt(file_bytes(tensor(R"("dtype":"U8","shape":[-1],"data_offsets":[0,0])")), "non-negative integer");
  expect_corrupt(file_bytes(tensor(R"("dtype":"U8","shape":[1.5],"data_offsets":[0,0])")), "fraction or exponent");
  expect_corrupt(file_bytes(tensor(R"("dtype":"U8","shape":[01],"data_offsets":[0,0])")), "leading zero");
  expect_corrupt(file_bytes(tensor(R"("dtype":"U8","shape":[99999999999999999999],"data_offsets":[0,0])")),
                 "too large");
  expect_corrupt(file_bytes(tensor(R"("dtype":"U8","shape":[9223372036854775808, 0],"data_offsets":[0,0])")),
                 "dimension 9223372036854775808 in its shape is too large");
  expect_corrupt(file_bytes(tensor(R"("dtype":U8,"shape":[0],"data_offsets":[0,0])")), "expected a string");
  expect_corrupt(file_bytes(tensor(R"("dtype":"U8","shape":[0],"data_offsets":[0])")), "must be [begin, end], got 1");
  expect_corrupt(file_bytes(tensor(R"("dtype":"U8","shape":[0])")), "tensor 'a': missing data_offsets");
  expect_corrupt(file_bytes(tensor(R"("dtype":"U8","dtype":"U8","shape":[0],"data_offsets":[0,0])")),
                 "the key 'dtype' appears twice");
  expect_corrupt(file_bytes(tensor(R"("dtype":"U8","shape":[0],"data_offsets":[0,0],"x":1)")), "unknown key 'x'");
  expect_corrupt(file_bytes(R"({"a\q":{}})"), "unknown escape '\\q'");
  expect_corrupt(file_bytes(R"({"a\u12":{}})"), "four hex digits");
  expect_corrupt(file_bytes(R"({"a\udc00":{}})"), "lone low surrogate");
  expect_corrupt(file_bytes(R"({"a\ud800x":{}})"), "lone high surrogate");
  expect_corrupt(file_bytes("{\"a\xff\":{}}"), "not valid UTF-8");
  expect_corrupt(file_bytes("{\"a\nb\":{}}"), "control character");
  expect_corrupt(file_bytes(R"({"__metadata__":{"k":1}})"), "expected a string (__metadata__ 'k' must be a string)");
  expect_corrupt(file_bytes(R"({"__metadata__":{"k":"1","k":"2"}})"), "__metadata__ has the key 'k' twice");
  expect_corrupt(file_bytes(R"({"__metadata__":[]})"), "expected '{' to open __metadata__");
  // A number where an object belongs is refused as soon as it is read, leading zero or not.
  expect_corrupt(file_bytes(R"({"__metadata__":01})"), "expected '{' to open __metadata__, found a number");
  expect_corrupt(file_bytes(R"({"a":1})"), "expected '{' to open tensor 'a', found a number");
}

TEST(SafetensorsCorrupt, EscapesDecode) {
  // \u escapes, a surrogate pair among them, and \/ decode to the name's UTF-8.
  const SafetensorsFile file = decode_safetensors(
      file_bytes(R"({"\u00e9\ud83d\ude00\/\n":{"dtype":"U8","shape":[],"data_offsets":[0,1]}})", 1), "memory");
  ASSERT_EQ(file.tensors.size(), 1u);
  EXPECT_EQ(file.tensors[0].name, "\xc3\xa9\xf0\x9f\x98\x80/\n");
}

TEST(SafetensorsCorrupt, UnknownDtypeNamesTheTensor) {
  expect_corrupt(file_bytes(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8),
                 "tensor 'w': dtype 'F64' is not supported (stoke reads F32, F16, BF16 and U8)");
}

TEST(SafetensorsCorrupt, Offsets) {
  expect_corrupt(file_bytes(R"({"fc.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,12]}})", 12),
                 "tensor 'fc.weight': data_offsets [0, 12] hold 12 bytes but F32 [2, 3] needs 24");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                            R"("b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})",
                            4),
                 "tensor 'b': data_offsets [1, 3] overlap tensor 'a''s [0, 2]");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                            R"("b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})",
                            4),
                 "overlap");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"U8","shape":[100],"data_offsets":[0,100]}})", 4),
                 "tensor 'a': data_offsets [0, 100] run past the end of the data (4 bytes)");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[18446744073709551615,1]}})", 4),
                 "end before they begin");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 4),
                 "bytes [2, 4) of the data belong to no tensor");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", 4),
                 "bytes [0, 2) of the data belong to no tensor");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
                 "too many elements");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},)"
                            R"("a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})"),
                 "the name 'a' appears twice");
  expect_corrupt(file_bytes(R"({"__metadata__":{},"__metadata__":{}})"), "the name '__metadata__' appears twice");
}

TEST(SafetensorsCorrupt, OutOfOrderOffsetsAreFineAndComeBackInByteOrder) {
  const SafetensorsFile file = decode_safetensors(file_bytes(R"({"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},)"
                                                             R"("e":{"dtype":"F32","shape":[0],"data_offsets":[2,2]},)"
                                                             R"("a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
                                                             2),
                                                  "memory");
  ASSERT_EQ(file.tensors.size(), 3u);
  EXPECT_EQ(file.tensors[0].name, "a");
  EXPECT_EQ(file.tensors[1].name, "b");
  EXPECT_EQ(file.tensors[2].name, "e");
}

TEST_F(SafetensorsFiles, ReadNamesTheFile) {
  const fs::path path = dir_ / "model.safetensors";
  expect_throw_mentioning<std::runtime_error>([&] { (void)read_safetensors(path); }, path.string() + ": cannot open");
  write_safetensors(path, sample_file());
  // Cut the file short: the header's length now runs past the end, or the data is short.
  const std::vector<std::byte> bytes = read_all(path);
  for (const std::size_t keep : {std::size_t{3}, std::size_t{40}, bytes.size() - 1}) {
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(keep));
    expect_throw_mentioning<std::runtime_error>([&] { (void)read_safetensors(path); }, path.string() + ": ");
  }
}

// Every truncation and many single-byte changes of a valid file either decode or throw
// runtime_error: never a crash, a hang or another exception (run under ASan to see reads past the end).
TEST(SafetensorsCorrupt, MutationsNeverCrash) {
  SafetensorsFile small;
  small.metadata["k"] = "v\u00e9";
  small.tensors.push_back({.name = "a", .dtype = DType::f16, .shape = {2}, .data = std::vector<std::byte>(4)});
  small.tensors.push_back({.name = "b", .dtype = DType::u8, .shape = {}, .data = std::vector<std::byte>(1)});
  small.tensors.push_back({.name = "c", .dtype = DType::f32, .shape = {0, 3}, .data = {}});
  const std::vector<std::byte> good = encode_safetensors(small);
  const auto try_decode = [](const std::vector<std::byte>& bytes) {
    try {
      (void)decode_safetensors(bytes, "fuzz");
    } catch (const std::runtime_error&) {
    }
  };
  for (std::size_t keep = 0; keep < good.size(); ++keep) {
    try_decode(std::vector<std::byte>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(keep)));
  }
  for (std::size_t i = 0; i < good.size(); ++i) {
    for (const int value : {0x00, 0xff, 0x80, int{'"'}, int{'\\'}, int{'{'}, int{'}'}, int{'['}, int{']'}, int{','},
                            int{':'}, int{'9'}, int{'0'}, int{'u'}, int{' '}}) {
      std::vector<std::byte> bytes = good;
      bytes[i] = static_cast<std::byte>(value);
      try_decode(bytes);
    }
  }
}

// ---- an independent reader

#ifndef STOKE_READ_SAFETENSORS_SCRIPT
#error "tests/gpu/CMakeLists.txt defines STOKE_READ_SAFETENSORS_SCRIPT (scripts/read_safetensors.py)"
#endif

std::string run_and_capture(const std::string& command) {
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return output;
  char buffer[4096];
  std::size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, got);
  const int status = ::pclose(pipe);
  if (status != 0) output += "\n(exit status " + std::to_string(status) + ")";
  return output;
}

std::vector<float> values_of(const TensorRecord& t) {
  std::vector<float> values;
  const std::size_t count = t.data.size() / element_size(t.dtype);
  for (std::size_t i = 0; i < count; ++i) {
    const std::byte* p = t.data.data() + i * element_size(t.dtype);
    if (t.dtype == DType::u8) {
      values.push_back(static_cast<float>(std::to_integer<std::uint8_t>(*p)));
    } else if (t.dtype == DType::f32) {
      float v = 0;
      std::memcpy(&v, p, 4);
      values.push_back(v);
    } else if (t.dtype == DType::i32) {
      std::int32_t v = 0;
      std::memcpy(&v, p, 4);
      values.push_back(static_cast<float>(v));
    } else {
      std::uint16_t bits = 0;
      std::memcpy(&bits, p, 2);
      values.push_back(t.dtype == DType::f16 ? float_from_f16(bits) : float_from_bf16(bits));
    }
  }
  return values;
}

TEST_F(SafetensorsFiles, PythonReaderSeesTheSameValues) {
  if (std::system("python3 -c 'import json, struct' > /dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  SafetensorsFile file = sample_file();
  file.tensors.pop_back();  // its name holds a tab, the script's separator
  file.metadata["step"] = "7";
  const fs::path path = dir_ / "model.safetensors";
  write_safetensors(path, file);
  const std::string output =
      run_and_capture("python3 '" STOKE_READ_SAFETENSORS_SCRIPT "' '" + path.string() + "' 2>&1");

  std::istringstream lines(output);
  std::string line;
  ASSERT_TRUE(std::getline(lines, line)) << output;
  EXPECT_EQ(line, "# step=7");
  for (const TensorRecord& t : file.tensors) {
    ASSERT_TRUE(std::getline(lines, line)) << "no line for '" << t.name << "' in:\n" << output;
    std::istringstream fields(line);
    std::string name, dtype, shape, values;
    std::getline(fields, name, '\t');
    std::getline(fields, dtype, '\t');
    std::getline(fields, shape, '\t');
    std::getline(fields, values);
    EXPECT_EQ(name, t.name);
    EXPECT_EQ(dtype, safetensors_dtype_name(t.dtype));
    std::string expected_shape;
    for (std::size_t i = 0; i < t.shape.size(); ++i) expected_shape += (i ? "," : "") + std::to_string(t.shape[i]);
    EXPECT_EQ(shape, expected_shape) << t.name;
    std::istringstream numbers(values);
    std::vector<float> seen;
    for (std::string number; numbers >> number;)
      seen.push_back(static_cast<float>(std::strtod(number.c_str(), nullptr)));
    EXPECT_EQ(seen, values_of(t)) << t.name << ": " << line;
  }
  EXPECT_FALSE(std::getline(lines, line)) << "unexpected: " << line;
}

}  // namespace
}  // namespace stoke::nn
