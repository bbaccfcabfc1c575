#include "train/tensorboard.h"

#include <unistd.h>

#include <chrono>
#include <cstring>

#include "core/checksum.h"
#include "core/error.h"

namespace dt {

namespace {

// Protobuf wire format: the few pieces an Event needs.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) out.push_back(static_cast<char>((v & 0x7F) | 0x80)), v >>= 7;
  out.push_back(static_cast<char>(v));
}
void put_tag(std::string& out, int field, int wire_type) { put_varint(out, static_cast<uint64_t>(field << 3 | wire_type)); }
template <typename T>
void put_fixed(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

double seconds_since_epoch() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Event { double wall_time = 1; int64 step = 2; string file_version = 3 / Summary summary = 5; }
std::string event(int64_t step, int field, std::string_view body) {
  std::string out;
  put_tag(out, 1, 1);
  put_fixed(out, seconds_since_epoch());
  put_tag(out, 2, 0);
  put_varint(out, static_cast<uint64_t>(step));
  put_bytes(out, field, body);
  return out;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& directory) {
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  path_ = directory / str("events.out.tfevents.", static_cast<int64_t>(seconds_since_epoch()), ".", host, ".",
                          ::getpid(), ".dtrain");
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr)
    throw Error(str("cannot create TensorBoard event file '", path_.string(), "': ", std::strerror(errno),
                    "; check that the run directory exists and is writable"));
  write_record(event(0, 3, "brain.Event:2"));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TensorBoardWriter::add_scalar(std::string_view tag, double value, int64_t step) {
  // Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
  std::string value_proto;
  put_bytes(value_proto, 1, tag);
  put_tag(value_proto, 2, 5);
  put_fixed(value_proto, static_cast<float>(value));
  std::string summary;
  put_bytes(summary, 1, value_proto);
  write_record(event(step, 5, summary));
}

void TensorBoardWriter::write_record(const std::string& payload) {
  const uint64_t length = payload.size();
  const uint32_t length_crc = masked_crc32c(&length, sizeof length), payload_crc = masked_crc32c(payload.data(), payload.size());
  const bool ok = std::fwrite(&length, sizeof length, 1, file_) == 1 && std::fwrite(&length_crc, 4, 1, file_) == 1 &&
                  std::fwrite(payload.data(), 1, payload.size(), file_) == payload.size() &&
                  std::fwrite(&payload_crc, 4, 1, file_) == 1;
  if (!ok) throw Error(str("cannot write TensorBoard event file '", path_.string(), "': ", std::strerror(errno)));
}

void TensorBoardWriter::flush() {
  if (std::fflush(file_) != 0)
    throw Error(str("cannot write TensorBoard event file '", path_.string(), "': ", std::strerror(errno)));
}

}  // namespace dt
