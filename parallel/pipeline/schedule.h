// Pipeline schedules as data. A schedule is, for every rank of a pipeline of p ranks running m
// micro-batches through S stages, the list of actions the rank performs in order: a pure
// function of (p, m, v) that any executor runs and the checker (parallel/pipeline/schedule_check.h)
// proves complete, dependency-respecting, matched and deadlock-free without a model.
//
// Stages. The model's blocks are cut into S = p·v stages (v virtual stages per rank). Stage s
// lives on rank stage_rank[s]: s % p for the schedules that loop over the ranks (v = 1, and
// interleaved 1F1B), or, for the V-shaped one (ZB-V), stages r and 2p − 1 − r on rank r.
//
// Actions. forward(s, k) runs stage s on micro-batch k; backward(s, k) its whole backward;
// schedules that split backward (zero-bubble) run backward_input(s, k), which gives stage s − 1 its
// gradient, and later backward_weight(s, k), which adds the weights' gradients. Where two
// consecutive stages sit on different ranks the activation and its gradient travel between
// them: send_forward(s, k) after forward(s, k) on stage s's rank and recv_forward(s + 1, k)
// before forward(s + 1, k) on the next stage's; send_backward(s, k) after stage s's backward
// (input) and recv_backward(s − 1, k) before stage s − 1's. Sends do not block (the executor
// posts them and waits at the end); receives block until their data is there. In the schedules
// that say so (Schedule::exchanges) a send directly followed by a receive on its rank's list goes
// out with it, in one exchange: under NCCL a send above the eager size waits for its receive, and
// a rank's sends and receives run one after another, so two ranks that each send to the other
// before receiving would wait for ever; in one exchange a send cannot hold up the receive beside
// it. Messages between two ranks are matched in the order they are sent (as NCCL and MPI with one tag match them), so
// a receive is moved earlier where its peer sent it before another this rank needs first. A schedule is
// written as each rank's order of compute actions; the communication is inserted by one rule
// (with_communication), the same for every schedule.
//
//   afab          all forwards, then all backwards (GPipe): m micro-batches in flight.
//   1f1b          p − r − 1 forwards, then one forward and one backward in turn, then the rest
//                 of the backwards (PipeDream-Flush): at most p − r in flight on rank r.
//   interleaved   1F1B over v virtual stages per rank (Narayanan et al., 2021; Megatron-LM's
//                 order): m a multiple of p.
//   zb-h1         1F1B's forwards and input gradients, the weight gradients placed in the
//                 bubbles (Qi et al., 2023, ZB-H1): 1F1B's memory, a third of its bubble when
//                 the weight pass is as long as the input pass.
//   zb-v          ZB-H1's list scheduling over two stages per rank in a V (ZB-V): stages r and
//                 2p − 1 − r on rank r, so the first and the last stage share rank 0.
// docs/parallelism.md#pipeline-parallelism measures each schedule's bubble and memory.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dt::pipeline {

enum class Op {
  forward,
  backward,         // input and weights at once
  backward_input,   // the input's gradient (zero-bubble)
  backward_weight,  // the weights' gradients, after backward_input
  send_forward,
  recv_forward,
  send_backward,
  recv_backward,
};

// Whether an op moves a tensor between ranks (a send or a receive) rather than computing.
inline bool is_transfer(Op op) {
  return op == Op::send_forward || op == Op::recv_forward || op == Op::send_backward || op == Op::recv_backward;
}

std::string_view op_name(Op op);

struct Action {
  Op op;
  int stage;        // the stage the action belongs to (for a receive: the stage that receives)
  int micro_batch;
  bool operator==(const Action&) const = default;
};

struct Schedule {
  std::string name;
  int ranks = 1, micro_batches = 1, virtual_stages = 1;
  std::vector<int> stage_rank;               // the rank of each of the ranks × virtual_stages stages
  std::vector<std::vector<Action>> actions;  // each rank's, in order
  // The most micro-batches' activations a rank holds at once, counted per stage (a micro-batch
  // holds a stage's activations from its forward to its last backward action): what the schedule
  // promises, per rank.
  std::vector<int> promised_in_flight;
  // Whether a send directly followed by a receive on a rank's list goes out with it in one exchange
  // (exchanged_with_next): set where that makes the lists run under NCCL, which the checker proves
  // (schedule_check.h). Only there: the exchange is waited for whole, so on MPI too a paired send
  // waits for its receive, where a lone one never holds its rank up before its release.
  bool exchanges = false;

  int stages() const { return static_cast<int>(stage_rank.size()); }
};

// The names make_schedule knows.
std::vector<std::string> schedule_names();
// The schedule `name` for p ranks, m micro-batches and v virtual stages per rank (v > 1 for
// interleaved only). Throws dt::ConfigError naming the schedules, or the counts that work.
Schedule make_schedule(std::string_view name, int ranks, int micro_batches, int virtual_stages = 1);

// The most micro-batches whose activations stage s holds at once under `schedule`: each from its
// forward to its stage's last backward action (backward, or backward_weight after
// backward_input), where the executor releases it. A rank's stages' add up to at most its promise;
// each stage's activation store grows to its own (plan/memory.h counts them).
int stage_in_flight(const Schedule& schedule, int s);

// Whether action i of rank `rank`'s list is a send that goes out in one exchange with the receive
// right after it (Schedule::exchanges): a function of the schedule alone, so that every rank and
// the checker see the same pairs.
bool exchanged_with_next(const Schedule& schedule, int rank, size_t i);

// Inserts the sends and receives into per-rank orders of compute actions (see above).
std::vector<std::vector<Action>> with_communication(const std::vector<std::vector<Action>>& compute,
                                                    const std::vector<int>& stage_rank);

}  // namespace dt::pipeline
