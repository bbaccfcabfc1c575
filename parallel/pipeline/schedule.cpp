#include "parallel/pipeline/schedule.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/suggest.h"

namespace dt::pipeline {

std::string_view op_name(Op op) {
  switch (op) {
    case Op::forward: return "forward";
    case Op::backward: return "backward";
    case Op::backward_input: return "backward_input";
    case Op::backward_weight: return "backward_weight";
    case Op::send_forward: return "send_forward";
    case Op::recv_forward: return "recv_forward";
    case Op::send_backward: return "send_backward";
    case Op::recv_backward: return "recv_backward";
  }
  return "?";
}

int stage_in_flight(const Schedule& schedule, int s) {
  int held = 0, most = 0;
  for (const Action& a : schedule.actions.at(static_cast<size_t>(schedule.stage_rank.at(static_cast<size_t>(s))))) {
    if (a.stage != s) continue;
    if (a.op == Op::forward) most = std::max(most, ++held);
    if (a.op == Op::backward || a.op == Op::backward_weight) --held;
  }
  return most;
}

bool exchanged_with_next(const Schedule& schedule, int rank, size_t i) {
  const std::vector<Action>& list = schedule.actions[static_cast<size_t>(rank)];
  const auto is = [&](size_t j, Op a, Op b) { return j < list.size() && (list[j].op == a || list[j].op == b); };
  return schedule.exchanges && is(i, Op::send_forward, Op::send_backward) &&
         is(i + 1, Op::recv_forward, Op::recv_backward);
}

std::vector<std::string> schedule_names() { return {"afab", "1f1b", "interleaved", "zb-h1", "zb-v"}; }

std::vector<std::vector<Action>> with_communication(const std::vector<std::vector<Action>>& compute,
                                                    const std::vector<int>& stage_rank) {
  const int S = static_cast<int>(stage_rank.size());
  // Each send after what it sends, each receive just before its use.
  std::vector<std::vector<Action>> placed(compute.size());
  for (size_t r = 0; r < compute.size(); ++r)
    for (const Action& a : compute[r]) {
      const int s = a.stage, k = a.micro_batch;
      const bool from_before = s > 0 && stage_rank[s - 1] != stage_rank[s];
      const bool to_after = s + 1 < S && stage_rank[s + 1] != stage_rank[s];
      const bool takes_gradient = a.op == Op::backward || a.op == Op::backward_input;
      if (a.op == Op::forward && from_before) placed[r].push_back({Op::recv_forward, s, k});
      if (takes_gradient && to_after) placed[r].push_back({Op::recv_backward, s, k});
      placed[r].push_back(a);
      if (a.op == Op::forward && to_after) placed[r].push_back({Op::send_forward, s, k});
      if (takes_gradient && from_before) placed[r].push_back({Op::send_backward, s, k});
    }
  // Messages between two ranks are matched in the order they were sent (NCCL; MPI with one tag),
  // so a receive first takes every message its peer sent before the one it needs. That waits no
  // longer: the needed message arrives after them.
  const auto receive_of = [&](const Action& send) {
    return send.op == Op::send_forward ? Action{Op::recv_forward, send.stage + 1, send.micro_batch}
                                       : Action{Op::recv_backward, send.stage - 1, send.micro_batch};
  };
  const auto sender_of = [&](const Action& recv) {
    return stage_rank[recv.op == Op::recv_forward ? recv.stage - 1 : recv.stage + 1];
  };
  std::map<std::pair<int, int>, std::vector<Action>> in_send_order;  // (from, to) -> receives
  for (size_t r = 0; r < placed.size(); ++r)
    for (const Action& a : placed[r])
      if (a.op == Op::send_forward || a.op == Op::send_backward) {
        const Action recv = receive_of(a);
        in_send_order[{static_cast<int>(r), stage_rank[recv.stage]}].push_back(recv);
      }
  std::vector<std::vector<Action>> out(placed.size());
  for (size_t r = 0; r < placed.size(); ++r) {
    std::map<int, size_t> next;  // per sender: the next message in its order
    std::set<std::pair<int, int>> taken;  // receives done early: (stage, micro-batch) with the op's sign
    const auto key = [](const Action& a) { return std::pair{a.op == Op::recv_forward ? a.stage : -a.stage - 1, a.micro_batch}; };
    for (const Action& a : placed[r]) {
      if (a.op != Op::recv_forward && a.op != Op::recv_backward) {
        out[r].push_back(a);
        continue;
      }
      if (taken.count(key(a))) continue;
      const int from = sender_of(a);
      const std::vector<Action>& order = in_send_order[{from, static_cast<int>(r)}];
      for (size_t& i = next[from]; i < order.size();) {
        const Action& m = order[i++];
        out[r].push_back(m);
        taken.insert(key(m));
        if (m == a) break;
      }
    }
  }
  return out;
}

namespace {

Schedule skeleton(std::string name, int p, int m, int v) {
  Schedule s{.name = std::move(name), .ranks = p, .micro_batches = m, .virtual_stages = v, .stage_rank = {},
             .actions = {}, .promised_in_flight = std::vector<int>(static_cast<size_t>(p), 0)};
  for (int stage = 0; stage < p * v; ++stage) s.stage_rank.push_back(stage % p);
  return s;
}

// All forwards, then all backwards.
Schedule afab(int p, int m) {
  Schedule s = skeleton("afab", p, m, 1);
  std::vector<std::vector<Action>> compute(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    for (int k = 0; k < m; ++k) compute[r].push_back({Op::forward, r, k});
    for (int k = 0; k < m; ++k) compute[r].push_back({Op::backward, r, k});
    s.promised_in_flight[r] = m;
  }
  s.actions = with_communication(compute, s.stage_rank);
  s.exchanges = true;
  return s;
}

// 1F1B over the v virtual stages of each rank, in Megatron-LM's order: virtual micro-batch j
// (of m·v) of rank r is micro-batch (j / (p·v))·p + j % p of chunk (j / p) % v forward — the
// chunks in reverse backward — after (p − r − 1)·2 + (v − 1)·p warm-up forwards. With v = 1 it is
// plain 1F1B: p − r − 1 warm-up forwards.
Schedule one_f_one_b(std::string name, int p, int m, int v) {
  Schedule s = skeleton(std::move(name), p, m, v);
  const int M = m * v;
  std::vector<std::vector<Action>> compute(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    const auto micro_batch = [&](int j) { return (j / (p * v)) * p + j % p; };
    const auto forward = [&](int j) { return Action{Op::forward, ((j / p) % v) * p + r, micro_batch(j)}; };
    const auto backward = [&](int j) { return Action{Op::backward, (v - 1 - (j / p) % v) * p + r, micro_batch(j)}; };
    const int warmup = std::min(v == 1 ? p - r - 1 : (p - r - 1) * 2 + (v - 1) * p, M);
    auto& order = compute[r];
    for (int j = 0; j < warmup; ++j) order.push_back(forward(j));
    for (int j = 0; j < M - warmup; ++j) {
      order.push_back(forward(warmup + j));
      order.push_back(backward(j));
    }
    for (int j = M - warmup; j < M; ++j) order.push_back(backward(j));
    s.promised_in_flight[r] = std::min(warmup + 1, M);
  }
  s.actions = with_communication(compute, s.stage_rank);
  // Interleaved, over several virtual stages, can have a rank send twice before receiving what its
  // peer sent before receiving the first (schedule_check.h): pairs would not undo that.
  s.exchanges = v == 1;
  return s;
}

// The zero-bubble schedules by list scheduling, with unit times for F (forward), I (input pass)
// and W (weight pass). Each rank, when idle, runs the first possible of:
//   a weight pass, when `weight_bound` are pending;
//   an input pass, of its deepest stage that has one ready (micro-batches in order per stage);
//   a forward, of its deepest stage that has one ready, while fewer than `forward_bound` of its
//   stages' micro-batches wait for their input pass;
//   its oldest pending weight pass.
// The input passes so travel back without waiting for weight passes, which fill the waits. A
// micro-batch's stage activations are held from its forward to its weight pass: at most
// forward_bound + weight_bound − 1 at once on a rank (the promise; the paper counts what a
// pending weight pass keeps as less than a whole micro-batch's activations, here it is counted
// whole).
Schedule zero_bubble(std::string name, int p, int m, std::vector<int> stage_rank, const std::vector<int>& forward_bound,
                     const std::vector<int>& weight_bound) {
  Schedule s = skeleton(std::move(name), p, m, 1);
  s.stage_rank = std::move(stage_rank);
  const int S = s.stages();
  s.virtual_stages = S / p;
  constexpr double kNever = std::numeric_limits<double>::infinity();
  // Finish times of each stage's forwards and input passes.
  std::vector<std::vector<double>> f_done(S, std::vector<double>(m, kNever)), i_done = f_done;
  std::vector<int> next_f(S, 0), next_i(S, 0), waiting(p, 0);  // waiting: forwards awaiting their input pass
  std::vector<std::deque<Action>> pending_w(p);
  std::vector<std::vector<int>> stages_of(p);  // deepest first
  for (int st = S - 1; st >= 0; --st) stages_of[s.stage_rank[st]].push_back(st);
  std::vector<double> free_at(p, 0);
  std::vector<std::vector<Action>> compute(static_cast<size_t>(p));
  int remaining = 3 * S * m;
  double t = 0;
  while (remaining > 0) {
    for (int r = 0; r < p; ++r) {
      if (free_at[r] > t) continue;
      std::optional<Action> a;
      if (static_cast<int>(pending_w[r].size()) >= weight_bound[r]) {
        a = pending_w[r].front();
        pending_w[r].pop_front();
      }
      for (const int st : stages_of[r]) {  // an input pass
        const int k = next_i[st];
        if (a || k >= m || f_done[st][k] > t || (st + 1 < S && i_done[st + 1][k] > t)) continue;
        a = Action{Op::backward_input, st, k};
        i_done[st][k] = t + 1;
        pending_w[r].push_back({Op::backward_weight, st, k});
        --waiting[r];
        ++next_i[st];
      }
      for (const int st : stages_of[r]) {  // a forward
        const int k = next_f[st];
        if (a || k >= m || waiting[r] >= forward_bound[r] || (st > 0 && f_done[st - 1][k] > t)) continue;
        a = Action{Op::forward, st, k};
        f_done[st][k] = t + 1;
        ++waiting[r];
        ++next_f[st];
      }
      if (!a && !pending_w[r].empty()) {
        a = pending_w[r].front();
        pending_w[r].pop_front();
      }
      if (!a) continue;
      compute[r].push_back(*a);
      free_at[r] = t + 1;
      --remaining;
    }
    // The next moment something can change: a rank becomes free.
    double next = kNever;
    for (int r = 0; r < p; ++r)
      if (free_at[r] > t) next = std::min(next, free_at[r]);
    DT_CHECK(next < kNever, s.name, " list scheduling stalled at time ", t);
    t = next;
  }
  for (int r = 0; r < p; ++r)
    s.promised_in_flight[r] = std::min(forward_bound[r] + weight_bound[r] - 1, m * static_cast<int>(stages_of[r].size()));
  s.actions = with_communication(compute, s.stage_rank);
  return s;
}

// ZB-H1: 1F1B's placement and forward count (p − r waiting on rank r), up to p weight passes
// pending; at unit times a third of 1F1B's bubble.
Schedule zb_h1(int p, int m) {
  std::vector<int> placement, forwards, weights(static_cast<size_t>(p), p);
  for (int r = 0; r < p; ++r) placement.push_back(r), forwards.push_back(p - r);
  Schedule s = zero_bubble("zb-h1", p, m, placement, forwards, weights);
  s.exchanges = true;
  return s;
}

// ZB-V: two stages per rank in a V — stage r and stage 2p − 1 − r on rank r, so that the first
// and the last stage share rank 0 — each rank with up to 2p of its stages' micro-batches waiting
// for their input pass (1F1B's memory: each stage is half of 1F1B's) and 2p weight passes pending.
Schedule zb_v(int p, int m) {
  std::vector<int> placement(static_cast<size_t>(2 * p)), bound(static_cast<size_t>(p), 2 * p);
  for (int r = 0; r < p; ++r) placement[r] = r, placement[2 * p - 1 - r] = r;
  return zero_bubble("zb-v", p, m, placement, bound, bound);
}

}  // namespace

Schedule make_schedule(std::string_view name, int ranks, int micro_batches, int virtual_stages) {
  if (ranks < 1 || micro_batches < 1 || virtual_stages < 1)
    throw ConfigError(str("a pipeline schedule needs at least one rank, micro-batch and virtual stage; got ", ranks,
                          ", ", micro_batches, " and ", virtual_stages));
  if (name != "interleaved" && virtual_stages != 1)
    throw ConfigError(str("the ", name, " schedule runs one stage per rank; virtual stages (", virtual_stages,
                          ") are for the interleaved schedule"));
  if (name == "afab") return afab(ranks, micro_batches);
  if (name == "1f1b") return one_f_one_b("1f1b", ranks, micro_batches, 1);
  if (name == "interleaved") {
    if (micro_batches % ranks != 0)
      throw ConfigError(str("the interleaved schedule takes micro-batches in groups of the ", ranks,
                            " pipeline ranks, and ", micro_batches, " is not a multiple of ", ranks, "; use ",
                            micro_batches / ranks * ranks > 0 ? str(micro_batches / ranks * ranks, " or ") : "",
                            (micro_batches / ranks + 1) * ranks, " micro-batches"));
    return one_f_one_b("interleaved", ranks, micro_batches, virtual_stages);
  }
  if (name == "zb-h1") return zb_h1(ranks, micro_batches);
  if (name == "zb-v") return zb_v(ranks, micro_batches);
  const std::vector<std::string> names = schedule_names();
  std::string list;
  for (const std::string& n : names) list += str(list.empty() ? "" : ", ", n);
  const std::string close = closest_match(name, names);
  throw ConfigError(str("no pipeline schedule named '", name, "'", close.empty() ? "" : str(" (did you mean '", close, "'?)"),
                        "; the schedules are ", list));
}

}  // namespace dt::pipeline
