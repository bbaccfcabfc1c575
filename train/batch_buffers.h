// Token and target buffers of micro-batches: filled on the CPU by the data loader, used by the
// model on its device. On the CPU they are one buffer; on a GPU, upload() copies the host
// buffers to the device ones before the step.
#pragma once

#include <vector>

#include "core/buffer.h"
#include "train/step.h"

namespace dt {

class BatchBuffers {
 public:
  // `count` micro-batches of (batch_size, seq_len) i32 tokens and targets for a model on `device`.
  BatchBuffers(int count, int batch_size, int seq_len, Device device);
  // The bytes of one such copy (the host's or the device's): plan/memory.h counts them.
  static size_t bytes(int count, int batch_size, int seq_len);

  int count() const { return static_cast<int>(host_.size()); }
  // Where the loader writes micro-batch m.
  const MicroBatch& host(int m) const { return host_[m]; }
  // Copies every host micro-batch to the device (nothing to do on the CPU).
  void upload();
  // What the model reads, on its device.
  const std::vector<MicroBatch>& on_device() const { return device_; }

 private:
  std::vector<Buffer> buffers_;
  std::vector<MicroBatch> host_, device_;
};

}  // namespace dt
