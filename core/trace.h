// Spans of time on two tracks — compute and communication — for the overlap summary of each
// training step and for Chrome's trace format (a JSON file that Perfetto and chrome://tracing
// open, one process per rank, one thread per track).
//
// The compute track holds what the training thread does (forward and backward of each
// micro-batch, the optimizer update); the communication track holds each collective from the
// moment its backend starts it to the moment the backend sees it complete; the waiting track the
// times the training thread blocked in a collective's wait (comm/communicator.h) — inside a
// compute span, but not compute: tensor parallelism's sums in the middle of a block, say. Recording is off
// until enable(); then spans accumulate, thread-safe, until take() hands them over (the trainer
// does after every step). Times are steady_clock microseconds, one clock for every process of a
// machine.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace dt::trace {

enum class Track { compute, communication, waiting };

struct Span {
  Track track;
  std::string name;
  double begin_us = 0, end_us = 0;
};

void enable(bool on);
bool enabled();
// Records a span when enabled.
void record(Track track, std::string name, std::chrono::steady_clock::time_point begin,
            std::chrono::steady_clock::time_point end);
// The spans recorded since the last take(), in recording order.
std::vector<Span> take();

// A compute span for the lifetime of the scope.
class ComputeScope {
 public:
  explicit ComputeScope(std::string name);
  ~ComputeScope();
  ComputeScope(const ComputeScope&) = delete;
  ComputeScope& operator=(const ComputeScope&) = delete;

 private:
  std::string name_;
  std::chrono::steady_clock::time_point begin_;
};

// How a step's communication sat against its compute: compute is the union of the compute
// spans less the waiting ones, communication the union of its spans, and hidden the part of
// communication that compute covers (what went on while the thread did useful work).
struct Overlap {
  double compute_ms = 0, communication_ms = 0, hidden_ms = 0;
  double hidden_fraction() const { return communication_ms > 0 ? hidden_ms / communication_ms : 1; }
};
Overlap overlap(const std::vector<Span>& spans);

// Chrome trace events, one JSON object per line ("ph":"X" complete events, pid = rank,
// tid = track), appended to a rank's part file; merge_chrome_trace writes the parts of `ranks`
// ranks as one trace with the tracks named.
void append_chrome_events(const std::filesystem::path& part, int rank, const std::vector<Span>& spans);
void merge_chrome_trace(const std::filesystem::path& out, const std::vector<std::filesystem::path>& parts);

}  // namespace dt::trace
