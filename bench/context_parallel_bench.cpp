#include "bench/context_parallel_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "bench/rank_figures.h"
#include "comm/world.h"
#include "core/rng.h"
#include "core/trace.h"
#include "kernels/convert.h"
#include "model/rope_tables.h"
#include "model/stage.h"
#include "parallel/context/ring_attention.h"

namespace dt {

namespace {

size_t bytes_of(DType dtype, int64_t n) { return static_cast<size_t>(n) * dtype_size(dtype); }

// A buffer of n values drawn from N(0, 1), stored as `dtype` (rounded from f32) on `device`.
Buffer random_buffer(int64_t n, uint64_t seed, DType dtype, Device device) {
  Buffer drawn(bytes_of(DType::f32, n), MemTag::workspace);
  fill_normal(static_cast<float*>(drawn.data()), n, 0, ElementRng(seed, "bench cp"), 0.0f, 1.0f);
  if (dtype != DType::f32) {
    Buffer rounded(bytes_of(dtype, n), MemTag::workspace);
    kernels::convert(rounded.view(dtype, {n}), drawn.view(DType::f32, {n}));
    drawn = std::move(rounded);
  }
  if (device == Device::cpu) return drawn;
  Buffer on(bytes_of(dtype, n), MemTag::workspace, device, /*zero=*/false);
  copy_bytes(on.data(), device, drawn.data(), Device::cpu, bytes_of(dtype, n));
  return on;
}

}  // namespace

void run_context_bench(const ContextBenchOptions& o) {
  // Over MPI for CUDA buffers too: NCCL refuses two ranks on one GPU, MPI stages through the host.
  const std::unique_ptr<Communicator> world = make_world(o.device, "mpi", nullptr, "cp");
  const int cp = world->size(), rank = world->rank();
  const bool lead = rank == 0;
  const ModelConfig& c = o.model;
  if (o.seq_len < 2 * cp || o.batch_size < 1 || o.repeats < 1)
    throw Error(str("bench cp: --seq ", o.seq_len, " must give each of the ", 2 * cp,
                    " zig-zag chunks a token, and --batch and --repeats must be at least 1"));
  const kernels::AttentionHeads heads(c.n_head, c.kv_heads());
  const int64_t B = o.batch_size, W = c.qkv_width(), A = int64_t{c.n_head} * c.head_size();
  // f32 on the CPU; bf16 on a GPU, the dtype cuDNN's attention takes (f32 blocks run per-row kernels).
  const DType storage = o.device == Device::cuda ? DType::bf16 : DType::f32, acc = DType::f32;
  const RopeTables rope = make_rope_tables(c, o.seq_len, o.device);
  if (lead) {
    std::printf("# ring attention over %d ranks: %d heads (%d key/value) of %d, %lld x %d tokens, %s on %s, forward "
                "and backward of one block\n",
                cp, c.n_head, c.kv_heads(), c.head_size(), static_cast<long long>(B), o.seq_len,
                std::string(dtype_name(storage)).c_str(), std::string(device_name(o.device)).c_str());
#ifdef DTRAIN_WITH_CUDA
    // The blocks of both layouts below, one sequence's chunk each: plain's cp chunks, zig-zag's 2 cp.
    const std::vector<int> chunk_counts = o.device == Device::cuda ? std::vector<int>{cp, 2 * cp} : std::vector<int>{};
    for (const int chunks : chunk_counts)
      for (const kernels::BlockMask mask : {kernels::BlockMask::causal, kernels::BlockMask::full}) {
        const int64_t chunk = o.seq_len / (2 * cp) * 2 * cp / chunks;
        const Tensor q{.dtype = storage, .shape = {1, chunk, W}, .device = Device::cuda};
        const Tensor kv{.dtype = storage, .shape = {1, chunk, W - A}, .device = Device::cuda};
        std::printf("# attention blocks of %lld tokens, %s: %s\n", static_cast<long long>(chunk),
                    mask == kernels::BlockMask::causal ? "causal" : "full",
                    kernels::cuda::attention_block_kernels(q, kv, heads, mask).c_str());
      }
#endif
    std::printf("#%8s %30s %10s %10s %14s %14s %10s\n", "chunks", "attention ms per rank", "imbalance", "pass ms",
                "sent MiB", "ring's count", "hidden");
  }
  for (const bool zigzag : {false, true}) {
    const ContextLayout layout{.ranks = cp, .rank = rank, .zigzag = zigzag,
                               .seq_len = o.seq_len / (2 * cp) * (2 * cp)};
    const int64_t N = B * layout.local_len();
    const Buffer qkv_b = random_buffer(N * W, 1, storage, o.device);
    const Buffer datty_b = random_buffer(N * A, 2, storage, o.device);
    const Buffer atty_b(bytes_of(storage, N * A), MemTag::activations, o.device);
    const Buffer lse_b(bytes_of(acc, N * c.n_head), MemTag::activations, o.device);
    const Buffer dqkv_b(bytes_of(storage, N * W), MemTag::workspace, o.device);
    const Tensor qkv = qkv_b.view(storage, {N, W}), datty = datty_b.view(storage, {N, A}),
                 atty = atty_b.view(storage, {N, A}), lse = lse_b.view(acc, {N * c.n_head}),
                 dqkv = dqkv_b.view(storage, {N, W});
    const bool rotary = c.traits().positions == PositionKind::rotary;
    RingAttention ring(*world, layout, heads, B, rotary ? rope.cos : Tensor{}, rotary ? rope.sin : Tensor{});
    trace::enable(true);
    std::vector<double> compute, hidden, pass;
    int64_t sent = 0;
    for (int repeat = 0; repeat <= o.repeats; ++repeat) {  // the first untimed
      world->barrier().wait();
      trace::take();
      const int64_t before = ring.bytes_sent();
      const auto start = std::chrono::steady_clock::now();
      ring.rerun(qkv, atty, lse);
      ring.backward(dqkv, datty, qkv, atty, lse);
      synchronize(o.device);
      const double pass_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      const trace::Overlap overlap = trace::overlap(trace::take());
      if (repeat == 0) continue;
      compute.push_back(overlap.compute_ms);
      pass.push_back(pass_ms);
      hidden.push_back(overlap.hidden_fraction());
      sent = ring.bytes_sent() - before;
    }
    trace::enable(false);
    const std::vector<double> ms = gathered_from_ranks(*world, median(compute));
    const std::vector<double> shares = gathered_from_ranks(*world, median(hidden));
    const std::vector<double> passes = gathered_from_ranks(*world, median(pass));
    // The ring's count: (cp − 1) blocks of B·T/cp rows of the key/value heads forward and again
    // backward, in the storage dtype, and cp of their f32 gradients.
    const double block = static_cast<double>(N * (W - A));
    const double per_element = 2.0 * (cp - 1) * static_cast<double>(dtype_size(storage)) +
                               cp * static_cast<double>(dtype_size(acc));
    const double expected = cp > 1 ? per_element * block : 0;
    const std::vector<double> bytes = gathered_from_ranks(*world, static_cast<double>(sent));
    for (int r = 0; r < cp; ++r)
      if (bytes[static_cast<size_t>(r)] != expected)
        throw Error(str("bench cp: rank ", r, " sent ", bytes[static_cast<size_t>(r)], " bytes in a forward and "
                        "backward, and the ring's count is ", expected));
    if (lead) {
      std::string per_rank;
      for (const double m : ms) per_rank += str(per_rank.empty() ? "" : " ", static_cast<int>(m * 10 + 0.5) / 10.0);
      const double mean = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size());
      std::printf(" %8s %30s %10.2f %10.1f %14.2f %14.2f %9.0f%%\n", zigzag ? "zig-zag" : "plain",
                  per_rank.c_str(),
                  *std::max_element(ms.begin(), ms.end()) / mean, *std::max_element(passes.begin(), passes.end()),
                  *std::max_element(bytes.begin(), bytes.end()) / 1048576.0, expected / 1048576.0,
                  100 * median(shares));
    }
  }
  if (!lead) return;
  // The activations one block keeps per micro-batch on each rank, by cp.
  std::printf("# activations one block keeps per rank (B %lld, recompute none), by cp:\n", static_cast<long long>(B));
  ModelConfig one_block = c;
  one_block.n_layer = 1;
  const StageUnits block{.embeddings = false, .first_block = 0, .end_block = 1, .head = false};
  double at_one = 0;
  for (const int ranks : {1, 2, 4, 8}) {
    const int T = o.seq_len / ranks;
    const double kept = static_cast<double>(
        Stage::activation_bytes(one_block, block, Recompute::none, storage, o.batch_size, T).kept);
    if (ranks == 1) at_one = kept;
    std::printf("  cp %d: %6d tokens per sequence, %10.2f MiB, 1/%.2f of cp 1\n", ranks, T, kept / 1048576.0,
                at_one / kept);
  }
}

}  // namespace dt
