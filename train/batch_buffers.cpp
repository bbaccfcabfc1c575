#include "train/batch_buffers.h"

#include "core/device.h"

namespace dt {

size_t BatchBuffers::bytes(int count, int batch_size, int seq_len) {
  return static_cast<size_t>(count) * 2 * static_cast<size_t>(batch_size) * seq_len * sizeof(int32_t);
}

BatchBuffers::BatchBuffers(int count, int batch_size, int seq_len, Device device) {
  const size_t bytes = BatchBuffers::bytes(1, batch_size, seq_len) / 2;  // tokens or targets
  const Shape shape{batch_size, seq_len};
  const auto micro_batch = [&](Device on) {
    buffers_.emplace_back(bytes, MemTag::workspace, on);
    buffers_.emplace_back(bytes, MemTag::workspace, on);
    return MicroBatch{buffers_[buffers_.size() - 2].view(DType::i32, shape),
                      buffers_.back().view(DType::i32, shape)};
  };
  buffers_.reserve(static_cast<size_t>(count) * (device == Device::cpu ? 2 : 4));  // views stay valid
  for (int m = 0; m < count; ++m) host_.push_back(micro_batch(Device::cpu));
  if (device == Device::cpu) {
    device_ = host_;
    return;
  }
  for (int m = 0; m < count; ++m) device_.push_back(micro_batch(device));
}

void BatchBuffers::upload() {
  for (size_t m = 0; m < host_.size(); ++m) {
    if (device_[m].tokens.data == host_[m].tokens.data) continue;
    for (const auto& [to, from] : {std::pair{device_[m].tokens, host_[m].tokens}, {device_[m].targets, host_[m].targets}})
      copy_bytes(to.data, to.device, from.data, from.device, from.bytes());
  }
}

}  // namespace dt
