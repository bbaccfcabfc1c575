#include "parallel/pipeline/executor.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "core/device.h"
#include "core/error.h"
#include "core/trace.h"

namespace dt::pipeline {

namespace {

// The stage a sent tensor goes to.
int receiver(Op op, int from) { return op == Op::send_forward ? from + 1 : from - 1; }

Buffer copy_of(Tensor t) {
  Buffer b(t.bytes(), MemTag::communication, t.device, false);
  copy_bytes(b.data(), t.device, t.data, t.device, t.bytes());
  return b;
}

}  // namespace

void InProcessTransport::send(Op op, int from, int k, Tensor t, Pairing /*pairing*/) {
  sent_[{op, receiver(op, from), k}] = copy_of(t);
}

bool InProcessTransport::try_recv(Op op, int to, int k, Tensor t) {
  const Op sent = op == Op::recv_forward ? Op::send_forward : Op::send_backward;
  const auto it = sent_.find({sent, to, k});
  if (it == sent_.end()) return false;
  DT_CHECK(it->second.bytes() == t.bytes(), "a received tensor of ", it->second.bytes(), " bytes for ", t.describe());
  copy_bytes(t.data, t.device, it->second.data(), t.device, t.bytes());
  sent_.erase(it);
  return true;
}

void CommunicatorTransport::send(Op op, int from, int k, Tensor t, Pairing pairing) {
  // Messages between two ranks are matched in order (the schedule sends and receives in one).
  DT_CHECK(!held_, "a send of stage ", from, " micro-batch ", k, " while another waits for its receive");
  Buffer copy = copy_of(t);
  const Tensor view = copy.view(t.dtype, t.shape);
  const int to = stage_rank_[receiver(op, from)];
  Sending& sending = sending_.emplace(std::tuple{op, from, k}, Sending{std::move(copy), {}}).first->second;
  if (pairing == Pairing::with_next_receive)
    held_ = Held{view, to, &sending.handle};
  else
    sending.handle = group_.send(view, to);
}

void CommunicatorTransport::release(Op op, int from, int k) {
  const auto it = sending_.find({op, from, k});
  DT_CHECK(it != sending_.end(), "releasing ", op_name(op), " of stage ", from, " micro-batch ", k, ", not sending");
  it->second.handle.wait();  // received already: returns at once
  sending_.erase(it);
}

bool CommunicatorTransport::try_recv(Op op, int to, int /*k*/, Tensor t) {
  const int from = stage_rank_[op == Op::recv_forward ? to - 1 : to + 1];
  if (!held_) {
    group_.recv(t, from).wait();
    return true;
  }
  // The held send's handle is the exchange's: its release waits for the receive too, done by then.
  *held_->handle = group_.exchange(held_->copy, held_->to, t, from);
  held_->handle->wait();
  held_.reset();
  return true;
}

void CommunicatorTransport::finish() {
  DT_CHECK(!held_, "the step ended with a send waiting for a receive");
  for (auto& [message, sending] : sending_) sending.handle.wait();
  sending_.clear();
}

PipelineRank::PipelineRank(const Schedule& schedule, int rank, std::vector<Stage*> stages, const FlatTensors& weights,
                           const FlatTensors& grads, Transport& transport, std::vector<MicroBatch> micro_batches,
                           float loss_scale)
    : schedule_(schedule),
      rank_(rank),
      stages_(std::move(stages)),
      weights_(weights),
      grads_(grads),
      transport_(transport),
      micro_batches_(std::move(micro_batches)),
      loss_scale_(loss_scale),
      losses_(micro_batches_.size(), 0.0) {
  for (const std::vector<Action>& list : schedule.actions)
    for (const Action& a : list)
      training_ = training_ || (a.op != Op::forward && a.op != Op::send_forward && a.op != Op::recv_forward);
  DT_CHECK(static_cast<int>(stages_.size()) == schedule.stages() &&
               static_cast<int>(micro_batches_.size()) == schedule.micro_batches,
           "a pipeline rank needs a stage slot per stage and data per micro-batch");
  for (int s = 0; s < schedule.stages(); ++s)
    DT_CHECK((stages_[s] != nullptr) == (schedule.stage_rank[s] == rank), "stage ", s, " on rank ",
             schedule.stage_rank[s], ", given to rank ", rank);
  for (const SendRelease& r : send_releases(schedule, rank)) releases_.emplace(r.after, r.send);
  for (Stage* stage : stages_)
    if (stage != nullptr) stage->set_loss_scale(loss_scale_);
}

bool PipelineRank::advance() {
  const size_t before = next_;
  while (!done()) {
    const Action& a = schedule_.actions[rank_][next_];
    const bool compute = !is_transfer(a.op);
    // Compute is a span of the trace (core/trace.h), named as the schedule's picture names it.
    std::optional<trace::ComputeScope> span;
    if (compute) span.emplace(str(op_name(a.op), " stage ", a.stage, " micro-batch ", a.micro_batch));
    const auto start = std::chrono::steady_clock::now();
    if (!run(a)) break;
    const auto [first, end] = releases_.equal_range(next_);
    for (auto it = first; it != end; ++it) transport_.release(it->second.op, it->second.stage, it->second.micro_batch);
    if (compute) {
      Busy& b = busy_[a.op];
      b.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ++b.actions;
    }
    ++next_;
  }
  return next_ > before;
}

bool PipelineRank::run(const Action& a) {
  const int s = a.stage, k = a.micro_batch, S = schedule_.stages();
  const MicroBatch& data = micro_batches_[k];
  Stage* stage = stages_[s];
  // What crosses between stages: (rows, C), all of the micro-batch's rows or with sequence
  // parallelism this tensor-parallel rank's part.
  const Shape boundary{stage->boundary_rows(data.tokens.numel()), weights_.layout().config().d_model};
  const auto activation = [&](std::map<std::pair<int, int>, Buffer>& into) {
    Buffer& b = into[{s, k}];
    if (b.data() == nullptr)
      b = Buffer(static_cast<size_t>(boundary.numel()) * dtype_size(weights_.dtype()), MemTag::communication,
                 weights_.device(), false);
    return b.view(weights_.dtype(), boundary);
  };
  const Tensor tokens = s == 0 ? data.tokens : Tensor{};
  const Pairing pairing =
      exchanged_with_next(schedule_, rank_, next_) ? Pairing::with_next_receive : Pairing::alone;
  switch (a.op) {
    case Op::recv_forward: return transport_.try_recv(a.op, s, k, activation(inputs_));
    case Op::recv_backward: return transport_.try_recv(a.op, s, k, activation(gradients_));
    case Op::send_forward:
      transport_.send(a.op, s, k, outputs_.at({s, k}), pairing);
      outputs_.erase({s, k});
      if (!training_) stage->release(k);  // sent from a copy
      return true;
    case Op::send_backward: {
      const Buffer& din = input_gradients_.at({s, k});
      transport_.send(a.op, s, k, din.view(weights_.dtype(), boundary), pairing);
      input_gradients_.erase({s, k});
      return true;
    }
    case Op::forward: {
      // Its input: the tokens, the previous stage's output on this rank, or what was received.
      const bool local = s > 0 && stages_[s - 1] != nullptr;
      const Tensor in = s == 0 ? data.tokens
                        : local ? outputs_.at({s - 1, k})
                                : inputs_.at({s, k}).view(weights_.dtype(), boundary);
      const Tensor out = stage->forward(k, in, weights_, /*backward_follows=*/training_, data.tokens.shape);
      if (local) {
        outputs_.erase({s - 1, k});
        if (!training_) stages_[s - 1]->release(k);
      }
      inputs_.erase({s, k});
      if (s + 1 < S) {
        outputs_[{s, k}] = out;  // a view of the stage's activations, kept until sent or used
      } else {
        losses_[k] = stage->loss(k, data.targets, loss_scale_, /*with_gradient=*/training_);
        if (!training_) stage->release(k);
      }
      return true;
    }
    case Op::backward:
    case Op::backward_input: {
      // The output's gradient: none after the loss, the next stage's on this rank, or received.
      const bool local = s + 1 < S && stages_[s + 1] != nullptr;
      Tensor dout;
      if (s + 1 < S)
        dout = (local ? input_gradients_.at({s + 1, k}) : gradients_.at({s, k})).view(weights_.dtype(), boundary);
      const Tensor din = stage->backward(k, dout, tokens, weights_, grads_, a.op == Op::backward);
      if (local) input_gradients_.erase({s + 1, k});
      gradients_.erase({s, k});
      // The input's gradient, kept apart: the stage's own is valid only until its next backward.
      if (s > 0) input_gradients_[{s, k}] = copy_of(din);
      if (a.op == Op::backward) stage->release(k);
      return true;
    }
    case Op::backward_weight:
      stage->backward_weight(k, tokens, grads_);
      stage->release(k);
      return true;
  }
  return true;
}

std::vector<SendRelease> send_releases(const Schedule& schedule, int rank) {
  const auto receiving_stage = [](const Action& send) {
    return send.op == Op::send_forward ? send.stage + 1 : send.stage - 1;
  };
  const auto receive_of = [&](const Action& send) {
    return std::tuple{send.op == Op::send_forward ? Op::recv_forward : Op::recv_backward, receiving_stage(send),
                      send.micro_batch};
  };
  // Where this rank's list holds each of its receives.
  const std::vector<Action>& mine = schedule.actions[rank];
  std::map<std::tuple<Op, int, int>, size_t> my_receive;
  for (size_t i = 0; i < mine.size(); ++i) my_receive[{mine[i].op, mine[i].stage, mine[i].micro_batch}] = i;
  // For each peer: where it receives what this rank sends, and from each position of its list
  // the first message it sends this rank (a reverse sweep).
  struct Peer {
    std::map<std::tuple<Op, int, int>, size_t> receives;
    std::vector<const Action*> next_send_back;
  };
  std::map<int, Peer> peers;
  const auto peer = [&](int r) -> const Peer& {
    auto [it, made] = peers.try_emplace(r);
    if (!made) return it->second;
    const std::vector<Action>& list = schedule.actions[r];
    it->second.next_send_back.assign(list.size() + 1, nullptr);
    for (size_t j = list.size(); j-- > 0;) {
      const Action& b = list[j];
      const bool back = (b.op == Op::send_forward || b.op == Op::send_backward) &&
                        schedule.stage_rank[receiving_stage(b)] == rank;
      it->second.next_send_back[j] = back ? &b : it->second.next_send_back[j + 1];
      it->second.receives[{b.op, b.stage, b.micro_batch}] = j;
    }
    return it->second;
  };
  std::vector<SendRelease> releases;
  for (const Action& a : mine) {
    if (a.op != Op::send_forward && a.op != Op::send_backward) continue;
    const Peer& p = peer(schedule.stage_rank[receiving_stage(a)]);
    // The peer's receive of it, then the first message the peer sends this rank after it.
    const Action* back = p.next_send_back[p.receives.at(receive_of(a)) + 1];
    if (back != nullptr) releases.push_back({a, my_receive.at(receive_of(*back))});
  }
  return releases;
}

BoundaryBuffers boundary_buffers(const Schedule& schedule, int rank) {
  const int S = schedule.stages();
  const auto here = [&](int s) { return s >= 0 && s < S && schedule.stage_rank[s] == rank; };
  std::multimap<size_t, Action> releases;
  for (const SendRelease& r : send_releases(schedule, rank)) releases.emplace(r.after, r.send);
  int held = 0, sent = 0, peak = 0, at_loss = 0;
  const auto allocate = [&] { peak = std::max(peak, ++held + sent); };
  const std::vector<Action>& list = schedule.actions[rank];
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    const int s = a.stage;
    switch (a.op) {
      case Op::recv_forward:
      case Op::recv_backward:
        allocate();
        break;
      case Op::send_forward:  // the output is a view of the stage's activations; its copy stays
        peak = std::max(peak, held + ++sent);
        break;
      case Op::send_backward:  // the input gradient's copy stays, the input gradient goes
        peak = std::max(peak, held + ++sent);
        --held;
        break;
      case Op::forward:
        if (s > 0 && !here(s - 1)) --held;  // the received input, freed after the forward
        if (s == S - 1) at_loss = std::max(at_loss, held + sent);  // the loss follows
        break;
      case Op::backward:
      case Op::backward_input:
        if (s + 1 < S) --held;  // the received output gradient, or the next stage's input gradient
        if (s > 0) allocate();  // this stage's input gradient
        break;
      case Op::backward_weight:
        break;
    }
    sent -= static_cast<int>(releases.count(i));
  }
  return {peak, at_loss};
}

void run_in_turn(std::vector<PipelineRank>& ranks) {
  for (;;) {
    bool all_done = true, progress = false;
    for (PipelineRank& r : ranks) {
      progress = r.advance() || progress;
      all_done = all_done && r.done();
    }
    if (all_done) return;
    DT_CHECK(progress, "the pipeline's ranks stalled: every one waits for a receive");
  }
}

void run_alone(PipelineRank& rank) {
  while (!rank.done()) DT_CHECK(rank.advance(), "a pipeline rank could not go on");
}

}  // namespace dt::pipeline
