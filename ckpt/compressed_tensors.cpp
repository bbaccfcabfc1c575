#include "ckpt/compressed_tensors.h"

#include <algorithm>
#include <optional>

#include "core/dtype.h"
#include "core/error.h"

namespace dt::ckpt {

namespace {

using kernels::WeightFormat;

constexpr int64_t kPackedPerInt32 = 8;  // 4-bit values in an int32

// Memory for one tensor of the file, kept in `storage`.
template <typename T>
std::span<T> stored(std::deque<Buffer>& storage, int64_t count) {
  Buffer& buffer = storage.emplace_back(static_cast<size_t>(count) * sizeof(T), MemTag::workspace);
  return {static_cast<T*>(buffer.data()), static_cast<size_t>(count)};
}

Tensor view(std::span<const std::byte> bytes, DType dtype, Shape shape) {
  return Tensor{.data = const_cast<std::byte*>(bytes.data()), .dtype = dtype, .shape = shape, .device = Device::cpu};
}

template <typename T>
Tensor view(std::span<T> values, Shape shape) {
  return view(std::as_bytes(values), dtype_of<std::remove_const_t<T>>(), shape);
}

// Element i of an integer tensor read from a file, widened.
int64_t integer_at(const Tensor& t, int64_t i) {
  switch (t.dtype) {
    case DType::i8: return t.ptr<int8_t>()[i];
    case DType::i32: return t.ptr<int32_t>()[i];
    default: return t.ptr<int64_t>()[i];
  }
}

// Element i of a scale tensor, widened exactly.
float scale_at(const Tensor& t, int64_t i) {
  switch (t.dtype) {
    case DType::bf16: return bf16_to_float(t.ptr<uint16_t>()[i]);
    case DType::f16: return f16_to_float(t.ptr<uint16_t>()[i]);
    default: return t.ptr<float>()[i];
  }
}

// How a compressed weight is stored, from its tensors' shapes.
struct StoredLayout {
  int bits = 8;          // of each value
  bool packed = false;   // pack-quantized: values in int32s, offset by 2^(bits - 1)
  int64_t group = 0;     // columns sharing a scale
  bool zero_point = false;
};

[[noreturn]] void fail(const SafetensorsReader& reader, const std::string& tensor, const std::string& what) {
  throw Error(str("Hugging Face checkpoint '", reader.path().string(), "': tensor '", tensor, "' ", what));
}

StoredLayout stored_layout(const SafetensorsReader& reader, const std::string& prefix, int64_t rows, int64_t cols) {
  StoredLayout layout;
  const std::string scale_name = prefix + ".weight_scale";
  const StoredTensorInfo& scale = reader.info(scale_name);
  if (scale.dtype != DType::f32 && scale.dtype != DType::bf16 && scale.dtype != DType::f16)
    fail(reader, scale_name, str("is ", safetensors_dtype_name(scale.dtype), "; scales load from F32, BF16 or F16"));
  const int64_t groups = scale.shape.ndim() == 2 ? scale.shape[1] : 0;
  if (scale.shape.ndim() != 2 || scale.shape[0] != rows || groups == 0 || cols % groups != 0)
    fail(reader, scale_name, str("has shape ", scale.shape.to_string(), " but a weight of ", rows, " x ", cols,
                                 " needs (", rows, ", G) scales, G dividing ", cols,
                                 " (per channel G = 1, per group G = columns / group size)"));
  layout.group = cols / groups;

  const std::string packed_name = prefix + ".weight_packed";
  layout.packed = reader.contains(packed_name);
  if (layout.packed) {
    const StoredTensorInfo& packed = reader.info(packed_name);
    const int64_t packed_cols = packed.shape.ndim() == 2 ? packed.shape[1] : 0;
    layout.bits = packed_cols == (cols + kPackedPerInt32 - 1) / kPackedPerInt32 ? 4
                  : packed_cols == (cols + 3) / 4                               ? 8
                                                                                : 0;
    if (packed.dtype != DType::i32 || packed.shape.ndim() != 2 || packed.shape[0] != rows || layout.bits == 0)
      fail(reader, packed_name, str("is ", safetensors_dtype_name(packed.dtype), " ", packed.shape.to_string(),
                                    " but a weight of ", rows, " x ", cols, " packs into I32 (", rows, ", ",
                                    (cols + 7) / 8, ") at 4 bits or (", rows, ", ", (cols + 3) / 4, ") at 8 bits"));
    const std::string shape_name = prefix + ".weight_shape";
    const LoadedTensor shape = reader.read(shape_name, MemTag::workspace);
    if ((shape.tensor.dtype != DType::i64 && shape.tensor.dtype != DType::i32) || shape.tensor.numel() != 2 ||
        integer_at(shape.tensor, 0) != rows || integer_at(shape.tensor, 1) != cols)
      fail(reader, shape_name, str("must be the integers [", rows, ", ", cols, "], the weight's shape"));
  } else {
    const std::string weight_name = prefix + ".weight";
    const StoredTensorInfo& weight = reader.info(weight_name);
    if (weight.dtype != DType::i8 || !(weight.shape == Shape{rows, cols}))
      fail(reader, weight_name, str("is ", safetensors_dtype_name(weight.dtype), " ", weight.shape.to_string(),
                                    " but a quantized weight of this model is I8 (", rows, ", ", cols, ")"));
  }
  const std::string zero_name = prefix + ".weight_zero_point";
  layout.zero_point = reader.contains(zero_name);
  if (layout.zero_point) {
    const StoredTensorInfo& zero = reader.info(zero_name);
    if (zero.dtype != DType::i8 || !(zero.shape == scale.shape))
      fail(reader, zero_name, str("is ", safetensors_dtype_name(zero.dtype), " ", zero.shape.to_string(),
                                  "; a zero point loads as I8 of the scale's shape ", scale.shape.to_string()));
  }
  return layout;
}

}  // namespace

void add_compressed_weight(SafetensorsWriter& writer, std::deque<Buffer>& storage, const std::string& prefix,
                           WeightFormat format, std::span<const float> w, int64_t rows, int64_t cols) {
  DT_CHECK(static_cast<int64_t>(w.size()) == rows * cols && cols % kernels::weight_format_block(format) == 0,
           prefix, ": ", rows, " x ", cols, " does not fit ", kernels::weight_format_name(format));
  if (format == WeightFormat::int8) {
    const std::span<int8_t> q = stored<int8_t>(storage, rows * cols);
    const std::span<float> scales = stored<float>(storage, rows);
    kernels::quantize_int8_rows(w, rows, q, scales);
    writer.add(prefix + ".weight", view(q, {rows, cols}));
    writer.add(prefix + ".weight_scale", view(scales, {rows, 1}));
    return;
  }
  const int64_t groups = cols / kernels::kGgufBlock;
  const std::span<float> scales = stored<float>(storage, rows * groups);
  if (format == WeightFormat::q8_0) {
    std::vector<kernels::BlockQ8_0> blocks(static_cast<size_t>(rows * groups));
    kernels::quantize_q8_0(w, blocks);
    const std::span<int8_t> q = stored<int8_t>(storage, rows * cols);
    for (size_t b = 0; b < blocks.size(); ++b) {
      scales[b] = f16_to_float(blocks[b].d);
      std::copy(std::begin(blocks[b].qs), std::end(blocks[b].qs), q.begin() + static_cast<int64_t>(b) * kernels::kGgufBlock);
    }
    writer.add(prefix + ".weight", view(q, {rows, cols}));
    writer.add(prefix + ".weight_scale", view(scales, {rows, groups}));
    return;
  }
  std::vector<kernels::BlockQ4_0> blocks(static_cast<size_t>(rows * groups));
  kernels::quantize_q4_0(w, blocks);
  const std::span<int32_t> packed = stored<int32_t>(storage, rows * cols / kPackedPerInt32);
  std::fill(packed.begin(), packed.end(), 0);
  constexpr int64_t half = kernels::kGgufBlock / 2;
  for (size_t b = 0; b < blocks.size(); ++b) {
    scales[b] = f16_to_float(blocks[b].d);
    // GGUF's byte j holds columns j (low nibble) and j + 16 (high); both are q + 8 already.
    for (int64_t j = 0; j < kernels::kGgufBlock; ++j) {
      const uint32_t nibble = j < half ? blocks[b].qs[j] & 0xF : blocks[b].qs[j - half] >> 4;
      const int64_t column = static_cast<int64_t>(b) * kernels::kGgufBlock + j;  // of the flattened weight
      auto& word = reinterpret_cast<uint32_t&>(packed[column / kPackedPerInt32]);
      word |= nibble << (4 * (column % kPackedPerInt32));
    }
  }
  const std::span<int64_t> shape = stored<int64_t>(storage, 2);
  shape[0] = rows;
  shape[1] = cols;
  writer.add(prefix + ".weight_packed", view(packed, {rows, cols / kPackedPerInt32}));
  writer.add(prefix + ".weight_scale", view(scales, {rows, groups}));
  writer.add(prefix + ".weight_shape", view(shape, {2}));
}

nlohmann::json compressed_tensors_config(WeightFormat format, const std::vector<std::string>& ignored) {
  const bool per_channel = format == WeightFormat::int8;
  nlohmann::json weights = {{"num_bits", format == WeightFormat::q4_0 ? 4 : 8},
                            {"type", "int"},
                            {"symmetric", true},
                            {"strategy", per_channel ? "channel" : "group"},
                            {"group_size", per_channel ? nlohmann::json(nullptr) : nlohmann::json(kernels::kGgufBlock)},
                            {"dynamic", false}};
  return {{"quant_method", "compressed-tensors"},
          {"format", format == WeightFormat::q4_0 ? "pack-quantized" : "int-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights", weights},
              {"input_activations", nullptr},
              {"output_activations", nullptr}}}}},
          {"ignore", ignored},
          {"kv_cache_scheme", nullptr}};
}

bool holds_compressed_weight(const SafetensorsReader& reader, const std::string& prefix) {
  return reader.contains(prefix + ".weight_scale");
}

std::vector<std::string> check_compressed_weight(const SafetensorsReader& reader, const std::string& prefix,
                                                 int64_t rows, int64_t cols) {
  const StoredLayout layout = stored_layout(reader, prefix, rows, cols);
  std::vector<std::string> names = {prefix + ".weight_scale"};
  if (layout.packed) {
    names.push_back(prefix + ".weight_packed");
    names.push_back(prefix + ".weight_shape");
  } else {
    names.push_back(prefix + ".weight");
  }
  if (layout.zero_point) names.push_back(prefix + ".weight_zero_point");
  return names;
}

void read_compressed_weight(const SafetensorsReader& reader, const std::string& prefix, int64_t rows, int64_t cols,
                            std::span<float> out) {
  const StoredLayout layout = stored_layout(reader, prefix, rows, cols);
  const LoadedTensor scale = reader.read(prefix + ".weight_scale", MemTag::workspace);
  const LoadedTensor values = reader.read(prefix + (layout.packed ? ".weight_packed" : ".weight"), MemTag::workspace);
  std::optional<LoadedTensor> zero;
  if (layout.zero_point) zero = reader.read(prefix + ".weight_zero_point", MemTag::workspace);
  const int64_t groups = cols / layout.group, per_int32 = 32 / layout.bits;
  const int64_t packed_cols = (cols + per_int32 - 1) / per_int32;
  const uint32_t mask = (1u << layout.bits) - 1, offset = 1u << (layout.bits - 1);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      int64_t q = 0;
      if (layout.packed) {
        const auto word = static_cast<uint32_t>(values.tensor.ptr<int32_t>()[r * packed_cols + c / per_int32]);
        q = static_cast<int64_t>((word >> (layout.bits * (c % per_int32))) & mask) - offset;
      } else {
        q = values.tensor.ptr<int8_t>()[r * cols + c];
      }
      const int64_t g = r * groups + c / layout.group;
      if (zero) q -= zero->tensor.ptr<int8_t>()[g];
      out[static_cast<size_t>(r * cols + c)] = static_cast<float>(q) * scale_at(scale.tensor, g);
    }
}

}  // namespace dt::ckpt
