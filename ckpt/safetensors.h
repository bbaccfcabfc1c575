// safetensors: Hugging Face's tensor file format, read and written by our own code.
//
// A file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the data:
//
//   {"wte": {"dtype": "F32", "shape": [50257, 768], "data_offsets": [0, 154389504]}, ...,
//    "__metadata__": {"key": "value", ...}}
//
// data_offsets are byte offsets into the data region, which the tensors must tile exactly (no
// gaps, no overlaps), as the reference implementation requires. The reader validates the whole
// header before any tensor is read, and every error names the file and, where there is one,
// the tensor. The writer never leaves a partial file where the target was: it writes a
// temporary file beside it, syncs it, and renames it over the target.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/buffer.h"
#include "core/tensor.h"

namespace dt::ckpt {

// "F32", "BF16", "F8_E4M3", ...: the names the format uses for our dtypes.
std::string_view safetensors_dtype_name(DType dtype);

struct StoredTensorInfo {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0;  // byte offsets into the data region
  uint64_t end = 0;
};

// A tensor read into memory it owns.
struct LoadedTensor {
  Buffer memory;
  Tensor tensor;  // view of `memory`
};

class SafetensorsWriter {
 public:
  // Records a view of `tensor` (on the CPU); its data is read when write() runs, so it must
  // stay alive until then. Names must be unique and must not be "__metadata__".
  void add(std::string name, const Tensor& tensor);
  void set_metadata(std::string key, std::string value);
  // Writes the file atomically (temporary file, fsync, rename); throws dt::Error naming the
  // path on any failure, leaving an existing file at `path` untouched.
  void write(const std::filesystem::path& path) const;

 private:
  std::vector<std::pair<std::string, Tensor>> tensors_;
  std::map<std::string, std::string> metadata_;
};

class SafetensorsReader {
 public:
  // Opens `path` and validates its header; throws dt::Error naming the file and the problem.
  explicit SafetensorsReader(std::filesystem::path path);

  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Tensor names in the order of their data in the file.
  std::vector<std::string> names() const;
  bool contains(std::string_view name) const;
  // Throws, naming the file and the tensor (and a close name, if any), when it is absent.
  const StoredTensorInfo& info(std::string_view name) const;

  // Reads tensor `name` into `destination`, whose dtype and shape must equal the stored ones.
  void read_into(std::string_view name, const Tensor& destination) const;
  // Reads tensor `name` into a new buffer under `tag`.
  LoadedTensor read(std::string_view name, MemTag tag) const;

 private:
  std::filesystem::path path_;
  uint64_t data_start_ = 0;  // 8 + header length
  std::map<std::string, StoredTensorInfo, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace dt::ckpt
