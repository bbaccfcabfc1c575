#include "comm/mpi_watchdog.h"

#include <cstdio>
#include <sstream>
#include <thread>

#include "comm/mpi.h"
#include "comm/mpi_progress.h"
#include "comm/world.h"

namespace dt {

namespace {

constexpr int kQuestionTag = 1, kAnswerTag = 2;
constexpr double kAnswerWait_s = 5;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The last sequence number `status` (another rank's answer) gives for `group`, 0 for none.
uint64_t last_sequence(const std::string& status, const std::string& group) {
  std::istringstream in(status);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string name;
    uint64_t sequence = 0;
    if (fields >> name >> sequence && name == group + ":") return sequence;
  }
  return 0;
}

}  // namespace

MpiWatchdog::MpiWatchdog(MPI_Comm world, int world_rank, int world_size) : rank_(world_rank), size_(world_size) {
  check_mpi(MPI_Comm_dup(world, &control_), "MPI_Comm_dup");
}

MpiWatchdog::~MpiWatchdog() {
  if (control_ != MPI_COMM_NULL) MPI_Comm_free(&control_);
}

void MpiWatchdog::started(const CollectiveInfo& collective, const std::vector<int>& members) {
  in_flight_[{collective.group, collective.sequence}] = {collective, members, std::chrono::steady_clock::now()};
  last_started_[collective.group] = collective;
}

void MpiWatchdog::finished(const CollectiveInfo& collective) {
  in_flight_.erase({collective.group, collective.sequence});
}

std::string MpiWatchdog::status() const {
  if (last_started_.empty()) return "no collective started yet";
  std::string out;
  for (const auto& [group, c] : last_started_) {
    const auto waiting = in_flight_.find({group, c.sequence});
    out += str(group, ": ", c.sequence, " ", c.describe(),
               waiting == in_flight_.end() ? " (finished)"
                                           : str(" (waiting for ", static_cast<int>(seconds_since(waiting->second.since)),
                                                 " s)"),
               "\n");
  }
  return out;
}

void MpiWatchdog::answer_questions() {
  while (true) {
    int pending = 0;
    MPI_Status probe;
    MPI_Iprobe(MPI_ANY_SOURCE, kQuestionTag, control_, &pending, &probe);
    if (!pending) return;
    char none = 0;
    MPI_Recv(&none, 1, MPI_CHAR, probe.MPI_SOURCE, kQuestionTag, control_, MPI_STATUS_IGNORE);
    const std::string answer = status();
    MPI_Send(answer.data(), static_cast<int>(answer.size()), MPI_CHAR, probe.MPI_SOURCE, kAnswerTag, control_);
  }
}

void MpiWatchdog::poll() {
  answer_questions();
  const double timeout = collective_timeout_s();
  for (const auto& [key, f] : in_flight_)
    if (f.collective.timed && seconds_since(f.since) > timeout) report_and_abort(f);
}

void MpiWatchdog::report_and_abort(const InFlight& stuck) {
  char none = 0;
  std::vector<MPI_Request> questions;
  for (int r = 0; r < size_; ++r)
    if (r != rank_) MPI_Isend(&none, 1, MPI_CHAR, r, kQuestionTag, control_, &questions.emplace_back());
  std::map<int, std::string> answers;
  const auto asked = std::chrono::steady_clock::now();
  while (static_cast<int>(answers.size()) < size_ - 1 && seconds_since(asked) < kAnswerWait_s) {
    answer_questions();  // the others are asking too
    int pending = 0;
    MPI_Status probe;
    MPI_Iprobe(MPI_ANY_SOURCE, kAnswerTag, control_, &pending, &probe);
    if (!pending) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    int length = 0;
    MPI_Get_count(&probe, MPI_CHAR, &length);
    std::string text(static_cast<size_t>(length), '\0');
    MPI_Recv(text.data(), length, MPI_CHAR, probe.MPI_SOURCE, kAnswerTag, control_, MPI_STATUS_IGNORE);
    answers[probe.MPI_SOURCE] = text;
  }
  const CollectiveInfo& c = stuck.collective;
  std::string behind, others;
  for (const int m : stuck.members) {
    if (m == rank_) continue;
    const auto answer = answers.find(m);
    if (answer == answers.end()) {
      behind += str(behind.empty() ? "" : ", ", m, " (not answering)");
    } else if (last_sequence(answer->second, c.group) < c.sequence) {
      behind += str(behind.empty() ? "" : ", ", m);
    }
  }
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const auto answer = answers.find(r);
    std::string text = answer == answers.end() ? "did not answer within 5 s\n" : answer->second;
    std::string indented;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) indented += str("\n    ", line);
    others += str("\n  rank ", r, ":", indented);
  }
  std::fprintf(stderr,
               "dtrain: %s: collective watchdog: %s has waited %.0f s (parallel.timeout_s = %.0f); %s\n"
               "  where the other ranks are:%s\n",
               who(rank_).c_str(), c.describe().c_str(), seconds_since(stuck.since), collective_timeout_s(),
               behind.empty() ? "every rank of its group has started it (a slow or broken network?)"
                              : str("waiting for rank", behind.find(',') == std::string::npos ? " " : "s ", behind,
                                    ", which ha", behind.find(',') == std::string::npos ? "s" : "ve",
                                    " not started it")
                                    .c_str(),
               others.c_str());
  std::fflush(stderr);
  // The other stuck ranks report too before the first abort ends the job.
  const auto reported = std::chrono::steady_clock::now();
  while (seconds_since(reported) < 2) {
    answer_questions();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::abort();  // MPI_Abort does not return
}

}  // namespace dt
