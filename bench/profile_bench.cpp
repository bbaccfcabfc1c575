#include "bench/profile_bench.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>

#include "bench/comm_bench.h"
#include "core/buffer.h"
#include "core/device.h"
#include "core/error.h"
#include "kernels/attention.h"
#include "model/flops.h"
#include "train/throughput.h"

namespace dt {
namespace {

double seconds_of(const auto& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Bytes read and written per second by a copy of 256 MiB split over the OpenMP threads, best of 5.
double copy_bandwidth() {
  constexpr size_t bytes = size_t{256} << 20;
  const Buffer from(bytes, MemTag::workspace), to(bytes, MemTag::workspace);
  char* dst = static_cast<char*>(to.data());
  const char* src = static_cast<const char*>(from.data());
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double s = seconds_of([&] {
#pragma omp parallel
      {
        const size_t threads = static_cast<size_t>(omp_get_num_threads()), t = static_cast<size_t>(omp_get_thread_num());
        const size_t begin = bytes * t / threads, end = bytes * (t + 1) / threads;
        std::memcpy(dst + begin, src + begin, end - begin);
      }
    });
    best = std::max(best, 2.0 * bytes / s);
  }
  return best;
}

// The share of `peak` (FLOP/s) attention forward and backward reach in `precision`, best of 3
// (above 1 where attention outruns the GEMM measurement).
double attention_share(DType precision, double peak) {
  constexpr int B = 4, T = 512, NH = 8, HS = 64;
  const size_t w = dtype_size(precision);
  const Buffer qkv(size_t{B} * T * 3 * NH * HS * w, MemTag::workspace);
  const Buffer out(size_t{B} * T * NH * HS * w, MemTag::workspace);
  const Buffer lse(size_t{B} * NH * T * 4, MemTag::workspace), dout(out.bytes(), MemTag::workspace);
  const Buffer dqkv(qkv.bytes(), MemTag::workspace);
  const Tensor q = qkv.view(precision, {B, T, 3 * NH * HS}), o = out.view(precision, {B, T, NH * HS});
  const Tensor l = lse.view(DType::f32, {B, NH, T}), d = dout.view(precision, {B, T, NH * HS});
  ModelConfig shape;
  shape.n_head = NH, shape.d_model = NH * HS;
  // A forward and a flash backward of 2.5 forwards, as plan/step_time.h counts them.
  const double flops = 3.5 * attention_core_flops(shape, T) * B * T;
  double best = 1e300;
  for (int rep = 0; rep < 3; ++rep)
    best = std::min(best, seconds_of([&] {
                      kernels::attention_forward(o, l, q, {NH, NH});
                      kernels::attention_backward(dqkv.view(precision, {B, T, 3 * NH * HS}), d, q, o, l, {NH, NH});
                    }));
  return flops / best / peak;
}

}  // namespace

std::string run_profile_bench(Communicator& world, const ProfileBenchOptions& options) {
  if (world.size() < 2)
    throw Error("bench profile measures the links between ranks as well as the compute: run it under mpirun with "
                "the ranks a job would place on this machine (mpirun -np 2 dtrain bench profile)");
  // The links first, every rank together; then rank 0 alone times the compute.
  CommBenchOptions comm;
  comm.kinds = {CollectiveKind::all_reduce};
  comm.min_bytes = 4096;
  comm.max_bytes = size_t{64} << 20;
  comm.factor = 4;
  comm.seconds_per_size = options.seconds_per_size;
  comm.raw_mpi = false;
  const CommBenchFit link = run_comm_bench(world, comm).fits.at(0);
  if (world.rank() != 0) return "";
  if (!(link.alpha_s > 0) || !(link.bandwidth > 0))
    throw Error(str("bench profile: the all-reduce fit gave alpha ", link.alpha_s, " s and bandwidth ", link.bandwidth,
                    " B/s, not a link; run it again on a quieter machine, or with a larger --seconds"));
  const double f32 = measure_gemm_peak_gflop_per_s(DType::f32) * 1e9;
  const double bf16 = measure_gemm_peak_gflop_per_s(DType::bf16) * 1e9;
  const double f16 = measure_gemm_peak_gflop_per_s(DType::f16) * 1e9;
  const double bandwidth = copy_bandwidth();
  // Attention's share of each precision's peak. A share is at most 1 (the profile's rule):
  // attention that outruns the GEMMs is capped there, and the file says by how much.
  std::string attention, capped;
  for (const auto& [precision, peak] : {std::pair{DType::bf16, bf16}, {DType::f16, f16}, {DType::f32, f32}}) {
    const double measured = attention_share(precision, peak);
    attention += str(attention.empty() ? "" : ", ", dtype_name(precision), " = ", std::min(1.0, measured));
    if (measured > 1) capped += str(capped.empty() ? " (" : ", ", dtype_name(precision), " measured ", measured);
  }
  if (!capped.empty()) capped += ", capped)";
  const double memory_gib = static_cast<double>(device_free_bytes(Device::cpu)) / (1 << 30);
  const std::string text = str(
      "# This machine, measured by `dtrain bench profile` on ", world.size(), " ranks with ", omp_get_max_threads(),
      " OpenMP threads each\n# (bench/profile_bench.h says how). Format: docs/profiles.md.\n",
      "name = \"cpu-local\"\ngpus_per_node = ", world.size(), "          # the ranks measured\n",
      "memory_gib = ", memory_gib, "     # available when measured\n",
      "memory_bandwidth_gbps = ", bandwidth / 1e9, "  # a 256 MiB copy, bytes read and written\n\n",
      "[peak_tflops]        # a 2048^3 product through linear_forward\nbf16 = ", bf16 / 1e12, "\nf16 = ",
      f16 / 1e12, "\nf32 = ", f32 / 1e12, "\n\n",
      "[efficiency]\ngemm = 1             # the peaks are what GEMMs reach here\nattention = { ", attention,
      " }  # attention forward and backward over each peak", capped,
      "\nmemory = 1           # the bandwidth is measured\n\n",
      "[intra_node]         # all-reduce between the ranks: the ring fit of bench comm\nbandwidth_gbps = ",
      link.bandwidth / 1e9, "\nlatency_us = ", link.alpha_s * 1e6, "\n\n",
      "[inter_node]         # one machine: as within it\nbandwidth_gbps = ", link.bandwidth / 1e9,
      "\nlatency_us = ", link.alpha_s * 1e6, "\n");
  std::ofstream file(options.out);
  file << text;
  if (!file.flush())
    throw Error(str("bench profile: cannot write ", options.out, "; check the directory, or give --out FILE"));
  return text;
}

}  // namespace dt
