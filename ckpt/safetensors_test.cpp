#include "ckpt/safetensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "core/dtype.h"
#include "tests/gradcheck.h"
#include "tests/testing.h"

namespace dt::ckpt {
namespace {

using testing::OwnedTensor;
using testing::TempDir;
using testing::zeros;

// Writes a safetensors file byte by byte: header length, `header` text, then `data_bytes` bytes.
void write_raw(const std::string& path, const std::string& header, size_t data_bytes) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t length = header.size();
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << header << std::string(data_bytes, '\0');
}

// The dt::Error message of opening `path` and reading tensor "x" as f32 (2, 3); "" if none.
std::string error_reading(const std::string& path) {
  try {
    const SafetensorsReader reader(path);
    OwnedTensor x = zeros(DType::f32, {2, 3});
    reader.read_into("x", x.t);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

constexpr const char* kGoodX = R"({"x":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";

struct Sample {
  OwnedTensor ramp = zeros(DType::f32, {3, 5});
  OwnedTensor ids = zeros(DType::i32, {7});
  OwnedTensor wide = zeros(DType::f64, {2});
  Sample() {
    for (int i = 0; i < 15; ++i) ramp.ptr<float>()[i] = static_cast<float>(i) / 4;
    for (int i = 0; i < 7; ++i) ids.ptr<int32_t>()[i] = i - 3;
    wide.ptr<double>()[0] = 1.0 / 3;
    wide.ptr<double>()[1] = -2.5e300;
  }
  void add_to(SafetensorsWriter& writer) const {
    writer.add("ramp", ramp.t);
    writer.add("ids", ids.t);
    writer.add("wide", wide.t);
  }
};

TEST(Safetensors, RoundTripKeepsEveryByteShapeDtypeAndOrder) {
  TempDir dir;
  const Sample sample;
  OwnedTensor half = zeros(DType::bf16, {2, 2});
  for (int i = 0; i < 4; ++i) half.ptr<uint16_t>()[i] = float_to_bf16(1.5f * static_cast<float>(i) - 1);
  const OwnedTensor empty = zeros(DType::f32, {0, 4});
  OwnedTensor scalar = zeros(DType::f32, {});
  scalar.ptr<float>()[0] = 42;

  SafetensorsWriter writer;
  sample.add_to(writer);
  writer.add("half", half.t);
  writer.add("empty", empty.t);
  writer.add("scalar", scalar.t);
  writer.set_metadata("step", "17");
  writer.write(dir.file("a.safetensors"));

  const SafetensorsReader reader(dir.file("a.safetensors"));
  EXPECT_EQ(reader.metadata(), (std::map<std::string, std::string>{{"step", "17"}}));
  // Zero-byte tensors share their offset with the next one; their order among equals is by name.
  EXPECT_EQ(reader.names(), (std::vector<std::string>{"ramp", "ids", "wide", "half", "empty", "scalar"}));
  const std::pair<std::string, Tensor> expected[] = {{"ramp", sample.ramp.t}, {"ids", sample.ids.t},
                                                     {"wide", sample.wide.t}, {"half", half.t},
                                                     {"empty", empty.t},      {"scalar", scalar.t}};
  for (const auto& [name, original] : expected) {
    const LoadedTensor loaded = reader.read(name, MemTag::workspace);
    EXPECT_EQ(loaded.tensor.dtype, original.dtype) << name;
    EXPECT_EQ(loaded.tensor.shape, original.shape) << name;
    EXPECT_EQ(std::memcmp(loaded.tensor.data, original.data, original.bytes()), 0) << name;
  }
  // The data region starts 8-byte aligned, so readers may map tensors in place.
  std::ifstream in(dir.file("a.safetensors"), std::ios::binary);
  uint64_t header_bytes = 0;
  in.read(reinterpret_cast<char*>(&header_bytes), 8);
  EXPECT_EQ(header_bytes % 8, 0u);
}

// One tensor per dtype we read and write, and a 0-d and an empty one, with values exact in their
// format: -0, 1, -2.5, the smallest subnormal, the largest finite value, and -infinity (e4m3fn
// has none: its lowest finite value). tests/reference/safetensors_interop.py states the same
// tensors and encodes them itself, with numpy, PyTorch and by hand for fp8.
std::vector<std::pair<std::string, OwnedTensor>> interop_tensors() {
  const auto holding = [](DType dtype, Shape shape, const std::vector<double>& values) {
    OwnedTensor t = zeros(dtype, shape);
    for (size_t i = 0; i < values.size(); ++i) {
      const double v = values[i];
      const auto f = static_cast<float>(v);
      switch (dtype) {
        case DType::f64: t.ptr<double>()[i] = v; break;
        case DType::f32: t.ptr<float>()[i] = f; break;
        case DType::bf16: t.ptr<uint16_t>()[i] = float_to_bf16(f); break;
        case DType::f16: t.ptr<uint16_t>()[i] = float_to_f16(f); break;
        case DType::f8e4m3: t.ptr<uint8_t>()[i] = float_to_f8e4m3(f); break;
        case DType::f8e5m2: t.ptr<uint8_t>()[i] = float_to_f8e5m2(f); break;
        case DType::i8: t.ptr<int8_t>()[i] = static_cast<int8_t>(v); break;
        case DType::i32: t.ptr<int32_t>()[i] = static_cast<int32_t>(v); break;
        case DType::i64: t.ptr<int64_t>()[i] = static_cast<int64_t>(v); break;
        case DType::u16: t.ptr<uint16_t>()[i] = static_cast<uint16_t>(v); break;
        case DType::u32: t.ptr<uint32_t>()[i] = static_cast<uint32_t>(v); break;
      }
    }
    return t;
  };
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::pair<std::string, OwnedTensor>> tensors;
  tensors.emplace_back("f64", holding(DType::f64, {3, 2}, {-0.0, 1, -2.5, std::numeric_limits<double>::denorm_min(),
                                                           std::numeric_limits<double>::max(), -inf}));
  tensors.emplace_back("f32", holding(DType::f32, {2, 3}, {-0.0, 1, -2.5, std::numeric_limits<float>::denorm_min(),
                                                           std::numeric_limits<float>::max(), -inf}));
  tensors.emplace_back("bf16", holding(DType::bf16, {6}, {-0.0, 1, -2.5, std::ldexp(1.0, -133),
                                                          3.3895313892515355e38, -inf}));
  tensors.emplace_back("f16", holding(DType::f16, {1, 2, 3}, {-0.0, 1, -2.5, std::ldexp(1.0, -24), 65504, -inf}));
  tensors.emplace_back("f8e4m3", holding(DType::f8e4m3, {2, 3}, {-0.0, 1, -2.5, std::ldexp(1.0, -9), 448, -448}));
  tensors.emplace_back("f8e5m2", holding(DType::f8e5m2, {3, 2}, {-0.0, 1, -2.5, std::ldexp(1.0, -16), 57344, -inf}));
  tensors.emplace_back("i8", holding(DType::i8, {2, 2}, {-128, -1, 0, 127}));
  tensors.emplace_back("i32", holding(DType::i32, {5}, {-2147483648.0, -1, 0, 1, 2147483647}));
  tensors.emplace_back("i64", holding(DType::i64, {3}, {-9223372036854775808.0, 0, 9007199254740991.0}));
  tensors.emplace_back("u16", holding(DType::u16, {3}, {0, 1, 65535}));
  tensors.emplace_back("u32", holding(DType::u32, {3}, {0, 1, 4294967295.0}));
  tensors.emplace_back("scalar", holding(DType::f32, {}, {0.1}));
  tensors.emplace_back("empty", holding(DType::f32, {0, 4}, {}));
  return tensors;
}

TEST(Safetensors, TheSafetensorsPackageReadsOurFileAndWeReadItsBitForBit) {
  TempDir dir;
  const auto tensors = interop_tensors();
  SafetensorsWriter writer;
  for (const auto& [name, t] : tensors) writer.add(name, t.t);
  writer.set_metadata("origin", "dtrain");
  writer.set_metadata("text", "UTF-8: π ≈ 3.14159");
  writer.write(dir.file("ours.safetensors"));
  ASSERT_EQ(testing::run_reference_script("safetensors_interop.py",
                                          dir.file("ours.safetensors") + " " + dir.file("theirs.safetensors")),
            0);

  const SafetensorsReader reader(dir.file("theirs.safetensors"));
  EXPECT_EQ(reader.metadata(), (std::map<std::string, std::string>{{"origin", "python"}, {"text", "UTF-8: é, 日本"}}));
  std::vector<std::string> names = reader.names();
  std::sort(names.begin(), names.end());
  std::vector<std::string> expected_names;
  for (const auto& [name, t] : tensors) expected_names.push_back(name);
  std::sort(expected_names.begin(), expected_names.end());
  EXPECT_EQ(names, expected_names);
  for (const auto& [name, original] : tensors) {
    const LoadedTensor loaded = reader.read(name, MemTag::workspace);
    EXPECT_EQ(loaded.tensor.dtype, original.t.dtype) << name;
    EXPECT_EQ(loaded.tensor.shape, original.t.shape) << name;
    EXPECT_EQ(std::memcmp(loaded.tensor.data, original.t.data, original.t.bytes()), 0) << name;
  }
}

// Each malformed file must be rejected with a message naming the file and what is wrong.
struct BadFile {
  const char* name;
  std::string header;
  size_t data_bytes;
  const char* expected_message;
};

class SafetensorsBadFile : public ::testing::TestWithParam<BadFile> {};

TEST_P(SafetensorsBadFile, IsRejectedWithAMessageNamingFileAndProblem) {
  TempDir dir;
  const BadFile& bad = GetParam();
  const std::string path = dir.file(std::string(bad.name) + ".safetensors");
  write_raw(path, bad.header, bad.data_bytes);
  const std::string message = error_reading(path);
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find(bad.expected_message), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(
    Safetensors, SafetensorsBadFile,
    ::testing::Values(
        BadFile{"truncated_data", kGoodX, 20, "truncated: its tensors need 24 data bytes but only 20 follow the header (tensor 'x'"},
        BadFile{"malformed_json", R"({"x":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24])", 24, "malformed JSON header"},
        BadFile{"header_not_object", "[1,2]", 0, "header must be a JSON object"},
        BadFile{"missing_tensor", R"({"y":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", 24,
                "has no tensor 'x'"},
        BadFile{"wrong_shape", R"({"x":{"dtype":"F32","shape":[3,2],"data_offsets":[0,24]}})", 24,
                "tensor 'x' is F32(3, 2) but F32(2, 3) is expected"},
        BadFile{"wrong_dtype", R"({"x":{"dtype":"F64","shape":[2,3],"data_offsets":[0,48]}})", 48,
                "tensor 'x' is F64(2, 3) but F32(2, 3) is expected"},
        BadFile{"unknown_dtype", R"({"x":{"dtype":"BOOL","shape":[2,3],"data_offsets":[0,6]}})", 6,
                "tensor 'x': dtype \"BOOL\" is not supported; supported dtypes are F64, F32"},
        BadFile{"offsets_disagree_with_shape", R"({"x":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20,
                "tensor 'x': data_offsets [0, 20] hold 20 bytes, but F32(2, 3) needs 24"},
        BadFile{"negative_dimension", R"({"x":{"dtype":"F32","shape":[-2,3],"data_offsets":[0,24]}})", 24,
                "tensor 'x': shape entry must be a non-negative integer, found -2"},
        BadFile{"overlapping_tensors",
                R"({"x":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"z":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})",
                24, "tensor 'z' starts at data byte 16 but the previous tensor ends at 24"},
        BadFile{"trailing_bytes", kGoodX, 32, "8 bytes after the last tensor belong to none"},
        BadFile{"entry_missing_field", R"({"x":{"dtype":"F32","shape":[2,3]}})", 24, "tensor 'x': header entry has no 'data_offsets'"},
        BadFile{"metadata_not_strings", R"({"__metadata__":{"step":17},"x":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", 24,
                "__metadata__ value of 'step' must be a string, found 17"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Safetensors, HeaderLengthBeyondTheFileIsReportedAsTruncation) {
  TempDir dir;
  const std::string path = dir.file("short.safetensors");
  {
    std::ofstream out(path, std::ios::binary);
    const uint64_t length = 1000;
    out.write(reinterpret_cast<const char*>(&length), 8);
    out << "{}";
  }
  const std::string message = error_reading(path);
  EXPECT_NE(message.find("header length 1000 exceeds the file's 2 remaining bytes"), std::string::npos) << message;

  std::ofstream(path, std::ios::binary) << "abc";
  const std::string short_message = error_reading(path);
  EXPECT_NE(short_message.find("file is 3 bytes, too short for the 8-byte header length"), std::string::npos)
      << short_message;
}

TEST(Safetensors, MissingFileNamesThePath) {
  TempDir dir;
  const std::string message = error_reading(dir.file("absent.safetensors"));
  EXPECT_NE(message.find("absent.safetensors': cannot open: No such file"), std::string::npos) << message;
}

TEST(Safetensors, MissingTensorSuggestsTheClosestName) {
  TempDir dir;
  const Sample sample;
  SafetensorsWriter writer;
  sample.add_to(writer);
  writer.write(dir.file("a.safetensors"));
  try {
    SafetensorsReader(dir.file("a.safetensors")).info("rmap");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no tensor 'rmap' (did you mean 'ramp'?)"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, WriteReplacesAtomicallyAndAFailedWriteLeavesTheTargetAlone) {
  TempDir dir;
  const Sample sample;
  SafetensorsWriter first;
  sample.add_to(first);
  first.write(dir.file("a.safetensors"));
  SafetensorsWriter second;
  second.add("ids", sample.ids.t);
  second.write(dir.file("a.safetensors"));
  EXPECT_EQ(SafetensorsReader(dir.file("a.safetensors")).names(), std::vector<std::string>{"ids"});

  // A non-empty directory at the target cannot be replaced: the write fails, names the path,
  // and leaves neither a changed target nor a temporary file behind.
  std::filesystem::create_directories(dir.path() / "occupied" / "inside");
  EXPECT_THROW(first.write(dir.path() / "occupied"), Error);
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "occupied" / "inside"));
  size_t entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 2u);  // a.safetensors and occupied

  try {
    first.write(dir.path() / "no_such_dir" / "b.safetensors");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_dir/b.safetensors"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dt::ckpt
