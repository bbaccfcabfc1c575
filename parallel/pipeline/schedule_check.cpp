#include "parallel/pipeline/schedule_check.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "core/error.h"

namespace dt::pipeline {

double ScheduleCheck::bubble() const {
  double worst = 0;
  for (const double b : busy) worst = std::max(worst, b > 0 ? (makespan - b) / b : 0.0);
  return worst;
}

double PassTimes::of(Op op) const {
  switch (op) {
    case Op::forward: return forward;
    case Op::backward: return backward;
    case Op::backward_input: return backward_input;
    case Op::backward_weight: return backward_weight;
    default: return 0;
  }
}

namespace {

std::string describe(const Action& a, int rank) {
  return str(op_name(a.op), "(stage ", a.stage, ", micro-batch ", a.micro_batch, ") on rank ", rank);
}

// The other end of a transfer: a send's receive, a receive's send.
Action other_end(const Action& a) {
  switch (a.op) {
    case Op::send_forward: return {Op::recv_forward, a.stage + 1, a.micro_batch};
    case Op::recv_forward: return {Op::send_forward, a.stage - 1, a.micro_batch};
    case Op::send_backward: return {Op::recv_backward, a.stage - 1, a.micro_batch};
    default: return {Op::send_backward, a.stage + 1, a.micro_batch};  // recv_backward
  }
}

// Runs the lists' communication as NCCL runs it: each rank's sends and receives one after another
// in its list's order, a send done only once its receive runs (NCCL's above its eager size; MPI's
// Isend is freer), a send and the receive after it in one exchange (Schedule::exchanges) running
// together. The compute between them waits only for its rank's earlier actions, so it is left
// out. Returns the first transfer of a rank that waits for ever, or an empty string.
std::string nccl_deadlock(const Schedule& s) {
  // Each rank's transfers in the order it starts them: one at a time, or an exchange of two; and
  // where each transfer is (rank, index of its start).
  std::vector<std::vector<std::vector<Action>>> starts(static_cast<size_t>(s.ranks));
  std::map<std::tuple<Op, int, int>, std::pair<int, size_t>> where;
  for (int r = 0; r < s.ranks; ++r) {
    const std::vector<Action>& list = s.actions[r];
    for (size_t i = 0; i < list.size(); ++i) {
      if (!is_transfer(list[i].op)) continue;
      if (i == 0 || !exchanged_with_next(s, r, i - 1)) starts[r].emplace_back();
      starts[r].back().push_back(list[i]);
      where[{list[i].op, list[i].stage, list[i].micro_batch}] = {r, starts[r].size() - 1};
    }
  }
  // A start is done once every other end has been started (it runs until they meet).
  std::vector<size_t> at(static_cast<size_t>(s.ranks), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < s.ranks; ++r)
      for (; at[r] < starts[r].size(); ++at[r], progress = true) {
        const bool met = std::ranges::all_of(starts[r][at[r]], [&](const Action& a) {
          const Action b = other_end(a);
          const auto [q, start] = where.at({b.op, b.stage, b.micro_batch});
          return at[q] >= start;
        });
        if (!met) break;
      }
  }
  for (int r = 0; r < s.ranks; ++r)
    if (at[r] < starts[r].size()) return describe(starts[r][at[r]].front(), r);
  return "";
}

}  // namespace

ScheduleCheck check_schedule(const Schedule& s, const std::vector<PassTimes>& times) {
  ScheduleCheck check;
  const int p = s.ranks, m = s.micro_batches, S = s.stages();
  DT_CHECK(times.empty() || times.size() == static_cast<size_t>(p), "pass times for ", times.size(), " of ", p,
           " ranks");
  const auto cost = [&](Op op, int r) { return times.empty() ? PassTimes{}.of(op) : times[static_cast<size_t>(r)].of(op); };
  check.peak_in_flight.assign(static_cast<size_t>(p), 0);
  check.busy.assign(static_cast<size_t>(p), 0);
  check.timeline.assign(static_cast<size_t>(p), {});
  const auto fail = [&](std::string problem) {
    check.problem = str(s.name, " (p ", p, ", m ", m, ", v ", s.virtual_stages, "): ", problem);
    return check;
  };
  if (static_cast<int>(s.actions.size()) != p || S != p * s.virtual_stages) return fail("wrong number of lists or stages");

  // Completeness: every action once, on its stage's rank; the compute each (stage, micro-batch) needs.
  std::map<std::tuple<Op, int, int>, int> count;
  for (int r = 0; r < p; ++r)
    for (const Action& a : s.actions[r]) {
      if (a.stage < 0 || a.stage >= S || a.micro_batch < 0 || a.micro_batch >= m)
        return fail(str(describe(a, r), " is outside the pipeline"));
      if (s.stage_rank[a.stage] != r) return fail(str(describe(a, r), ": stage ", a.stage, " is rank ", s.stage_rank[a.stage], "'s"));
      if (++count[{a.op, a.stage, a.micro_batch}] > 1) return fail(str(describe(a, r), " appears twice"));
    }
  const auto has = [&](Op op, int stage, int k) { return count.count({op, stage, k}) != 0; };
  for (int stage = 0; stage < S; ++stage)
    for (int k = 0; k < m; ++k) {
      const Action f{Op::forward, stage, k};
      if (!has(Op::forward, stage, k)) return fail(str(describe(f, s.stage_rank[stage]), " is missing"));
      const bool whole = has(Op::backward, stage, k), split = has(Op::backward_input, stage, k);
      if (whole == split || split != has(Op::backward_weight, stage, k))
        return fail(str("stage ", stage, ", micro-batch ", k, " needs one backward, or one backward_input and one "
                        "backward_weight"));
      const bool to_next = stage + 1 < S && s.stage_rank[stage + 1] != s.stage_rank[stage];
      if (to_next != has(Op::send_forward, stage, k) || to_next != has(Op::recv_forward, stage + 1, k) ||
          to_next != has(Op::send_backward, stage + 1, k) || to_next != has(Op::recv_backward, stage, k))
        return fail(str("the transfers between stages ", stage, " and ", stage + 1, " of micro-batch ", k,
                        " are not one send and one receive each way"));
    }

  // Point-to-point messages between two ranks are matched in order (NCCL's and MPI's with one
  // tag): the sends from rank a to rank b, in a's order, must be b's receives from a, in b's.
  std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> sent, received;  // (from, to) -> (stage, k)
  for (int r = 0; r < p; ++r)
    for (const Action& a : s.actions[r]) {
      if (a.op == Op::send_forward) sent[{r, s.stage_rank[a.stage + 1]}].emplace_back(a.stage + 1, a.micro_batch);
      if (a.op == Op::send_backward) sent[{r, s.stage_rank[a.stage - 1]}].emplace_back(-a.stage, a.micro_batch);
      if (a.op == Op::recv_forward) received[{s.stage_rank[a.stage - 1], r}].emplace_back(a.stage, a.micro_batch);
      if (a.op == Op::recv_backward) received[{s.stage_rank[a.stage + 1], r}].emplace_back(-(a.stage + 1), a.micro_batch);
    }
  for (const auto& [pair, messages] : sent)
    if (messages != received[pair])
      return fail(str("rank ", pair.first, " sends to rank ", pair.second, " in another order than rank ", pair.second,
                      " receives: messages between two ranks are matched in order"));

  // Run it: each rank takes its next action when its dependencies have finished; a receive
  // finishes with its send (transfers are free).
  std::map<std::tuple<Op, int, int>, double> done;  // finish times
  const auto finished = [&](Op op, int stage, int k) -> const double* {
    const auto it = done.find({op, stage, k});
    return it == done.end() ? nullptr : &it->second;
  };
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> clock(static_cast<size_t>(p), 0);
  std::vector<int> in_flight(static_cast<size_t>(p), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      while (next[r] < s.actions[r].size()) {
        const Action& a = s.actions[r][next[r]];
        const int st = a.stage, k = a.micro_batch;
        // What must have finished before a starts (nullptr: not yet; the list order does the rest).
        std::vector<const double*> needs;
        bool ready = true;
        const auto need = [&](Op op, int stage) {
          const double* t = finished(op, stage, k);
          if (t == nullptr) ready = false;
          needs.push_back(t);
        };
        const bool local_before = st > 0 && s.stage_rank[st - 1] == r;
        const bool local_after = st + 1 < S && s.stage_rank[st + 1] == r;
        const auto gradient_of = [&](int stage) {
          return has(Op::backward, stage, k) ? Op::backward : Op::backward_input;
        };
        switch (a.op) {
          case Op::forward:
            if (local_before) need(Op::forward, st - 1);
            else if (st > 0) need(Op::recv_forward, st);
            break;
          case Op::backward:
          case Op::backward_input:
            need(Op::forward, st);
            if (local_after) need(gradient_of(st + 1), st + 1);
            else if (st + 1 < S) need(Op::recv_backward, st);
            break;
          case Op::backward_weight: need(Op::backward_input, st); break;
          case Op::send_forward: need(Op::forward, st); break;
          case Op::send_backward: need(gradient_of(st), st); break;
          case Op::recv_forward: need(Op::send_forward, st - 1); break;
          case Op::recv_backward: need(Op::send_backward, st + 1); break;
        }
        if (!ready) {
          // A dependency on this rank's own later action is a wrong order, not a wait.
          const bool own = a.op == Op::send_forward || a.op == Op::send_backward || a.op == Op::backward_weight ||
                           ((a.op == Op::backward || a.op == Op::backward_input) && !finished(Op::forward, st, k)) ||
                           (a.op == Op::forward && local_before) ||
                           ((a.op == Op::backward || a.op == Op::backward_input) && local_after);
          if (own) return fail(str(describe(a, r), " comes before what it needs on its own rank"));
          break;  // a receive, or a compute waiting for one: try the other ranks
        }
        double start = clock[r];
        for (const double* t : needs) start = std::max(start, *t);
        const double end = start + cost(a.op, r);
        check.busy[r] += cost(a.op, r);
        if (cost(a.op, r) > 0) check.timeline[r].push_back({a, start, end});
        clock[r] = a.op == Op::recv_forward || a.op == Op::recv_backward ? start : end;
        done[{a.op, st, k}] = end;
        // Activations held: from the forward to the stage's last backward action.
        if (a.op == Op::forward) check.peak_in_flight[r] = std::max(check.peak_in_flight[r], ++in_flight[r]);
        if (a.op == Op::backward || a.op == Op::backward_weight) --in_flight[r];
        ++next[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r)
    if (next[r] < s.actions[r].size())
      return fail(str("deadlock: rank ", r, " waits at ", describe(s.actions[r][next[r]], r),
                      " and no rank can go on"));
  if (const std::string waits = nccl_deadlock(s); !waits.empty()) {
    // Paired sends wait for their receives on MPI too.
    if (s.exchanges) return fail(str("with adjacent sends and receives paired, ", waits, " waits for ever"));
    check.nccl_deadlock = str(s.name, " (p ", p, ", m ", m, ", v ", s.virtual_stages, "): ", waits,
                              " waits for ever under NCCL");
  }
  for (int r = 0; r < p; ++r) {
    check.makespan = std::max(check.makespan, clock[r]);
    if (check.peak_in_flight[r] > s.promised_in_flight[r])
      return fail(str("rank ", r, " holds ", check.peak_in_flight[r], " micro-batches' activations at once, more than "
                      "the ", s.promised_in_flight[r], " promised"));
  }
  return check;
}

}  // namespace dt::pipeline
