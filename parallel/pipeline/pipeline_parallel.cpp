#include "parallel/pipeline/pipeline_parallel.h"

#include "core/error.h"
#include "parallel/pipeline/partition.h"

namespace dt::pipeline {

Schedule forward_only(const Schedule& schedule, int micro_batches) {
  Schedule s{.name = "forward",
             .ranks = schedule.ranks,
             .micro_batches = micro_batches,
             .virtual_stages = schedule.virtual_stages,
             .stage_rank = schedule.stage_rank,
             .actions = {},
             .promised_in_flight = std::vector<int>(static_cast<size_t>(schedule.ranks), 1)};
  std::vector<std::vector<Action>> compute(static_cast<size_t>(schedule.ranks));
  for (int k = 0; k < micro_batches; ++k)
    for (int stage = 0; stage < schedule.stages(); ++stage)
      compute[static_cast<size_t>(schedule.stage_rank[stage])].push_back({Op::forward, stage, k});
  s.actions = with_communication(compute, s.stage_rank);
  return s;
}

RankStages PipelineParallel::rank_stages(const ModelConfig& config, const Schedule& schedule, int rank,
                                         int seq_len) {
  RankStages stages{.all = partition_stages(config, schedule.stages(), seq_len), .held = {},
                    .deferred_weights = false};
  for (int s = 0; s < schedule.stages(); ++s)
    if (schedule.stage_rank[s] == rank) stages.held.push_back(s);
  for (const std::vector<Action>& list : schedule.actions)
    for (const Action& a : list) stages.deferred_weights = stages.deferred_weights || a.op == Op::backward_weight;
  return stages;
}

PipelineParallel::PipelineParallel(Transformer& model, Communicator& group, Schedule schedule)
    : model_(model), group_(group), schedule_(std::move(schedule)) {
  DT_CHECK(group.size() == schedule_.ranks, "a schedule of ", schedule_.ranks, " ranks over a pp group of ",
           group.size());
  DT_CHECK(group.device() == model.device(), "pipeline parallelism over a ", device_name(group.device()),
           " communicator for a model on ", device_name(model.device()));
  const std::vector<Stage*> stages = model.stages();
  DT_CHECK(static_cast<int>(stages.size()) == schedule_.stages(), "a model of ", stages.size(),
           " stages for a schedule of ", schedule_.stages());
  for (int s = 0; s < schedule_.stages(); ++s)
    DT_CHECK((stages[s] != nullptr) == (schedule_.stage_rank[s] == group.rank()), "stage ", s, " belongs to rank ",
             schedule_.stage_rank[s], " of the schedule; the model of pp rank ", group.rank(),
             stages[s] != nullptr ? " holds it" : " does not");
  // Every rank of the group takes part in the split; only the two holders use theirs.
  if (model.config().tied_embeddings && group.size() > 1) {
    const HeldUnits& part = model.layout().held_units();
    const bool holds_wte = part.embeddings || model.layout().holds_wte_copy();
    std::unique_ptr<Communicator> split = group.split(holds_wte ? 0 : 1, group.rank(), "embedding");
    if (holds_wte && split->size() == 2) embedding_group_ = std::move(split);
  }
}

PipelineParallel::~PipelineParallel() = default;

double PipelineParallel::run(const Schedule& schedule, std::span<const MicroBatch> micro_batches, float loss_scale) {
  CommunicatorTransport transport(group_, schedule.stage_rank);
  PipelineRank me(schedule, group_.rank(), model_.stages(), model_.weights(), model_.grads(), transport,
                  {micro_batches.begin(), micro_batches.end()}, loss_scale);
  run_alone(me);
  transport.finish();
  busy_ = me.busy();
  // The last stage's rank computed the losses; the others add zeros.
  double sum = 0;
  if (schedule.stage_rank.back() == group_.rank())
    for (const double loss : me.losses()) sum += loss;
  return all_reduce_value(group_, sum, ReduceOp::sum);
}

double PipelineParallel::forward_backward(std::span<const MicroBatch> micro_batches, float loss_scale) {
  if (static_cast<int>(micro_batches.size()) != schedule_.micro_batches)
    throw Error(str("the pipeline's ", schedule_.name, " schedule was made for ", schedule_.micro_batches,
                    " micro-batches per step, and this step has ", micro_batches.size()));
  return run(schedule_, micro_batches, loss_scale);
}

double PipelineParallel::forward(std::span<const MicroBatch> micro_batches) {
  return run(forward_only(schedule_, static_cast<int>(micro_batches.size())), micro_batches, 1.0f);
}

void PipelineParallel::sum_tied_gradients() {
  if (!embedding_group_) return;
  const Tensor wte = model_.grads().stored(model_.layout().find("wte"));
  embedding_group_->all_reduce(wte, ReduceOp::sum).wait();
}

void PipelineParallel::gather_parameters(const FlatTensors& mine, FlatTensors* whole) {
  const bool lead = group_.rank() == 0;
  DT_CHECK(lead == (whole != nullptr), "gathering stages: rank 0 of the group, and only it, passes the whole");
  const ParameterLayout& layout = mine.layout();
  DT_CHECK(layout.shard().size == 1, "gathering stages from a tensor-parallel shard: gather the shards first");
  if (!lead) return group_.send(mine.all(), 0).wait();
  place_slices(mine, *whole);
  for (int r = 1; r < group_.size(); ++r) {
    // Rank r's layout, made here from its stages.
    const RankStages stages = rank_stages(layout.config(), schedule_, r, model_.seq_len());
    std::vector<StageUnits> held;
    for (const int s : stages.held) held.push_back(stages.all[static_cast<size_t>(s)]);
    const ParameterLayout theirs(layout.config(), layout.unit_multiple(), {},
                                 HeldUnits::of(held, layout.config().n_layer));
    const FlatTensors received(theirs, MemTag::workspace, mine.device());
    group_.recv(received.all(), r).wait();
    place_slices(received, *whole);
  }
}

}  // namespace dt::pipeline
