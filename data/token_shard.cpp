#include "data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace dt {

static_assert(std::endian::native == std::endian::little, "shards are little-endian");

namespace {

constexpr size_t kWriteChunk = 1 << 20;  // bytes buffered before a write

std::string system_error() { return std::strerror(errno); }

bool write_all(int fd, const void* data, size_t bytes) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n, bytes -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

int token_bytes_for_vocab(int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

// ---- writer ----

TokenShardWriter::TokenShardWriter(std::filesystem::path path, int64_t vocab_size)
    : path_(std::move(path)),
      temporary_(path_.string() + ".tmp." + std::to_string(::getpid())),
      vocab_size_(vocab_size),
      bytes_per_token_(token_bytes_for_vocab(vocab_size)) {
  if (vocab_size < 1 || vocab_size > (int64_t{1} << 32))
    throw Error(str("token shard '", path_.string(), "': vocabulary size ", vocab_size, " must be in [1, 2^32]"));
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw Error(str("cannot write token shard '", path_.string(), "': cannot create '", temporary_.string(),
                    "': ", system_error(), "; check that the directory exists and is writable"));
  // The header is written last, when the count is known; reserve its bytes now.
  const std::array<char, kShardHeaderBytes> zeros{};
  if (!write_all(fd_, zeros.data(), zeros.size())) {
    const std::string reason = system_error();
    ::close(fd_);
    fd_ = -1;
    std::filesystem::remove(temporary_);
    throw Error(str("cannot write token shard '", path_.string(), "': ", reason));
  }
}

TokenShardWriter::~TokenShardWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  std::error_code ignored;
  std::filesystem::remove(temporary_, ignored);
}

void TokenShardWriter::append(std::span<const uint32_t> tokens) {
  DT_CHECK(fd_ >= 0, "append after finish on token shard '", path_.string(), "'");
  for (size_t i = 0; i < tokens.size(); ++i) {
    const uint32_t t = tokens[i];
    if (t >= static_cast<uint64_t>(vocab_size_))
      throw Error(str("token shard '", path_.string(), "': token ", count_ + static_cast<int64_t>(i), " is ", t,
                      ", not below the vocabulary size ", vocab_size_, "; the tokenizer and the shard disagree"));
    if (bytes_per_token_ == 2) {
      const uint16_t v = static_cast<uint16_t>(t);
      pending_.append(reinterpret_cast<const char*>(&v), 2);
    } else {
      pending_.append(reinterpret_cast<const char*>(&t), 4);
    }
  }
  count_ += static_cast<int64_t>(tokens.size());
  if (pending_.size() >= kWriteChunk) flush();
}

void TokenShardWriter::flush() {
  if (!write_all(fd_, pending_.data(), pending_.size()))
    throw Error(str("cannot write token shard '", path_.string(), "': ", system_error(), " (is the disk full?)"));
  pending_.clear();
}

void TokenShardWriter::finish() {
  DT_CHECK(fd_ >= 0, "finish called twice on token shard '", path_.string(), "'");
  flush();
  if (count_ > INT32_MAX)
    throw Error(str("token shard '", path_.string(), "': ", count_, " tokens do not fit the header's int32 count; "
                    "split the data into more shards"));
  std::array<int32_t, kShardHeaderBytes / 4> header{};
  header[0] = bytes_per_token_ == 2 ? kShardMagicU16 : kShardMagicU32;
  header[1] = bytes_per_token_ == 2 ? kShardVersionU16 : kShardVersionU32;
  header[2] = static_cast<int32_t>(count_);
  const bool ok = ::pwrite(fd_, header.data(), sizeof header, 0) == static_cast<ssize_t>(sizeof header) &&
                  ::fsync(fd_) == 0;
  const std::string reason = system_error();
  const bool closed = ::close(fd_) == 0;
  fd_ = -1;
  if (!ok || !closed || ::rename(temporary_.c_str(), path_.c_str()) != 0) {
    std::filesystem::remove(temporary_);
    throw Error(str("cannot write token shard '", path_.string(), "': ", ok && closed ? system_error() : reason));
  }
}

// ---- reader ----

TokenShard::TokenShard(std::filesystem::path path, int64_t vocab_size) : path_(std::move(path)), vocab_size_(vocab_size) {
  const auto fail = [&](const std::string& what) { throw Error(str("token shard '", path_.string(), "': ", what)); };
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(str("cannot open: ", system_error(), "; check data.dir"));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail(str("cannot read its size: ", system_error()));
  }
  const auto file_bytes = static_cast<int64_t>(st.st_size);
  if (file_bytes < kShardHeaderBytes) {
    ::close(fd);
    fail(str("is ", file_bytes, " bytes, shorter than the ", kShardHeaderBytes, "-byte header; not a token shard"));
  }
  void* map = ::mmap(nullptr, static_cast<size_t>(file_bytes), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) fail(str("cannot map: ", system_error()));
  map_ = static_cast<const unsigned char*>(map);
  map_bytes_ = static_cast<size_t>(file_bytes);

  int32_t header[3];
  std::memcpy(header, map_, sizeof header);
  const auto unmap_and_fail = [&](const std::string& what) {
    ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
    map_ = nullptr;
    fail(what);
  };
  if (header[0] == kShardMagicU16 && header[1] == kShardVersionU16) {
    bytes_per_token_ = 2;
  } else if (header[0] == kShardMagicU32 && header[1] == kShardVersionU32) {
    bytes_per_token_ = 4;
  } else {
    unmap_and_fail(str("header starts with magic ", header[0], " version ", header[1], "; a token shard has magic ",
                       kShardMagicU16, " version ", kShardVersionU16, " (uint16 tokens) or magic ", kShardMagicU32,
                       " version ", kShardVersionU32, " (uint32 tokens). Make shards with `dtrain data prepare` "
                       "or llm.c's scripts"));
  }
  count_ = header[2];
  const int64_t expected = kShardHeaderBytes + count_ * bytes_per_token_;
  if (count_ < 0 || file_bytes < expected)
    unmap_and_fail(str("the header counts ", count_, " tokens (", expected, " bytes with the header) but the file has ",
                       file_bytes, " bytes: it is truncated; prepare it again"));
  if (file_bytes > expected)
    unmap_and_fail(str("the header counts ", count_, " tokens (", expected, " bytes with the header) but the file has ",
                       file_bytes, " bytes: trailing data; the shard is corrupt"));
}

TokenShard::~TokenShard() {
  if (map_ != nullptr) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
}

TokenShard::TokenShard(TokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      vocab_size_(other.vocab_size_),
      bytes_per_token_(other.bytes_per_token_),
      count_(other.count_),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)) {}

void TokenShard::read(int64_t begin, std::span<int32_t> out) const {
  const auto n = static_cast<int64_t>(out.size());
  DT_CHECK(begin >= 0 && begin + n <= count_, "read of tokens [", begin, ", ", begin + n, ") from shard '",
           path_.string(), "' of ", count_, " tokens");
  const unsigned char* data = map_ + kShardHeaderBytes;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t t;
    if (bytes_per_token_ == 2) {
      uint16_t v;
      std::memcpy(&v, data + 2 * (begin + i), 2);
      t = v;
    } else {
      std::memcpy(&t, data + 4 * (begin + i), 4);
    }
    if (t >= static_cast<uint64_t>(vocab_size_))
      throw Error(str("token shard '", path_.string(), "': token ", begin + i, " (byte offset ",
                      kShardHeaderBytes + (begin + i) * bytes_per_token_, ") is ", t, ", not below the model's vocabulary size ",
                      vocab_size_, "; the shard was made with another tokenizer"));
    out[i] = static_cast<int32_t>(t);
  }
}

}  // namespace dt
