#include "ckpt/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/suggest.h"

namespace dt::ckpt {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

using nlohmann::json;

// The reference implementation refuses headers above 100 MB; so do we, before reading one.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeName {
  DType dtype;
  std::string_view name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::f64, "F64"},        {DType::f32, "F32"},         {DType::bf16, "BF16"},
    {DType::f16, "F16"},        {DType::f8e4m3, "F8_E4M3"},  {DType::f8e5m2, "F8_E5M2"},
    {DType::i8, "I8"},          {DType::i32, "I32"},         {DType::i64, "I64"},
    {DType::u16, "U16"},        {DType::u32, "U32"},
};

std::string supported_dtype_names() {
  std::string names;
  for (const auto& entry : kDTypeNames) names += str(names.empty() ? "" : ", ", entry.name);
  return names;
}

std::string system_error() { return std::strerror(errno); }

// A file descriptor closed on scope exit.
class File {
 public:
  File(const std::filesystem::path& path, int flags, mode_t mode = 0) : fd_(::open(path.c_str(), flags, mode)) {}
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  int fd() const { return fd_; }
  bool is_open() const { return fd_ >= 0; }
  // close() reports write-back errors that a silent destructor would lose.
  bool close() {
    const int result = ::close(fd_);
    fd_ = -1;
    return result == 0;
  }

 private:
  int fd_;
};

// Reads exactly `bytes` at `offset`; false on a short read.
bool read_at(int fd, void* destination, uint64_t bytes, uint64_t offset) {
  auto* out = static_cast<char*>(destination);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, out, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    out += n, bytes -= static_cast<uint64_t>(n), offset += static_cast<uint64_t>(n);
  }
  return true;
}

bool write_all(int fd, const void* source, uint64_t bytes) {
  const auto* in = static_cast<const char*>(source);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, in, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    in += n, bytes -= static_cast<uint64_t>(n);
  }
  return true;
}

uint64_t as_offset(const json& value, const std::string& where) {
  if (!value.is_number_unsigned()) throw Error(str(where, " must be a non-negative integer, found ", value.dump()));
  return value.get<uint64_t>();
}

// Parses and checks one header entry: {"dtype": ..., "shape": [...], "data_offsets": [b, e]}.
StoredTensorInfo parse_entry(const std::string& name, const json& entry) {
  const std::string where = str("tensor '", name, "'");
  if (!entry.is_object()) throw Error(str(where, ": header entry must be an object, found ", entry.dump()));
  for (const auto& [key, value] : entry.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      throw Error(str(where, ": unknown field '", key, "'; an entry has dtype, shape and data_offsets"));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(key)) throw Error(str(where, ": header entry has no '", key, "'"));

  StoredTensorInfo info;
  info.name = name;
  const json& dtype = entry["dtype"];
  if (!dtype.is_string()) throw Error(str(where, ": dtype must be a string, found ", dtype.dump()));
  const auto known = std::find_if(std::begin(kDTypeNames), std::end(kDTypeNames),
                                  [&](const DTypeName& d) { return d.name == dtype.get<std::string>(); });
  if (known == std::end(kDTypeNames))
    throw Error(str(where, ": dtype ", dtype.dump(), " is not supported; supported dtypes are ", supported_dtype_names()));
  info.dtype = known->dtype;

  const json& shape = entry["shape"];
  if (!shape.is_array()) throw Error(str(where, ": shape must be an array, found ", shape.dump()));
  if (shape.size() > static_cast<size_t>(Shape::kMaxDims))
    throw Error(str(where, ": shape ", shape.dump(), " has more than ", Shape::kMaxDims, " dimensions"));
  for (const auto& dim : shape) info.shape.push_back(static_cast<int64_t>(as_offset(dim, str(where, ": shape entry"))));

  const json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    throw Error(str(where, ": data_offsets must be [begin, end], found ", offsets.dump()));
  info.begin = as_offset(offsets[0], str(where, ": data_offsets begin"));
  info.end = as_offset(offsets[1], str(where, ": data_offsets end"));
  const uint64_t expected_bytes = static_cast<uint64_t>(info.shape.numel()) * dtype_size(info.dtype);
  if (info.end < info.begin || info.end - info.begin != expected_bytes)
    throw Error(str(where, ": data_offsets [", info.begin, ", ", info.end, "] hold ",
                    info.end >= info.begin ? str(info.end - info.begin) : str("a negative number of"), " bytes, but ",
                    safetensors_dtype_name(info.dtype), info.shape.to_string(), " needs ", expected_bytes));
  return info;
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  for (const auto& entry : kDTypeNames)
    if (entry.dtype == dtype) return entry.name;
  throw Error(str("dtype ", dtype_name(dtype), " has no safetensors name"));
}

// ---- writer ----

void SafetensorsWriter::add(std::string name, const Tensor& tensor) {
  DT_CHECK(tensor.device == Device::cpu, "safetensors writes host tensors; '", name, "' is ", tensor.describe());
  DT_CHECK(name != "__metadata__" && !name.empty(), "invalid tensor name '", name, "'");
  for (const auto& [existing, _] : tensors_) DT_CHECK(existing != name, "tensor '", name, "' added twice");
  safetensors_dtype_name(tensor.dtype);  // throws for a dtype the format cannot name
  tensors_.emplace_back(std::move(name), tensor);
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }

void SafetensorsWriter::write(const std::filesystem::path& path) const {
  // ordered_json keeps tensors in the order they were added, which is also their data order.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors_) {
    std::vector<int64_t> shape(tensor.shape.begin(), tensor.shape.end());
    header[name] = {{"dtype", safetensors_dtype_name(tensor.dtype)},
                    {"shape", shape},
                    {"data_offsets", {offset, offset + tensor.bytes()}}};
    offset += tensor.bytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data region 8-byte aligned
  const uint64_t header_bytes = text.size();

  const std::filesystem::path temporary = path.string() + ".tmp." + std::to_string(::getpid());
  const auto fail = [&](std::string_view what) {
    const std::string reason = system_error();
    std::filesystem::remove(temporary);
    throw Error(str("cannot write safetensors file '", path.string(), "': ", what, ": ", reason));
  };
  {
    File file(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (!file.is_open()) fail(str("cannot create '", temporary.string(), "'"));
    if (!write_all(file.fd(), &header_bytes, 8) || !write_all(file.fd(), text.data(), text.size())) fail("write failed");
    for (const auto& [name, tensor] : tensors_)
      if (!write_all(file.fd(), tensor.data, tensor.bytes())) fail(str("write of tensor '", name, "' failed"));
    if (::fsync(file.fd()) != 0) fail("fsync failed");
    if (!file.close()) fail("close failed");
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) fail("rename failed");
  // Make the rename itself durable.
  const std::filesystem::path directory = path.has_parent_path() ? path.parent_path() : ".";
  if (File dir(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir.is_open()) ::fsync(dir.fd());
}

// ---- reader ----

SafetensorsReader::SafetensorsReader(std::filesystem::path path) : path_(std::move(path)) {
  with_context(str("safetensors file '", path_.string(), "'"), [&] {
    File file(path_, O_RDONLY | O_CLOEXEC);
    if (!file.is_open()) throw Error(str("cannot open: ", system_error()));
    std::error_code ec;
    const uint64_t file_bytes = std::filesystem::file_size(path_, ec);
    if (ec) throw Error(str("cannot read its size: ", ec.message()));

    uint64_t header_bytes = 0;
    if (file_bytes < 8 || !read_at(file.fd(), &header_bytes, 8, 0))
      throw Error(str("file is ", file_bytes, " bytes, too short for the 8-byte header length; it is truncated or not safetensors"));
    if (header_bytes > kMaxHeaderBytes || header_bytes > file_bytes - 8)
      throw Error(str("header length ", header_bytes, " exceeds the file's ", file_bytes - 8,
                      " remaining bytes; the file is truncated or not safetensors"));
    std::string text(header_bytes, '\0');
    if (!read_at(file.fd(), text.data(), header_bytes, 8)) throw Error("cannot read the header");
    data_start_ = 8 + header_bytes;

    json header;
    try {
      header = json::parse(text);
    } catch (const json::parse_error& e) {
      throw Error(str("malformed JSON header: ", e.what()));
    }
    if (!header.is_object()) throw Error(str("header must be a JSON object, found ", header.type_name()));

    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        if (!entry.is_object()) throw Error("__metadata__ must be an object of strings");
        for (const auto& [key, value] : entry.items()) {
          if (!value.is_string()) throw Error(str("__metadata__ value of '", key, "' must be a string, found ", value.dump()));
          metadata_[key] = value.get<std::string>();
        }
        continue;
      }
      tensors_.emplace(name, parse_entry(name, entry));
    }

    // The tensors must tile the data region: sorted by offset, each starts where the last ended.
    std::vector<const StoredTensorInfo*> by_offset;
    for (const auto& [name, info] : tensors_) by_offset.push_back(&info);
    std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return std::tie(a->begin, a->end) < std::tie(b->begin, b->end); });
    uint64_t expected_begin = 0;
    for (const auto* info : by_offset) {
      if (info->begin != expected_begin)
        throw Error(str("tensor '", info->name, "' starts at data byte ", info->begin, " but the previous tensor ends at ",
                        expected_begin, "; tensors must neither overlap nor leave gaps"));
      expected_begin = info->end;
    }
    const uint64_t data_bytes = file_bytes - data_start_;
    if (expected_begin > data_bytes)
      throw Error(str("file is truncated: its tensors need ", expected_begin, " data bytes but only ", data_bytes,
                      " follow the header (tensor '", by_offset.back()->name, "' is cut off)"));
    if (expected_begin < data_bytes)
      throw Error(str(data_bytes - expected_begin, " bytes after the last tensor belong to none; the file is corrupt"));
  });
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<const StoredTensorInfo*> infos;
  for (const auto& [name, info] : tensors_) infos.push_back(&info);
  std::sort(infos.begin(), infos.end(), [](auto* a, auto* b) { return std::tie(a->begin, a->name) < std::tie(b->begin, b->name); });
  std::vector<std::string> names;
  for (const auto* info : infos) names.push_back(info->name);
  return names;
}

bool SafetensorsReader::contains(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }

const StoredTensorInfo& SafetensorsReader::info(std::string_view name) const {
  if (const auto it = tensors_.find(name); it != tensors_.end()) return it->second;
  const std::string suggestion = closest_match(name, names());
  throw Error(str("safetensors file '", path_.string(), "' has no tensor '", name, "'",
                  suggestion.empty() ? str(" (it holds ", tensors_.size(), " tensors)") : str(" (did you mean '", suggestion, "'?)")));
}

void SafetensorsReader::read_into(std::string_view name, const Tensor& destination) const {
  const StoredTensorInfo& stored = info(name);
  const auto where = [&] { return str("safetensors file '", path_.string(), "': tensor '", name, "'"); };
  if (stored.dtype != destination.dtype || !(stored.shape == destination.shape))
    throw Error(str(where(), " is ", safetensors_dtype_name(stored.dtype), stored.shape.to_string(), " but ",
                    safetensors_dtype_name(destination.dtype), destination.shape.to_string(),
                    " is expected; the file was written for a different model or precision"));
  DT_CHECK(destination.device == Device::cpu, "safetensors reads into host tensors; got ", destination.describe());
  File file(path_, O_RDONLY | O_CLOEXEC);
  if (!file.is_open() || !read_at(file.fd(), destination.data, stored.end - stored.begin, data_start_ + stored.begin))
    throw Error(str(where(), ": read failed (", system_error(), "); was the file changed or truncated after opening?"));
}

LoadedTensor SafetensorsReader::read(std::string_view name, MemTag tag) const {
  const StoredTensorInfo& stored = info(name);
  LoadedTensor loaded;
  loaded.memory = Buffer(stored.end - stored.begin, tag, Device::cpu, /*zero=*/false);
  loaded.tensor = loaded.memory.view(stored.dtype, stored.shape);
  read_into(name, loaded.tensor);
  return loaded;
}

}  // namespace dt::ckpt
