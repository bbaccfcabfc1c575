#include "parallel/pipeline/schedule.h"

#include <algorithm>
#include <deque>
#include <limits>

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

std::vector<std::string> schedule_names() { return {"afab", "1f1b", "interleaved", "zb-h1"}; }

std::vector<std::vector<Action>> with_communication(const std::vector<std::vector<Action>>& compute,
                                                    const std::vector<int>& stage_rank) {
  const int S = static_cast<int>(stage_rank.size());
  std::vector<std::vector<Action>> out(compute.size());
  for (size_t r = 0; r < compute.size(); ++r)
    for (const Action& a : compute[r]) {
      const int s = a.stage, k = a.micro_batch;
      const bool from_before = s > 0 && stage_rank[s - 1] != stage_rank[s];
      const bool to_after = s + 1 < S && stage_rank[s + 1] != stage_rank[s];
      const bool takes_gradient = a.op == Op::backward || a.op == Op::backward_input;
      if (a.op == Op::forward && from_before) out[r].push_back({Op::recv_forward, s, k});
      if (takes_gradient && to_after) out[r].push_back({Op::recv_backward, s, k});
      out[r].push_back(a);
      if (a.op == Op::forward && to_after) out[r].push_back({Op::send_forward, s, k});
      if (takes_gradient && from_before) out[r].push_back({Op::send_backward, s, k});
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
  return s;
}

// ZB-H1 by list scheduling with unit times for F, B (the input pass) and W (the weight pass):
// each rank, when idle, runs the first possible of: a weight pass when p are pending; its next
// input pass; its next forward while fewer than p − r micro-batches wait for their input pass
// (1F1B's count); its oldest pending weight pass. The input passes so travel back without
// waiting for weight passes, which fill the waits; at unit times the bubble is (p − 1) units, a
// third of 1F1B's. The price is memory: a micro-batch is held from its forward to its weight
// pass, up to 2p − 1 − r of them on rank r (the paper's ZB-H1 counts what a pending weight pass
// keeps as less than a whole micro-batch's activations; here it is counted whole).
Schedule zb_h1(int p, int m) {
  Schedule s = skeleton("zb-h1", p, m, 1);
  constexpr double kNever = std::numeric_limits<double>::infinity();
  // Finish times: of forward and input gradient of (stage, micro-batch).
  std::vector<std::vector<double>> f_done(p, std::vector<double>(m, kNever)), b_done = f_done;
  std::vector<int> next_f(p, 0), next_b(p, 0), in_flight(p, 0);  // in_flight: forwards awaiting their input pass
  std::vector<std::deque<int>> pending_w(p);
  std::vector<double> free_at(p, 0);
  std::vector<std::vector<Action>> compute(static_cast<size_t>(p));
  int remaining = 3 * p * m;
  double t = 0;
  while (remaining > 0) {
    for (int r = 0; r < p; ++r) {
      if (free_at[r] > t) continue;
      const int kb = next_b[r], kf = next_f[r];
      const bool b_ready = kb < m && f_done[r][kb] <= t && (r == p - 1 || b_done[r + 1][kb] <= t);
      const bool f_ready = kf < m && in_flight[r] < p - r && (r == 0 || f_done[r - 1][kf] <= t);
      Action a{};
      if (static_cast<int>(pending_w[r].size()) >= p) {
        a = {Op::backward_weight, r, pending_w[r].front()};
        pending_w[r].pop_front();
      } else if (b_ready) {
        a = {Op::backward_input, r, kb};
        b_done[r][kb] = t + 1;
        pending_w[r].push_back(kb);
        --in_flight[r];
        ++next_b[r];
      } else if (f_ready) {
        a = {Op::forward, r, kf};
        f_done[r][kf] = t + 1;
        ++in_flight[r];
        ++next_f[r];
      } else if (!pending_w[r].empty()) {
        a = {Op::backward_weight, r, pending_w[r].front()};
        pending_w[r].pop_front();
      } else {
        continue;
      }
      compute[r].push_back(a);
      free_at[r] = t + 1;
      --remaining;
    }
    // The next moment something can change: a rank becomes free.
    double next = kNever;
    for (int r = 0; r < p; ++r)
      if (free_at[r] > t) next = std::min(next, free_at[r]);
    DT_CHECK(next < kNever, "zb-h1 list scheduling stalled at time ", t);
    t = next;
  }
  for (int r = 0; r < p; ++r) s.promised_in_flight[r] = std::min(2 * p - 1 - r, m);
  s.actions = with_communication(compute, s.stage_rank);
  return s;
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
  const std::vector<std::string> names = schedule_names();
  std::string list;
  for (const std::string& n : names) list += str(list.empty() ? "" : ", ", n);
  const std::string close = closest_match(name, names);
  throw ConfigError(str("no pipeline schedule named '", name, "'", close.empty() ? "" : str(" (did you mean '", close, "'?)"),
                        "; the schedules are ", list));
}

}  // namespace dt::pipeline
