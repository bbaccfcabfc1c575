#include "bench/tensor_parallel_bench.h"

#include <array>
#include <cstdio>
#include <memory>
#include <vector>

#include "comm/world.h"
#include "core/allocator.h"
#include "core/buffer.h"
#include "core/rng.h"
#include "model/transformer.h"
#include "parallel/tensor/tensor_parallel.h"

namespace dt {

namespace {

using Traffic = Communicator::Traffic;
constexpr std::array kKinds = {CollectiveKind::all_reduce, CollectiveKind::reduce_scatter, CollectiveKind::all_gather};

// What one micro-batch's forward and backward should move over a tp group of R ranks, by kind
// (kKinds' order), as parallel/tensor/tensor_parallel.h and model/block.cpp do it: 16-bit sums
// widened to f32, the loss's statistics (3 f32 per token per rank) gathered once.
std::array<Traffic, 3> expected_traffic(const ModelConfig& c, int64_t N, int R, bool sp, DType precision,
                                        Recompute recompute) {
  const uint64_t L = static_cast<uint64_t>(c.n_layer), C = c.d_model, f32 = 4, e = dtype_size(precision);
  const uint64_t P = static_cast<uint64_t>((N + R - 1) / R) * static_cast<uint64_t>(R);  // rows, padded to parts
  // Full recomputation reruns each block in backward up to the MLP's activation: the attention
  // branch's output sum and both column inputs again.
  const uint64_t reruns = recompute == Recompute::full ? L : 0;
  const ShardDims d = shard_dims(c, {0, R});
  const uint64_t copied = d.heads.kv_split ? 0 : L;  // blocks whose key/value heads are copied
  const uint64_t copies_bytes = static_cast<uint64_t>(N) * 2 * c.kv_heads() * d.head_size * f32;
  std::array<Traffic, 3> t{};
  Traffic &ar = t[0], &rs = t[1], &ag = t[2];
  ag = {1, static_cast<uint64_t>(R) * static_cast<uint64_t>(N) * 3 * f32};  // the loss's statistics
  ar = {copied, copied * copies_bytes};
  const uint64_t sums = 1 + 2 * L + 2 * L + 1 + reruns;  // embedding; 2 per block each way; the head's backward
  if (!sp) {
    ar.collectives += sums;
    ar.bytes += sums * static_cast<uint64_t>(N) * C * f32;
    return t;
  }
  rs = {sums, sums * P * C * f32};
  // Forward: each block's two column inputs, the head's; backward: each block's two output
  // gradients and two inputs again (for the weight gradients), the head's input again, the
  // embedding's output gradient; and what full recomputation reruns.
  const uint64_t gathers = 2 * L + 1 + 4 * L + 1 + 1 + 2 * reruns;
  ag.collectives += gathers;
  ag.bytes += gathers * P * C * e;
  // The norms' weight (and LayerNorm's bias) gradients: two per block and ln_f.
  const uint64_t norms = 2 * L + 1, norm_bytes = C * f32 * (c.traits().norm == NormKind::layernorm ? 2 : 1);
  ar.collectives += norms;
  ar.bytes += norms * norm_bytes;
  return t;
}

// The bytes each rank sends for that traffic with ring algorithms: (R - 1) / R of each buffer,
// twice for an all-reduce.
double ring_bytes(const std::array<Traffic, 3>& t, int R) {
  const double share = static_cast<double>(R - 1) / R;
  return share * (2.0 * static_cast<double>(t[0].bytes) + static_cast<double>(t[1].bytes + t[2].bytes));
}

// Tokens and targets of one micro-batch, the same on every rank.
struct Batch {
  Buffer memory;
  Tensor tokens, targets;
  Batch(int B, int T, int vocab)
      : memory(static_cast<size_t>(2 * B * T) * sizeof(int32_t), MemTag::workspace),
        tokens(memory.view(DType::i32, {B, T})),
        targets(memory.view(DType::i32, {B, T}, static_cast<size_t>(B * T) * sizeof(int32_t))) {
    const ElementRng rng(1, "bench tp");
    for (int64_t i = 0; i < int64_t{B} * T; ++i) {
      tokens.ptr<int32_t>()[i] = static_cast<int32_t>(rng.uniform(2 * i) * vocab);
      targets.ptr<int32_t>()[i] = static_cast<int32_t>(rng.uniform(2 * i + 1) * vocab);
    }
  }
};

size_t activation_bytes_now() { return memory_stats(Device::cpu).current_bytes[static_cast<int>(MemTag::activations)]; }

}  // namespace

void run_tensor_parallel_bench(const TensorParallelBenchOptions& o) {
  const std::unique_ptr<Communicator> world = make_world(Device::cpu, "mpi", nullptr, "tp");
  const int R = world->size();
  const bool lead = world->rank() == 0;
  check_tensor_parallel(o.model, R);
  const ModelConfig& c = o.model;
  const int64_t N = int64_t{o.batch_size} * o.seq_len;
  const Batch batch(o.batch_size, o.seq_len, c.vocab_size);
  if (lead)
    std::printf("# tensor parallelism over %d rank%s: %s, %d layers, d_model %d, %d heads (%d key/value), micro-batch "
                "%d x %d tokens, %s activations, recompute %s\n",
                R, R == 1 ? "" : "s", std::string(model_family_name(c.family)).c_str(), c.n_layer, c.d_model, c.n_head,
                c.kv_heads(), o.batch_size, o.seq_len, std::string(dtype_name(o.precision)).c_str(),
                std::string(recompute_name(o.recompute)).c_str());
  for (const bool sp : {false, true}) {
    if (sp && R > N) continue;
    TensorParallel regions(*world, c, sp);
    // Communication of one micro-batch's forward and backward (after one untimed, to be sure no
    // first-call collective counts).
    Transformer model(c, o.batch_size, o.seq_len, o.recompute, o.precision, Device::cpu, {}, &regions);
    init_parameters(model.params(), 1);
    model.forward_backward(batch.tokens, batch.targets, 1.0f);
    std::array<Traffic, 3> before{};
    for (size_t k = 0; k < kKinds.size(); ++k) before[k] = world->traffic(kKinds[k]);
    model.forward_backward(batch.tokens, batch.targets, 1.0f);
    std::array<Traffic, 3> measured{};
    for (size_t k = 0; k < kKinds.size(); ++k)
      measured[k] = {world->traffic(kKinds[k]).collectives - before[k].collectives,
                     world->traffic(kKinds[k]).bytes - before[k].bytes};
    const std::array<Traffic, 3> expected = expected_traffic(c, N, R, sp, o.precision, o.recompute);
    if (lead) {
      std::printf("#\n# %s: one micro-batch's forward and backward, rank 0's collectives (whole buffers)\n",
                  sp ? "tensor + sequence parallelism" : "tensor parallelism");
      std::printf("#%15s %10s %14s %10s %14s\n", "collective", "measured", "bytes", "expected", "bytes");
      for (size_t k = 0; k < kKinds.size(); ++k)
        std::printf(" %15s %10llu %14s %10llu %14s\n", std::string(collective_kind_name(kKinds[k])).c_str(),
                    static_cast<unsigned long long>(measured[k].collectives),
                    format_bytes(static_cast<double>(measured[k].bytes)).c_str(),
                    static_cast<unsigned long long>(expected[k].collectives),
                    format_bytes(static_cast<double>(expected[k].bytes)).c_str());
      std::printf("# sent per rank with ring algorithms: %s measured, %s expected\n",
                  format_bytes(ring_bytes(measured, R)).c_str(), format_bytes(ring_bytes(expected, R)).c_str());
    }
    for (size_t k = 0; k < kKinds.size(); ++k)
      if (measured[k].collectives != expected[k].collectives || measured[k].bytes != expected[k].bytes)
        throw Error(str("bench tp: ", collective_kind_name(kKinds[k]), " moved ", measured[k].collectives,
                        " collectives of ", measured[k].bytes, " bytes on rank ", world->rank(), ", expected ",
                        expected[k].collectives, " of ", expected[k].bytes));
  }
  // Activations one more block keeps, per rank.
  if (lead)
    std::printf("#\n# activation bytes one more block keeps per micro-batch on rank 0 (measured through the allocator),"
                " and per s*b*h at 2 bytes an activation beside Korthikanti et al.'s\n#%6s %12s %11s %11s\n", "sp",
                "measured", "per s*b*h", "published");
  for (const bool sp : {false, true}) {
    if (sp && R > N) continue;
    TensorParallel regions(*world, c, sp);
    const auto kept = [&](int layers) {
      ModelConfig shape = c;
      shape.n_layer = layers;
      const size_t at = activation_bytes_now();
      const Transformer probe(shape, o.batch_size, o.seq_len, o.recompute, o.precision, Device::cpu, {}, &regions);
      return activation_bytes_now() - at;
    };
    const size_t bytes = kept(2) - kept(1);
    const double sbh = static_cast<double>(N) * c.d_model;
    const double published = sp ? 34.0 / R : 10.0 + 24.0 / R;
    if (lead)
      std::printf(" %6s %12s %11.2f %11.2f\n", sp ? "on" : "off", format_bytes(static_cast<double>(bytes)).c_str(),
                  static_cast<double>(bytes) / sbh * 2 / static_cast<double>(dtype_size(o.precision)), published);
  }
}

}  // namespace dt
