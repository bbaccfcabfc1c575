#include "bench/pipeline_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "bench/rank_figures.h"
#include "comm/world.h"
#include "core/allocator.h"
#include "core/rng.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/partition.h"
#include "parallel/pipeline/schedule_check.h"
#include "parallel/pipeline/schedule_render.h"

namespace dt {

using namespace pipeline;

void run_pipeline_bench(const PipelineBenchOptions& o) {
  const std::unique_ptr<Communicator> world = make_world(Device::cpu, "mpi", nullptr, "pp");
  const int p = world->size(), rank = world->rank();
  const bool lead = rank == 0;
  const ModelConfig& c = o.model;
  if (o.seq_len < 1 || o.seq_len > c.max_seq_len || o.batch_size < 1 || o.micro_batches < 1 || o.repeats < 1)
    throw Error(str("bench pp: --seq ", o.seq_len, " must be in [1, the model's max_seq_len ", c.max_seq_len,
                    "] (--max-seq-len raises it), and --batch, --microbatches and --repeats at least 1"));
  const ParameterLayout layout(c);
  FlatTensors weights(layout, MemTag::parameters);
  init_parameters(weights, 1);
  FlatTensors grads(layout, MemTag::gradients);
  Buffer ids(static_cast<size_t>(2 * o.micro_batches * o.batch_size * o.seq_len) * sizeof(int32_t), MemTag::workspace);
  std::vector<MicroBatch> data;
  const ElementRng rng(1, "bench pp");
  for (int k = 0; k < o.micro_batches; ++k) {
    const size_t n = static_cast<size_t>(o.batch_size * o.seq_len) * sizeof(int32_t);
    const Tensor tokens = ids.view(DType::i32, {o.batch_size, o.seq_len}, 2 * k * n);
    const Tensor targets = ids.view(DType::i32, {o.batch_size, o.seq_len}, (2 * k + 1) * n);
    for (int64_t i = 0; i < tokens.numel(); ++i) {
      tokens.ptr<int32_t>()[i] = static_cast<int32_t>(rng.uniform(2 * (k * tokens.numel() + i)) * c.vocab_size);
      targets.ptr<int32_t>()[i] = static_cast<int32_t>(rng.uniform(2 * (k * tokens.numel() + i) + 1) * c.vocab_size);
    }
    data.push_back({tokens, targets});
  }
  if (lead) {
    std::printf("# pipeline over %d ranks: %s, %d layers, d_model %d, %d micro-batches of %d x %d tokens, f32\n", p,
                std::string(model_family_name(c.family)).c_str(), c.n_layer, c.d_model, o.micro_batches, o.batch_size,
                o.seq_len);
    std::printf("#%15s %9s %9s %9s %34s %16s %22s\n", "schedule", "bubble", "replayed", "theory",
                "forward/backward/input/weight ms", "held per rank", "activations per rank MiB");
  }
  for (const std::string& name : o.schedules) {
    const Schedule schedule =
        make_schedule(name, p, o.micro_batches, name == "interleaved" ? o.virtual_stages : 1);
    const ScheduleCheck check = check_schedule(schedule);
    DT_CHECK(check.ok(), check.problem);
    const bool split = name.starts_with("zb");
    const std::vector<StageUnits> parts = partition_stages(c, schedule.stages(), o.seq_len);
    std::vector<std::unique_ptr<Stage>> owned;
    std::vector<Stage*> mine(static_cast<size_t>(schedule.stages()), nullptr);
    const size_t activations_before = memory_stats(Device::cpu).current_bytes[static_cast<int>(MemTag::activations)];
    for (int s = 0; s < schedule.stages(); ++s)
      if (schedule.stage_rank[s] == rank) {
        owned.push_back(std::make_unique<Stage>(layout, parts[s], Recompute::none, DType::f32, Device::cpu,
                                                o.batch_size, o.seq_len, ParallelRegions::single_rank(), split));
        mine[s] = owned.back().get();
      }
    std::vector<double> bubbles;
    std::map<Op, PipelineRank::Busy> last;
    for (int repeat = 0; repeat <= o.repeats; ++repeat) {  // the first untimed: buffers are made then
      grads.zero();
      CommunicatorTransport transport(*world, schedule.stage_rank);
      PipelineRank me(schedule, rank, mine, weights, grads, transport, data, 1.0f / (o.micro_batches * 1.0f));
      world->barrier().wait();
      const auto start = std::chrono::steady_clock::now();
      run_alone(me);
      transport.finish();
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      double busy = 0;
      for (const auto& [op, b] : me.busy()) busy += b.seconds;
      if (repeat > 0) bubbles.push_back((elapsed - busy) / busy);
      last = me.busy();
    }
    const std::vector<double> per_rank = gathered_from_ranks(*world, median(bubbles));
    const double activations =
        static_cast<double>(memory_stats(Device::cpu).current_bytes[static_cast<int>(MemTag::activations)] -
                            activations_before) /
        (1024.0 * 1024.0);
    const std::vector<double> memory = gathered_from_ranks(*world, activations);
    const auto ms = [&](Op op) {
      const auto it = last.find(op);
      return it == last.end() || it->second.actions == 0 ? 0.0 : 1e3 * it->second.seconds / it->second.actions;
    };
    // The schedule replayed with every rank's measured pass times, transfers free: the bubble
    // the passes leave, apart from what the transfers and the machine add.
    std::vector<PassTimes> times(static_cast<size_t>(p));
    const std::vector<double> forward = gathered_from_ranks(*world, ms(Op::forward)), backward = gathered_from_ranks(*world, ms(Op::backward)),
                              input = gathered_from_ranks(*world, ms(Op::backward_input)),
                              weight = gathered_from_ranks(*world, ms(Op::backward_weight));
    for (size_t r = 0; r < times.size(); ++r) times[r] = {forward[r], backward[r], input[r], weight[r]};
    const double replayed = check_schedule(schedule, times).bubble();
    if (lead) {
      const double worst = *std::max_element(per_rank.begin(), per_rank.end());
      const double theory = theoretical_bubble(schedule);
      std::string mib;
      for (const double m : memory) mib += str(mib.empty() ? "" : " ", static_cast<int>(m * 10 + 0.5) / 10.0);
      std::string held;
      for (const int k : check.peak_in_flight) held += str(held.empty() ? "" : " ", k);
      std::printf(" %15s %9.3f %9.3f %9.3f %34s %16s %22s\n",
                  (name + (name == "interleaved" ? str(" v", o.virtual_stages) : "")).c_str(), worst, replayed, theory,
                  str(static_cast<int>(ms(Op::forward) * 10) / 10.0, "/", static_cast<int>(ms(Op::backward) * 10) / 10.0,
                      "/", static_cast<int>(ms(Op::backward_input) * 10) / 10.0, "/",
                      static_cast<int>(ms(Op::backward_weight) * 10) / 10.0)
                      .c_str(),
                  held.c_str(), mib.c_str());
    }
  }
}

}  // namespace dt
