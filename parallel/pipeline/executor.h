// The one executor: it runs any schedule's action lists (parallel/pipeline/schedule.h) on the
// stages that carry them. A rank's list is interpreted action by action — forward, loss (on the
// last stage, after its forward), backward, or backward_input and backward_weight, sends and
// receives of activations and their gradients — by PipelineRank; where the data of a receive is
// not there yet, the rank waits. How the data travels is a Transport: within one process for
// tests (every rank's stages in one process, run in turn: InProcessTransport), over a
// communicator's sends and receives between processes.
//
// Every micro-batch's loss is scaled by `loss_scale` (1 / the global batch's target count, as
// train/step.h does), so the gradients are those of the mean over all micro-batches.
#pragma once

#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "core/tensor.h"
#include "model/parameters.h"
#include "model/stage.h"
#include "parallel/pipeline/schedule.h"

namespace dt::pipeline {

// How a send goes out: at once, or with the receive right after it on the rank's list, in one
// exchange (exchanged_with_next in schedule.h), so that under NCCL neither waits behind the other.
enum class Pairing { alone, with_next_receive };

// Where a sent tensor waits for its receive.
class Transport {
 public:
  virtual ~Transport() = default;
  // Sends `t` (activations forward, or their gradient backward) of micro-batch k from stage `from`;
  // with_next_receive: it may go out only with the next try_recv.
  virtual void send(Op op, int from, int k, Tensor t, Pairing pairing) = 0;
  // Receives into `t` what `send` of the matching op sent to stage `to`; false while it has not
  // been sent.
  virtual bool try_recv(Op op, int to, int k, Tensor t) = 0;
  // The send (op, from, k) has been received (the schedule proves it): its copy can go.
  virtual void release(Op /*op*/, int /*from*/, int /*k*/) {}
};

// A send of rank `rank`'s list and the action after which its copy is released: the receive of
// the first message its receiver sends back after receiving it (that the receiver sent it proves
// it received ours: receives wait). A send with no such receive is released when the step ends.
struct SendRelease {
  Action send;
  size_t after;  // an index into the rank's action list
};
std::vector<SendRelease> send_releases(const Schedule& schedule, int rank);

// Every rank in one process: a sent tensor is copied aside until received (at once, paired or not).
class InProcessTransport final : public Transport {
 public:
  void send(Op op, int from, int k, Tensor t, Pairing pairing) override;
  bool try_recv(Op op, int to, int k, Tensor t) override;

 private:
  std::map<std::tuple<Op, int, int>, Buffer> sent_;  // by (op, receiving stage, micro-batch)
};

// Ranks in their own processes, over a communicator whose ranks are the schedule's: a send
// starts from a copy, freed when the schedule proves it received (release) or when the step ends
// (finish()): at once, or paired with the next receive in one exchange (Communicator::exchange);
// a receive waits for its data (and a paired send for its receive).
class CommunicatorTransport final : public Transport {
 public:
  CommunicatorTransport(Communicator& group, std::vector<int> stage_rank)
      : group_(group), stage_rank_(std::move(stage_rank)) {}
  void send(Op op, int from, int k, Tensor t, Pairing pairing) override;
  bool try_recv(Op op, int to, int k, Tensor t) override;
  void release(Op op, int from, int k) override;
  // Waits for every send started.
  void finish();

 private:
  struct Sending {
    Buffer copy;
    CollectiveHandle handle;  // none while held for the next receive
  };
  // A send held for the next receive: its copy, its peer and where its handle goes.
  struct Held {
    Tensor copy;
    int to;
    CollectiveHandle* handle;
  };
  Communicator& group_;
  std::vector<int> stage_rank_;
  std::map<std::tuple<Op, int, int>, Sending> sending_;  // by (op, sending stage, micro-batch)
  std::optional<Held> held_;
};

// One rank of a pipeline: its stages (by stage index: stages[s] for the stages the schedule puts
// on this rank, nullptr elsewhere), over the weights and gradients they share.
class PipelineRank {
 public:
  PipelineRank(const Schedule& schedule, int rank, std::vector<Stage*> stages, const FlatTensors& weights,
               const FlatTensors& grads, Transport& transport, std::vector<MicroBatch> micro_batches,
               float loss_scale);
  // Runs actions until the next one must wait or the list ends; returns whether it ran any.
  bool advance();
  bool done() const { return next_ >= schedule_.actions[rank_].size(); }
  // The micro-batches' summed losses (the last stage's rank), by micro-batch.
  const std::vector<double>& losses() const { return losses_; }
  // Seconds spent in each kind of compute action so far (forward, backward, backward_input,
  // backward_weight), and how many ran: what a bubble is measured against.
  struct Busy {
    double seconds = 0;
    int actions = 0;
  };
  const std::map<Op, Busy>& busy() const { return busy_; }

 private:
  bool run(const Action& a);  // a: the list's action next_; false: a receive waits

  const Schedule& schedule_;
  int rank_;
  std::vector<Stage*> stages_;
  const FlatTensors& weights_;
  const FlatTensors& grads_;
  Transport& transport_;
  std::vector<MicroBatch> micro_batches_;
  float loss_scale_;
  // Whether the schedule runs backward; forwards alone (evaluation) free each micro-batch's
  // activations once they have been passed on.
  bool training_ = false;
  size_t next_ = 0;
  std::multimap<size_t, Action> releases_;  // by the action after which each send is released
  std::vector<double> losses_;
  // By (stage, micro-batch): what a stage received (its input; its output's gradient), its forward's
  // output (a view of its activations) and its input's gradient, until used or sent.
  std::map<std::pair<int, int>, Buffer> inputs_, gradients_, input_gradients_;
  std::map<std::pair<int, int>, Tensor> outputs_;
  std::map<Op, Busy> busy_;
};

// The most boundary tensors ((rows, C) in the compute precision, as a stage receives and sends
// them) rank `rank` holds at once while it runs its list of `schedule` over a
// CommunicatorTransport: each received input or output gradient until its stage uses it, each
// input gradient until it is sent or used, and each copy it sends until its release
// (send_releases); and how many it holds while its last stage's forward computes the loss. The
// walk follows PipelineRank::run's allocations one for one; plan/memory.h counts the result.
struct BoundaryBuffers {
  int peak = 0, at_loss = 0;
};
BoundaryBuffers boundary_buffers(const Schedule& schedule, int rank);

// Runs every rank of `ranks` in one process until all are done; throws dt::Error if they stall.
void run_in_turn(std::vector<PipelineRank>& ranks);
// Runs this process's rank to the end of its list (its receives wait for their data).
void run_alone(PipelineRank& rank);

}  // namespace dt::pipeline
