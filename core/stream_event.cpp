#include "core/stream_event.h"

#include <utility>

#include "core/device.h"
#include "core/error.h"

#ifdef DTRAIN_WITH_CUDA
#include "core/cuda/runtime.h"
#endif

namespace dt {

#ifdef DTRAIN_WITH_CUDA
namespace {
cudaStream_t cuda_stream(Stream stream) {
  return stream == Stream::compute ? cuda::compute_stream() : cuda::communication_stream();
}
cudaEvent_t as_event(void* event) { return static_cast<cudaEvent_t>(event); }
}  // namespace
#endif

StreamEvent::StreamEvent(Device device) : device_(device) {
  if (device == Device::cpu) return;
  require_device(device);
#ifdef DTRAIN_WITH_CUDA
  cudaEvent_t event = nullptr;
  DT_CUDA_CHECK(cudaEventCreate(&event));  // with timing: elapsed_ms_since needs it
  event_ = event;
#endif
}

StreamEvent::~StreamEvent() {
#ifdef DTRAIN_WITH_CUDA
  if (event_ != nullptr) cudaEventDestroy(as_event(event_));  // no throwing from a destructor
#endif
}

StreamEvent::StreamEvent(StreamEvent&& other) noexcept
    : device_(other.device_),
      recorded_(other.recorded_),
      event_(std::exchange(other.event_, nullptr)),
      recorded_at_(other.recorded_at_) {}

StreamEvent& StreamEvent::operator=(StreamEvent&& other) noexcept {
  if (this != &other) {
    StreamEvent gone(std::move(*this));  // releases this event when it goes out of scope
    device_ = other.device_;
    recorded_ = other.recorded_;
    event_ = std::exchange(other.event_, nullptr);
    recorded_at_ = other.recorded_at_;
  }
  return *this;
}

void StreamEvent::check_recorded(const char* what) const {
  DT_CHECK(recorded_, "StreamEvent::", what, " before the event was recorded");
}

void StreamEvent::record([[maybe_unused]] Stream stream) {
  recorded_ = true;
  if (device_ == Device::cpu) {
    recorded_at_ = std::chrono::steady_clock::now();
    return;
  }
#ifdef DTRAIN_WITH_CUDA
  DT_CUDA_CHECK(cudaEventRecord(as_event(event_), cuda_stream(stream)));
#endif
}

void StreamEvent::make_wait([[maybe_unused]] Stream stream) const {
  check_recorded("make_wait");
  if (device_ == Device::cpu) return;
#ifdef DTRAIN_WITH_CUDA
  DT_CUDA_CHECK(cudaStreamWaitEvent(cuda_stream(stream), as_event(event_), 0));
#endif
}

void StreamEvent::synchronize() const {
  check_recorded("synchronize");
  if (device_ == Device::cpu) return;
#ifdef DTRAIN_WITH_CUDA
  DT_CUDA_CHECK(cudaEventSynchronize(as_event(event_)));
#endif
}

bool StreamEvent::complete() const {
  check_recorded("complete");
  if (device_ == Device::cpu) return true;
#ifdef DTRAIN_WITH_CUDA
  const cudaError_t status = cudaEventQuery(as_event(event_));
  if (status == cudaErrorNotReady) return false;
  DT_CUDA_CHECK(status);
#endif
  return true;
}

double StreamEvent::elapsed_ms_since(const StreamEvent& start) const {
  check_recorded("elapsed_ms_since");
  start.check_recorded("elapsed_ms_since (the start)");
  DT_CHECK(start.device_ == device_, "StreamEvent::elapsed_ms_since: events on ", device_name(start.device_), " and ",
           device_name(device_));
  if (device_ == Device::cpu) return std::chrono::duration<double, std::milli>(recorded_at_ - start.recorded_at_).count();
#ifdef DTRAIN_WITH_CUDA
  float ms = 0;
  DT_CUDA_CHECK(cudaEventElapsedTime(&ms, as_event(start.event_), as_event(event_)));
  return ms;
#else
  return 0;
#endif
}

}  // namespace dt
