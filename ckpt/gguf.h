// GGUF files (version 3), the format llama.cpp runs models from, written by our own code:
//
//   "GGUF", version 3 (u32), tensor count (u64), metadata count (u64)
//   metadata: key (string), value type (u32), value        strings are u64 length + bytes
//   tensor infos: name, dimensions (u32) and each (u64, the contiguous one first), type (u32),
//                 offset (u64, from the data's start, a multiple of general.alignment)
//   padding to general.alignment (32), then each tensor's bytes, each padded to the alignment
//
// Everything is little-endian. A tensor's bytes are produced when the file is written, one
// tensor at a time, so a model is never held twice in memory. The file is written beside its
// path as PATH.tmp and renamed into place: a failed write leaves nothing that looks complete.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <variant>
#include <vector>

namespace dt::ckpt {

// ggml's type ids of the tensor types written here.
enum class GgmlType : uint32_t { f32 = 0, f16 = 1, q4_0 = 2, q8_0 = 8 };
// Bytes of `values` elements of `type` (a multiple of the type's block for q4_0 and q8_0).
int64_t ggml_type_bytes(GgmlType type, int64_t values);

using GgufValue = std::variant<uint32_t, int32_t, float, bool, std::string, std::vector<std::string>,
                               std::vector<int32_t>>;

class GgufWriter {
 public:
  void add_metadata(std::string key, GgufValue value);
  // A tensor of `dims` (the contiguous dimension first, as ggml counts them) whose bytes `fill`
  // writes into a buffer of ggml_type_bytes(type, elements) when the file is written.
  void add_tensor(std::string name, std::vector<int64_t> dims, GgmlType type,
                  std::function<void(std::vector<uint8_t>& bytes)> fill);
  void write(const std::filesystem::path& path) const;

  static constexpr uint32_t kAlignment = 32;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;
    GgmlType type;
    std::function<void(std::vector<uint8_t>&)> fill;
    int64_t bytes() const;
  };
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace dt::ckpt
