#include "ckpt/gguf.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace dt::ckpt {

namespace {

// GGUF's value type ids.
enum class GgufType : uint32_t { u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9 };

// Appends little-endian bytes (every target of this code is little-endian, as GGUF is).
class Bytes {
 public:
  template <typename T>
  void raw(const T& value) {
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  void string(const std::string& s) {
    raw(static_cast<uint64_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void type(GgufType t) { raw(static_cast<uint32_t>(t)); }
  void value(const GgufValue& v) {
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, uint32_t>) type(GgufType::u32), raw(x);
          else if constexpr (std::is_same_v<T, int32_t>) type(GgufType::i32), raw(x);
          else if constexpr (std::is_same_v<T, float>) type(GgufType::f32), raw(x);
          else if constexpr (std::is_same_v<T, bool>) type(GgufType::boolean), raw(static_cast<uint8_t>(x));
          else if constexpr (std::is_same_v<T, std::string>) type(GgufType::string), string(x);
          else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            type(GgufType::array), type(GgufType::string), raw(static_cast<uint64_t>(x.size()));
            for (const std::string& s : x) string(s);
          } else {
            type(GgufType::array), type(GgufType::i32), raw(static_cast<uint64_t>(x.size()));
            for (const int32_t i : x) raw(i);
          }
        },
        v);
  }
  void pad_to(uint32_t alignment) { out_.resize((out_.size() + alignment - 1) / alignment * alignment, 0); }
  const std::vector<uint8_t>& data() const { return out_; }

 private:
  std::vector<uint8_t> out_;
};

int64_t aligned(int64_t n) { return (n + GgufWriter::kAlignment - 1) / GgufWriter::kAlignment * GgufWriter::kAlignment; }

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

int64_t ggml_type_bytes(GgmlType type, int64_t values) {
  switch (type) {
    case GgmlType::f32:
      return 4 * values;
    case GgmlType::f16:
      return 2 * values;
    case GgmlType::q4_0:
      DT_CHECK(values % 32 == 0);
      return values / 32 * 18;
    case GgmlType::q8_0:
      DT_CHECK(values % 32 == 0);
      return values / 32 * 34;
  }
  return 0;
}

int64_t GgufWriter::Tensor::bytes() const {
  int64_t n = 1;
  for (const int64_t d : dims) n *= d;
  return ggml_type_bytes(type, n);
}

void GgufWriter::add_metadata(std::string key, GgufValue value) { metadata_.emplace_back(std::move(key), std::move(value)); }

void GgufWriter::add_tensor(std::string name, std::vector<int64_t> dims, GgmlType type,
                            std::function<void(std::vector<uint8_t>& bytes)> fill) {
  tensors_.push_back({std::move(name), std::move(dims), type, std::move(fill)});
}

void GgufWriter::write(const std::filesystem::path& path) const {
  Bytes header;
  header.raw(uint32_t{0x46554747});  // "GGUF"
  header.raw(uint32_t{3});
  header.raw(static_cast<uint64_t>(tensors_.size()));
  header.raw(static_cast<uint64_t>(metadata_.size()));
  for (const auto& [key, value] : metadata_) {
    header.string(key);
    header.value(value);
  }
  int64_t offset = 0;
  for (const Tensor& t : tensors_) {
    header.string(t.name);
    header.raw(static_cast<uint32_t>(t.dims.size()));
    for (const int64_t d : t.dims) header.raw(static_cast<uint64_t>(d));
    header.raw(static_cast<uint32_t>(t.type));
    header.raw(static_cast<uint64_t>(offset));
    offset += aligned(t.bytes());
  }
  header.pad_to(kAlignment);

  const std::filesystem::path temporary = path.string() + ".tmp";
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(temporary.c_str(), "wb"));
  if (!file) throw Error(str("cannot write '", temporary.string(), "': ", std::strerror(errno)));
  const auto put = [&](const void* data, size_t n) {
    if (std::fwrite(data, 1, n, file.get()) != n)
      throw Error(str("cannot write '", temporary.string(), "' (is the disk full?)"));
  };
  put(header.data().data(), header.data().size());
  std::vector<uint8_t> bytes;
  const std::vector<uint8_t> zeros(kAlignment, 0);
  for (const Tensor& t : tensors_) {
    bytes.assign(static_cast<size_t>(t.bytes()), 0);
    t.fill(bytes);
    DT_CHECK(static_cast<int64_t>(bytes.size()) == t.bytes(), "tensor ", t.name, " filled ", bytes.size(), " bytes");
    put(bytes.data(), bytes.size());
    put(zeros.data(), static_cast<size_t>(aligned(t.bytes()) - t.bytes()));
  }
  if (std::fflush(file.get()) != 0 || ::fsync(::fileno(file.get())) != 0)
    throw Error(str("cannot write '", temporary.string(), "' (is the disk full?)"));
  file.reset();
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) throw Error(str("cannot rename '", temporary.string(), "' to '", path.string(), "': ", ec.message()));
}

}  // namespace dt::ckpt
