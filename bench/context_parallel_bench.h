// `dtrain bench cp`, under mpirun with every rank of the job one context-parallel rank (one
// thread each): ring attention (parallel/context/ring_attention.h) of one block's forward and
// backward over a model's heads, for plain and zig-zag chunks. On the CPU in f32; on a GPU
// (--device cuda) in bf16, the dtype cuDNN's attention takes, with the ranks' blocks passed
// through the MPI backend (staged through host memory), so ranks may share one GPU. The
// header names the attention kernels the blocks run on (cuDNN's, or the per-row ones and why).
//
//   attention   each rank's time computing (the trace's compute spans, minus its waits), and the
//               imbalance: the slowest rank's over the mean. Under a causal mask plain chunks give
//               the last rank the most work; zig-zag evens it. On a GPU the spans time the host,
//               which waits on the device only where the ring's transfers do.
//   pass        the slowest rank's wall time of a forward and backward, the device's work done.
//   traffic     the bytes each rank sent, beside the count the ring implies: (cp − 1) key/value
//               blocks forward, (cp − 1) blocks and cp f32 gradients of them backward; any
//               difference fails the run.
//   overlap     the share of the ring's communication (the backend's spans) that compute hid.
//   memory      the activations one block keeps per rank (Stage::activation_bytes) for cp = 1, 2,
//               4, 8: they fall as 1 / cp.
#pragma once

#include "core/device.h"
#include "model/config.h"

namespace dt {

struct ContextBenchOptions {
  ModelConfig model;
  int batch_size = 1;
  int seq_len = 1024;
  int repeats = 3;
  Device device = Device::cpu;
};

void run_context_bench(const ContextBenchOptions& options);

}  // namespace dt
