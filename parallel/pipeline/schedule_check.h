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
