#include "bench/expert_parallel_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "bench/rank_figures.h"
#include "comm/world.h"
#include "core/rng.h"
#include "core/trace.h"
#include "parallel/parallel_run.h"
#include "train/step.h"

namespace dt {

namespace {

// The step's all-to-all spans: how long they took and the part compute covered.
trace::Overlap all_to_all_overlap(std::vector<trace::Span> spans) {
  std::erase_if(spans, [](const trace::Span& s) {
    return s.track == trace::Track::communication && !s.name.starts_with("all_to_all");
  });
  return trace::overlap(spans);
}

}  // namespace

void run_expert_bench(const ExpertBenchOptions& o) {
  const ModelConfig& c = o.model;
  const std::unique_ptr<Communicator> control = make_world(Device::cpu, "mpi", nullptr, "control");
  const int ranks = control->size();
  const bool lead = control->rank() == 0;
  if (c.moe.experts < ranks)
    throw Error(str("bench ep: each of the ", ranks, " ranks holds at least one expert, and the model has ",
                    c.moe.experts, "; use a model with experts (--model moe-tiny) or fewer ranks"));
  if (c.moe.capacity_factor > 0)
    throw Error("bench ep: the traffic's count assumes every assignment is sent, and the model drops some over "
                "its capacity; use a dropless model");
  if (o.batch_size < 1 || o.seq_len < 1 || o.steps < 1)
    throw Error("bench ep: --batch, --seq and --steps must be at least 1");
  const DType precision = o.device == Device::cuda ? DType::bf16 : DType::f32;
  // Over MPI for CUDA buffers too: NCCL refuses two ranks on one GPU, MPI stages through the host.
  ParallelRun run({.model = c, .micro_batch_size = o.batch_size, .seq_len = o.seq_len, .precision = precision,
                   .device = o.device, .dims = {.dp = ranks, .ep = ranks},
                   .zero = ZeroPolicy::of(0, precision, ranks), .backend = "mpi"},
                  *control);
  Transformer& model = run.model();
  FlatTensors init(model.layout(), MemTag::workspace, o.device);
  init_parameters(init, 1);
  run.data_parallel().take_parameters(init);
  const int64_t B = o.batch_size, T = o.seq_len, rows = B * T, C = c.d_model;
  const kernels::FlatRange mine = model.layout().dims().local_experts;
  // Random tokens, each rank its own, and as targets the next ones.
  const Buffer batch_b(static_cast<size_t>(2 * rows) * sizeof(int32_t), MemTag::workspace, o.device);
  const Tensor both = batch_b.view(DType::i32, {2 * B, T});
  const MicroBatch batch{both.slice_rows(0, B), both.slice_rows(B, B)};
  int expert_blocks = 0;
  for (int l = 0; l < c.n_layer; ++l) expert_blocks += c.moe_block(l) ? 1 : 0;
  if (lead)
    std::printf("# %d experts (top %d) in %d of %d blocks over %d ep ranks (%s a rank), %lld x %lld tokens a "
                "rank, %s on %s, %s\n#%5s %10s %12s %9s %14s %14s %11s %12s\n",
                c.moe.experts, static_cast<int>(c.moe.routing.top_k), expert_blocks, c.n_layer, ranks,
                str(c.moe.experts / ranks, c.moe.experts % ranks == 0 ? "" : str(" or ", c.moe.experts / ranks + 1))
                    .c_str(),
                static_cast<long long>(B),
                static_cast<long long>(T), std::string(dtype_name(precision)).c_str(),
                std::string(device_name(o.device)).c_str(), control->backend().c_str(), "step", "step ms",
                "all-to-all ms", "hidden", "sent MiB", "routing's MiB", "imbalance", "rank imbalance");
  Communicator& ep = *run.groups().ep;
  trace::enable(true);
  for (int step = 0; step <= o.steps; ++step) {  // step 0 untimed
    const ElementRng rng(static_cast<uint64_t>(step * ranks + control->rank()), "bench ep");
    std::vector<int32_t> stream(static_cast<size_t>(rows + 1)), drawn;
    for (size_t i = 0; i < stream.size(); ++i)
      stream[i] = static_cast<int32_t>(rng.uniform(i) * c.vocab_size);
    drawn.insert(drawn.end(), stream.begin(), stream.end() - 1);
    drawn.insert(drawn.end(), stream.begin() + 1, stream.end());
    copy_bytes(both.data, o.device, drawn.data(), Device::cpu, both.bytes());
    control->barrier().wait();
    trace::take();
    const uint64_t before = ep.traffic(CollectiveKind::all_to_all).bytes;
    const auto start = std::chrono::steady_clock::now();
    const StepStats stats = train_step(model, run.data_parallel(), {&batch, 1}, 1e-3f, 1.0f);
    synchronize(o.device);
    const double step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    const trace::Overlap a2a = all_to_all_overlap(trace::take());
    const double sent = static_cast<double>(ep.traffic(CollectiveKind::all_to_all).bytes - before);
    // The routing's count: each expert block's forward and backward send this rank's P · k
    // assignments and return the rows its experts received (every rank's, for its experts).
    double implied_rows = 0, worst = 1, received_total = 0;
    for (const ExpertStats& block : stats.expert_stats) {
      double received = 0;
      for (int64_t e = mine.begin; e < mine.end; ++e) received += block.assignments[static_cast<size_t>(e)];
      implied_rows += 2.0 * (static_cast<double>(rows * c.moe.routing.top_k) + received);
      received_total += received;
      worst = std::max(worst, block.imbalance());
    }
    const double implied = implied_rows * static_cast<double>(C * dtype_size(precision));
    const std::vector<double> sent_by_rank = gathered_from_ranks(*control, sent);
    const std::vector<double> implied_by_rank = gathered_from_ranks(*control, implied);
    for (int r = 0; r < ranks; ++r)
      if (sent_by_rank[static_cast<size_t>(r)] != implied_by_rank[static_cast<size_t>(r)])
        throw Error(str("bench ep: rank ", r, " sent ", sent_by_rank[static_cast<size_t>(r)],
                        " bytes by all-to-all in step ", step, ", and the routing implies ",
                        implied_by_rank[static_cast<size_t>(r)]));
    const std::vector<double> received = gathered_from_ranks(*control, received_total);
    const std::vector<double> times = gathered_from_ranks(*control, step_ms);
    const std::vector<double> a2a_ms = gathered_from_ranks(*control, a2a.communication_ms);
    const std::vector<double> hidden = gathered_from_ranks(*control, a2a.hidden_fraction());
    if (step == 0 || !lead) continue;
    const double mean_received = std::accumulate(received.begin(), received.end(), 0.0) / ranks;
    std::printf(" %5d %10.1f %12.1f %8.0f%% %14.3f %14.3f %11.2f %12.2f\n", step,
                *std::max_element(times.begin(), times.end()), median(a2a_ms), 100 * median(hidden),
                *std::max_element(sent_by_rank.begin(), sent_by_rank.end()) / 1048576.0,
                *std::max_element(implied_by_rank.begin(), implied_by_rank.end()) / 1048576.0, worst,
                mean_received > 0 ? *std::max_element(received.begin(), received.end()) / mean_received : 1.0);
  }
  trace::enable(false);
}

}  // namespace dt
