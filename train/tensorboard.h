// TensorBoard event files, written by our own code.
//
// An event file is a sequence of TFRecords — uint64 length, masked CRC32C of the length, the
// payload, masked CRC32C of the payload, all little-endian — whose payloads are serialized
// tensorflow.Event protos. The first event carries file_version "brain.Event:2"; each scalar is
// an Event { wall_time, step, summary { value { tag, simple_value } } }. The protos are
// encoded by hand (a few fields of fixed meaning), so no protobuf library is needed.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

namespace dt {

class TensorBoardWriter {
 public:
  // Creates events.out.tfevents.<seconds>.<host>.<pid>.dtrain in `directory` (which must exist)
  // and writes the file-version event.
  explicit TensorBoardWriter(const std::filesystem::path& directory);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  const std::filesystem::path& path() const { return path_; }
  void add_scalar(std::string_view tag, double value, int64_t step);
  void flush();

 private:
  void write_record(const std::string& payload);
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

}  // namespace dt
