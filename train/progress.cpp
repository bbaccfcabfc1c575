#include "train/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace dt {

std::string format_duration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  char out[32];
  if (s >= 3600) std::snprintf(out, sizeof out, "%lldh%02lldm", static_cast<long long>(s / 3600), static_cast<long long>(s / 60 % 60));
  else if (s >= 60) std::snprintf(out, sizeof out, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  else std::snprintf(out, sizeof out, "%llds", static_cast<long long>(s));
  return out;
}

ProgressDisplay::ProgressDisplay(const std::string& mode, int64_t first_step, int64_t total_steps, int64_t every)
    : silent_(mode == "off"),
      bar_(mode == "bar" || (mode == "auto" && ::isatty(STDOUT_FILENO))),
      first_step_(first_step),
      total_steps_(total_steps),
      every_(std::max<int64_t>(1, every)),
      current_(first_step) {}

ProgressDisplay::~ProgressDisplay() {
  if (bar_shown_) std::fputc('\n', stdout);
}

std::string ProgressDisplay::eta() const {
  return format_duration(mean_step_s_ * static_cast<double>(total_steps_ - current_));
}

std::string ProgressDisplay::plain_line(const StepReport& r) const {
  const std::string scale = r.loss_scale > 0 ? str(" | loss scale ", r.loss_scale) : "";
  char comm[64] = "";
  if (r.communication_ms > 0)
    std::snprintf(comm, sizeof comm, " | comm %.1f ms, %.0f%% hidden", r.communication_ms, 100 * r.hidden_fraction);
  char line[512];
  if (!r.skipped_by.empty()) {
    std::snprintf(line, sizeof line, "step %lld/%lld | loss %.4f | skipped: the gradient of %s is not finite%s",
                  static_cast<long long>(r.step), static_cast<long long>(total_steps_), r.loss, r.skipped_by.c_str(),
                  scale.c_str());
    return line;
  }
  std::snprintf(line, sizeof line,
                "step %lld/%lld | loss %.4f | lr %.2e | grad norm %.3f%s | %.0f tok/s | MFU %.1f%% | HFU %.1f%% | "
                "%.1f ms%s | ETA %s",
                static_cast<long long>(r.step), static_cast<long long>(total_steps_), r.loss, r.lr, r.grad_norm,
                scale.c_str(), r.tokens_per_s, 100 * r.mfu, 100 * r.hfu, r.step_ms, comm, eta().c_str());
  return line;
}

void ProgressDisplay::clear_bar() {
  if (bar_shown_) std::fputs("\r\033[2K", stdout);
  bar_shown_ = false;
}

void ProgressDisplay::step(const StepReport& r) {
  current_ = r.step;
  // The first step of a process warms caches and threads: it is the ETA's estimate only until
  // the next one arrives.
  const double seconds = r.step_ms / 1e3;
  if (r.step == first_step_ + 1) {
    mean_step_s_ = seconds;
  } else {
    ++timed_steps_;
    mean_step_s_ = timed_steps_ == 1 ? seconds : mean_step_s_ + (seconds - mean_step_s_) / static_cast<double>(timed_steps_);
  }
  if (silent_) return;
  const bool keep = r.step == first_step_ + 1 || r.step == total_steps_ || r.step % every_ == 0 || !r.skipped_by.empty();
  if (!bar_) {
    if (keep) std::printf("%s\n", plain_line(r).c_str());
    std::fflush(stdout);
    return;
  }
  clear_bar();
  if (keep) std::printf("%s\n", plain_line(r).c_str());
  constexpr int kWidth = 24;
  const double done = static_cast<double>(r.step) / static_cast<double>(total_steps_);
  const int filled = static_cast<int>(done * kWidth);
  std::printf("[%s%s] %lld/%lld | loss %.3f | lr %.1e | %.1fk tok/s | MFU %.1f%% | ETA %s",
              std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
              static_cast<long long>(r.step), static_cast<long long>(total_steps_), r.loss, r.lr,
              r.tokens_per_s / 1e3, 100 * r.mfu, eta().c_str());
  bar_shown_ = true;
  std::fflush(stdout);
}

void ProgressDisplay::message(const std::string& text) {
  if (silent_) return;
  clear_bar();
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

}  // namespace dt
