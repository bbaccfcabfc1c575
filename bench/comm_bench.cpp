#include "bench/comm_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "comm/mpi.h"
#include "core/allocator.h"
#include "core/buffer.h"
#include "core/device.h"
#include "core/fault_injection.h"

namespace dt {

namespace {

// Rank r's element i before the collective: small integers, exact in every sum.
float input_value(int rank, int64_t i) { return static_cast<float>(rank + 1 + i % 5); }

// The buffers of one collective on one rank (f32 on the communicator's device) and the exact
// result this rank must hold afterwards, in closed form: p ranks sum to p(p + 1)/2 + p(i mod 5).
struct Case {
  int64_t in_count = 0, out_count = 0;
  size_t bytes = 0;  // as the table counts them
  Buffer in, out;
  std::vector<float> expected;

  Case(CollectiveKind kind, size_t requested_bytes, int rank, int ranks, Device device) {
    const int64_t wanted = std::max<int64_t>(1, static_cast<int64_t>(requested_bytes / sizeof(float)));
    const bool split = kind != CollectiveKind::all_reduce && kind != CollectiveKind::broadcast;
    const int64_t count = split ? std::max<int64_t>(ranks, wanted / ranks * ranks) : wanted;  // whole parts
    const int64_t part = count / ranks;
    bytes = static_cast<size_t>(count) * sizeof(float);
    in_count = kind == CollectiveKind::all_gather ? part : count;
    out_count = kind == CollectiveKind::reduce_scatter ? part : count;
    const int64_t total_ranks = ranks;
    expected.resize(static_cast<size_t>(out_count));
    for (int64_t j = 0; j < out_count; ++j) {
      switch (kind) {
        case CollectiveKind::all_reduce:
          expected[j] = static_cast<float>(total_ranks * (total_ranks + 1) / 2 + total_ranks * (j % 5));
          break;
        case CollectiveKind::reduce_scatter: {
          const int64_t i = rank * part + j;
          expected[j] = static_cast<float>(total_ranks * (total_ranks + 1) / 2 + total_ranks * (i % 5));
          break;
        }
        case CollectiveKind::all_gather:
          expected[j] = input_value(static_cast<int>(j / part), j % part);
          break;
        case CollectiveKind::broadcast:
          expected[j] = input_value(0, j);
          break;
        case CollectiveKind::all_to_all:
          expected[j] = input_value(static_cast<int>(j / part), rank * part + j % part);
          break;
      }
    }
    in = Buffer(static_cast<size_t>(in_count) * sizeof(float), MemTag::communication, device, false);
    out = Buffer(static_cast<size_t>(out_count) * sizeof(float), MemTag::communication, device, false);
    reset(rank, device);
  }

  // Fresh inputs, and an output of NaN, which no result holds: what a check finds there was
  // written by the call it checks, not left by the timed calls before it.
  void reset(int rank, Device device) const {
    std::vector<float> values(static_cast<size_t>(in_count));
    for (int64_t i = 0; i < in_count; ++i) values[i] = input_value(rank, i);
    copy_bytes(in.data(), device, values.data(), Device::cpu, in.bytes());
    const std::vector<float> unwritten(static_cast<size_t>(out_count), std::numeric_limits<float>::quiet_NaN());
    copy_bytes(out.data(), device, unwritten.data(), Device::cpu, out.bytes());
  }
  Tensor in_view() const { return in.view(DType::f32, {in_count}); }
  Tensor out_view() const { return out.view(DType::f32, {out_count}); }
};

CollectiveHandle start(Communicator& c, CollectiveKind kind, const Case& x) {
  switch (kind) {
    case CollectiveKind::all_reduce:
      return c.all_reduce(x.in_view(), ReduceOp::sum);
    case CollectiveKind::reduce_scatter:
      return c.reduce_scatter(x.out_view(), x.in_view(), ReduceOp::sum);
    case CollectiveKind::all_gather:
      return c.all_gather(x.out_view(), x.in_view());
    case CollectiveKind::broadcast:
      return c.broadcast(x.in_view(), 0);
    case CollectiveKind::all_to_all:
      return c.all_to_all(x.out_view(), x.in_view());
  }
  throw Error("unknown collective");
}

// Where the result lands: in place for all_reduce and broadcast.
Tensor result_of(CollectiveKind kind, const Case& x) {
  return kind == CollectiveKind::all_reduce || kind == CollectiveKind::broadcast ? x.in_view() : x.out_view();
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// α and B of t = steps·α + factor·bytes / B, least squares on the relative error of each row.
CommBenchFit fit(CollectiveKind kind, const std::vector<CommBenchRow>& rows, int ranks) {
  double s_ww = 0, s_wx = 0, s_wxx = 0, s_wt = 0, s_wxt = 0;
  for (const CommBenchRow& r : rows) {
    const double w = 1 / (r.seconds * r.seconds), x = bus_factor(kind, ranks) * static_cast<double>(r.bytes);
    s_ww += w, s_wx += w * x, s_wxx += w * x * x, s_wt += w * r.seconds, s_wxt += w * x * r.seconds;
  }
  const double det = s_ww * s_wxx - s_wx * s_wx;
  const double a = (s_wt * s_wxx - s_wx * s_wxt) / det, b = (s_ww * s_wxt - s_wx * s_wt) / det;
  return {.kind = kind, .alpha_s = a / ring_steps(kind, ranks), .bandwidth = b > 0 ? 1 / b : 0};
}

std::string human_bytes(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 3) v /= 1024, ++u;
  char text[32];
  std::snprintf(text, sizeof text, v == std::floor(v) ? "%.0f %s" : "%.1f %s", v, units[u]);
  return text;
}

}  // namespace

double bus_factor(CollectiveKind kind, int ranks) {
  const double p = ranks;
  switch (kind) {
    case CollectiveKind::all_reduce:
      return 2 * (p - 1) / p;
    case CollectiveKind::broadcast:
      return 1;
    default:
      return (p - 1) / p;
  }
}

int ring_steps(CollectiveKind kind, int ranks) {
  return std::max(1, kind == CollectiveKind::all_reduce ? 2 * (ranks - 1) : ranks - 1);
}

CommBenchResult run_comm_bench(Communicator& world, const CommBenchOptions& options) {
  std::vector<CollectiveKind> kinds = options.kinds;
  if (kinds.empty())
    kinds = {CollectiveKind::all_reduce, CollectiveKind::reduce_scatter, CollectiveKind::all_gather,
             CollectiveKind::broadcast, CollectiveKind::all_to_all};
  DT_CHECK(options.factor >= 2 && options.min_bytes >= 1 && options.min_bytes <= options.max_bytes,
           "bench comm: sizes from ", options.min_bytes, " to ", options.max_bytes, " by a factor of ", options.factor);
  const int rank = world.rank(), ranks = world.size();
  // The raw MPI peer is timed only beside the MPI backend: beside NCCL it would time host copies
  // of every size as many times as NCCL's calls (seconds per row on one GPU), and compare
  // nothing like for like.
  const bool over_mpi = world.backend().rfind("MPI", 0) == 0;
  const bool lead = rank == 0, raw = options.raw_mpi && launched_by_mpi() && over_mpi;
  if (lead) {
    std::printf("# dtrain bench comm: %d rank%s over %s, f32 on %s; time is the mean of a run of calls, on the "
                "slowest rank\n",
                ranks, ranks == 1 ? "" : "s", world.backend().c_str(), std::string(device_name(world.device())).c_str());
    std::printf("%-15s %10s %12s %10s %10s %7s %12s %9s %14s %12s\n", "collective", "size", "time (us)", "algbw GB/s",
                "busbw GB/s", "wrong", "MPI (us)", "ours/MPI", "blocking (us)", "model (us)");
  }
  CommBenchResult result;
  for (const CollectiveKind kind : kinds) {
    const size_t first_row = result.rows.size();
    for (size_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= static_cast<size_t>(options.factor)) {
      const Case x(kind, bytes, rank, ranks, world.device());
      start(world, kind, x).wait();  // warm-up, and the calls' count from its time
      // On a GPU, wait() only orders the compute stream after the collective (NCCL): the clock is
      // read after the device has finished, or it times the launch alone.
      synchronize(world.device());
      auto t0 = std::chrono::steady_clock::now();
      start(world, kind, x).wait();
      synchronize(world.device());
      const double probe = all_reduce_value(world, seconds_since(t0), ReduceOp::max);
      const int calls = static_cast<int>(std::clamp(options.seconds_per_size / std::max(probe, 1e-9), 3.0, 1000.0));
      world.barrier().wait();
      t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) start(world, kind, x).wait();
      synchronize(world.device());
      CommBenchRow row{.kind = kind, .bytes = x.bytes};
      row.seconds = all_reduce_value(world, seconds_since(t0) / calls, ReduceOp::max);
      row.algbw = static_cast<double>(x.bytes) / row.seconds;
      row.busbw = row.algbw * bus_factor(kind, ranks);
      // The check: fresh inputs, one call, every element compared.
      x.reset(rank, world.device());
      start(world, kind, x).wait();
      std::vector<float> got = host_values<float>(result_of(kind, x));
      if (fault_injected("collective-result-wrong", rank)) got.back() += 1;
      for (size_t j = 0; j < got.size(); ++j) row.wrong_here += got[j] != x.expected[j];
      row.wrong = static_cast<int64_t>(all_reduce_value(world, static_cast<double>(row.wrong_here), ReduceOp::sum));
      if (raw) {
        row.mpi_seconds = raw_mpi_seconds(kind, x.bytes, calls, /*nonblocking=*/true);
        row.mpi_blocking_seconds = raw_mpi_seconds(kind, x.bytes, calls, /*nonblocking=*/false);
      }
      result.rows.push_back(row);
      if (bytes > options.max_bytes / static_cast<size_t>(options.factor)) break;  // no overflow past max
    }
    const std::vector<CommBenchRow> rows(result.rows.begin() + static_cast<std::ptrdiff_t>(first_row), result.rows.end());
    // One rank moves no bytes between ranks (a bus factor of 0): there is no line to fit.
    const bool fitted = ranks > 1;
    const CommBenchFit f = fitted ? fit(kind, rows, ranks) : CommBenchFit{.kind = kind};
    if (fitted) result.fits.push_back(f);
    for (size_t i = first_row; i < result.rows.size(); ++i) {
      CommBenchRow& r = result.rows[i];
      r.model_seconds = !fitted ? 0 : ring_steps(kind, ranks) * f.alpha_s +
                        (f.bandwidth > 0 ? bus_factor(kind, ranks) * static_cast<double>(r.bytes) / f.bandwidth : 0);
      if (!lead) continue;
      char mpi[32] = "-", ratio[32] = "-", blocking[32] = "-", model[32] = "-";
      if (fitted) std::snprintf(model, sizeof model, "%.1f", r.model_seconds * 1e6);
      if (r.mpi_seconds > 0) {
        std::snprintf(mpi, sizeof mpi, "%.1f", r.mpi_seconds * 1e6);
        std::snprintf(ratio, sizeof ratio, "%.3f", r.seconds / r.mpi_seconds);
        std::snprintf(blocking, sizeof blocking, "%.1f", r.mpi_blocking_seconds * 1e6);
      }
      std::printf("%-15s %10s %12.1f %10.3f %10.3f %7lld %12s %9s %14s %12s\n",
                  std::string(collective_kind_name(kind)).c_str(), human_bytes(r.bytes).c_str(), r.seconds * 1e6,
                  r.algbw / 1e9, r.busbw / 1e9, static_cast<long long>(r.wrong), mpi, ratio, blocking, model);
    }
    if (lead) std::fflush(stdout);
  }
  if (lead) {
    std::printf("# ring fits (t = steps * alpha + factor * bytes / B):%s", ranks == 1 ? " none at one rank" : "");
    for (const CommBenchFit& f : result.fits)
      std::printf(" %s alpha %.2f us B %.2f GB/s;", std::string(collective_kind_name(f.kind)).c_str(), f.alpha_s * 1e6,
                  f.bandwidth / 1e9);
    std::printf("\n");
    // The overhead where it matters: the largest sizes of each collective.
    std::vector<double> ratios;
    for (const CommBenchRow& r : result.rows)
      if (r.mpi_seconds > 0 && r.bytes * 4 >= options.max_bytes) ratios.push_back(r.seconds / r.mpi_seconds);
    if (!ratios.empty()) {
      std::sort(ratios.begin(), ratios.end());
      std::printf("# ours / MPI at the two largest sizes of each collective: median %.3f (min %.3f, max %.3f)\n",
                  ratios[ratios.size() / 2], ratios.front(), ratios.back());
    }
    std::fflush(stdout);
  }
  return result;
}

}  // namespace dt
