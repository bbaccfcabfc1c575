// Streams and events as the layers above kernels/ see them (no CUDA header here).
//
// Work on a GPU is queued on one of two streams: compute, where every kernel runs, and
// communication, where collectives run (issue 7's data parallelism). Work on one stream runs
// in order; events order work across the two and time it. The gradient bucket of data
// parallelism is the pattern:
//
//   StreamEvent ready(Device::cuda);
//   ready.record(Stream::compute);            // after the bucket's last gradient kernel
//   ready.make_wait(Stream::communication);   // its all-reduce starts only after that, while
//                                             // backward goes on queueing compute work
//
// On the CPU every op has finished when it returns: record notes the time, make_wait and
// synchronize have nothing to wait for, and a recorded event is complete.
#pragma once

#include <chrono>

#include "core/tensor.h"

namespace dt {

enum class Stream { compute, communication };

class StreamEvent {
 public:
  explicit StreamEvent(Device device);
  ~StreamEvent();
  StreamEvent(StreamEvent&& other) noexcept;
  StreamEvent& operator=(StreamEvent&& other) noexcept;
  StreamEvent(const StreamEvent&) = delete;
  StreamEvent& operator=(const StreamEvent&) = delete;

  // Marks the point after all the work queued on `stream` so far; a later record moves it.
  void record(Stream stream);
  // Work queued on `stream` after this call starts only once the recorded point is reached.
  // The host does not wait.
  void make_wait(Stream stream) const;
  // The host waits until the recorded point is reached.
  void synchronize() const;
  // Whether the recorded point has been reached, without waiting.
  bool complete() const;
  // Milliseconds from `start`'s recorded point to this one's; both recorded and complete (on
  // the GPU, measured by the device between the two points).
  double elapsed_ms_since(const StreamEvent& start) const;

 private:
  void check_recorded(const char* what) const;

  Device device_;
  bool recorded_ = false;
  void* event_ = nullptr;                                // cudaEvent_t on a GPU
  std::chrono::steady_clock::time_point recorded_at_{};  // on the CPU
};

}  // namespace dt
