#include "bench/context_parallel_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>

#include "bench/rank_figures.h"
#include "comm/world.h"
#include "core/trace.h"
#include "model/rope_tables.h"
#include "model/stage.h"
#include "parallel/context/ring_attention.h"
#include "core/rng.h"

namespace dt {

namespace {

// A buffer of n f32 values drawn from N(0, 1).
Buffer random_buffer(int64_t n, uint64_t seed) {
  Buffer b(static_cast<size_t>(n) * sizeof(float), MemTag::workspace);
  fill_normal(static_cast<float*>(b.data()), n, 0, ElementRng(seed, "bench cp"), 0.0f, 1.0f);
  return b;
}

}  // namespace

void run_context_bench(const ContextBenchOptions& o) {
  const std::unique_ptr<Communicator> world = make_world(Device::cpu, "mpi", nullptr, "cp");
  const int cp = world->size(), rank = world->rank();
  const bool lead = rank == 0;
  const ModelConfig& c = o.model;
  if (o.seq_len < 2 * cp || o.batch_size < 1 || o.repeats < 1)
    throw Error(str("bench cp: --seq ", o.seq_len, " must give each of the ", 2 * cp,
                    " zig-zag chunks a token, and --batch and --repeats must be at least 1"));
  const kernels::AttentionHeads heads(c.n_head, c.kv_heads());
  const int64_t B = o.batch_size, W = c.qkv_width(), A = int64_t{c.n_head} * c.head_size();
  const RopeTables rope = make_rope_tables(c, o.seq_len);
  if (lead) {
    std::printf("# ring attention over %d ranks: %d heads (%d key/value) of %d, %lld x %d tokens, f32, forward and "
                "backward of one block\n",
                cp, c.n_head, c.kv_heads(), c.head_size(), static_cast<long long>(B), o.seq_len);
    std::printf("#%8s %30s %10s %14s %14s %10s\n", "chunks", "attention ms per rank", "imbalance", "sent MiB",
                "ring's count", "hidden");
  }
  for (const bool zigzag : {false, true}) {
    const ContextLayout layout{.ranks = cp, .rank = rank, .zigzag = zigzag,
                               .seq_len = o.seq_len / (2 * cp) * (2 * cp)};
    const int64_t N = B * layout.local_len();
    const Buffer qkv_b = random_buffer(N * W, 1), datty_b = random_buffer(N * A, 2);
    const Buffer atty_b(static_cast<size_t>(N * A) * sizeof(float), MemTag::activations);
    const Buffer lse_b(static_cast<size_t>(N * c.n_head) * sizeof(float), MemTag::activations);
    const Buffer dqkv_b(static_cast<size_t>(N * W) * sizeof(float), MemTag::workspace);
    const Tensor qkv = qkv_b.view(DType::f32, {N, W}), datty = datty_b.view(DType::f32, {N, A}),
                 atty = atty_b.view(DType::f32, {N, A}), lse = lse_b.view(DType::f32, {N * c.n_head}),
                 dqkv = dqkv_b.view(DType::f32, {N, W});
    const bool rotary = c.traits().positions == PositionKind::rotary;
    RingAttention ring(*world, layout, heads, B, rotary ? rope.cos : Tensor{}, rotary ? rope.sin : Tensor{});
    trace::enable(true);
    std::vector<double> compute, hidden;
    int64_t sent = 0;
    for (int repeat = 0; repeat <= o.repeats; ++repeat) {  // the first untimed
      world->barrier().wait();
      trace::take();
      const int64_t before = ring.bytes_sent();
      ring.rerun(qkv, atty, lse);
      ring.backward(dqkv, datty, qkv, atty, lse);
      const trace::Overlap overlap = trace::overlap(trace::take());
      if (repeat == 0) continue;
      compute.push_back(overlap.compute_ms);
      hidden.push_back(overlap.hidden_fraction());
      sent = ring.bytes_sent() - before;
    }
    trace::enable(false);
    const std::vector<double> ms = gathered_from_ranks(*world, median(compute)), shares = gathered_from_ranks(*world, median(hidden));
    // The ring's count: (cp − 1) blocks of B·T/cp rows of the key/value heads forward and again
    // backward, and cp of their f32 gradients.
    const double block = static_cast<double>(N * (W - A)) * sizeof(float);
    const double expected = cp > 1 ? (2.0 * (cp - 1) + cp) * block : 0;
    const std::vector<double> bytes = gathered_from_ranks(*world, static_cast<double>(sent));
    for (int r = 0; r < cp; ++r)
      if (bytes[static_cast<size_t>(r)] != expected)
        throw Error(str("bench cp: rank ", r, " sent ", bytes[static_cast<size_t>(r)], " bytes in a forward and "
                        "backward, and the ring's count is ", expected));
    if (lead) {
      std::string per_rank;
      for (const double m : ms) per_rank += str(per_rank.empty() ? "" : " ", static_cast<int>(m * 10 + 0.5) / 10.0);
      const double mean = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size());
      std::printf(" %8s %30s %10.2f %14.2f %14.2f %9.0f%%\n", zigzag ? "zig-zag" : "plain", per_rank.c_str(),
                  *std::max_element(ms.begin(), ms.end()) / mean, *std::max_element(bytes.begin(), bytes.end()) / 1048576.0,
                  expected / 1048576.0, 100 * median(shares));
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
        Stage::activation_bytes(one_block, block, Recompute::none, DType::f32, o.batch_size, T).kept);
    if (ranks == 1) at_one = kept;
    std::printf("  cp %d: %6d tokens per sequence, %10.2f MiB, 1/%.2f of cp 1\n", ranks, T, kept / 1048576.0,
                at_one / kept);
  }
}

}  // namespace dt
