// The proof that a schedule (parallel/pipeline/schedule.h) can run: its per-rank lists, run by a
// simulation of the executor with unit times, without a model.
//
//   complete      every stage runs forward and backward (or backward_input then backward_weight)
//                 of every micro-batch exactly once, on its rank, and every transfer between
//                 ranks has exactly one send and one receive, each on the right rank;
//   in order      the messages from one rank to another are received in the order they are sent
//                 (point-to-point messages are matched in order);
//   dependencies  a forward after the previous stage's forward of the micro-batch, a backward
//                 after its own forward and the next stage's backward (input), a weight pass
//                 after its input pass, a send after what it sends, a receive before its use;
//   no deadlock   with sends that do not block and receives that wait for their send, every
//                 rank reaches the end of its list;
//   memory        no rank holds more micro-batches' stage activations at once (from a forward to
//                 the micro-batch's last backward action of that stage) than the schedule
//                 promises.
//
// It also runs the lists as NCCL does, where a rank's sends and receives run one after another
// and a send waits for its receive (above the eager size), but, in a schedule that pairs them
// (Schedule::exchanges), a send directly followed by a receive runs together with it in one
// exchange. A schedule that pairs must run so (a paired send waits for its receive on MPI too);
// afab, 1f1b and zb-h1 do for every shape. Interleaved and zb-v can wait for ever there, paired or
// not (interleaved over 2 ranks, 4 micro-batches, v 2: rank 0 sends a gradient to rank 1, then an
// activation, and only then receives the gradient rank 1 sent it before receiving ours; a receive
// would have to start before the compute ahead of it): they do not pair, and say so in
// nccl_deadlock.
//
// The simulation also times the schedule, a forward, an input pass and a weight pass one unit
// each (a whole backward two) unless given other times, transfers free: the bubble of each rank is its idle time over its
// busy time, which theory puts at (p − 1)/m for 1F1B and all-forward-all-backward,
// (p − 1)/(v·m) for interleaved, and about a third of 1F1B's for ZB-H1.
#pragma once

#include <string>
#include <vector>

#include "parallel/pipeline/schedule.h"

namespace dt::pipeline {

struct ScheduleCheck {
  // A compute action and when the simulation ran it, in units.
  struct Timed {
    Action action;
    double start = 0, end = 0;
  };
  std::string problem;           // empty when the schedule passes
  std::string nccl_deadlock;     // empty when it runs under NCCL too (above); else who waits
  std::vector<std::vector<Timed>> timeline;  // each rank's compute, in order
  std::vector<int> peak_in_flight;  // per rank
  double makespan = 0;           // in units
  std::vector<double> busy;      // per rank, in units
  // The largest idle-over-busy ratio of any rank.
  double bubble() const;
  bool ok() const { return problem.empty(); }
};

// How long each compute action takes on a rank: units by default (a backward is two passes).
struct PassTimes {
  double forward = 1, backward = 2, backward_input = 1, backward_weight = 1;
  double of(Op op) const;  // 0 for communication
};

// `times`: each rank's pass times for the simulation (none: units). With measured times the
// bubble is the schedule's on ranks that run those passes, transfers free: what a measured
// bubble is compared with beside theory.
ScheduleCheck check_schedule(const Schedule& schedule, const std::vector<PassTimes>& times = {});

}  // namespace dt::pipeline
