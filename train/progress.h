// What a person watches while a run trains.
//
// On a terminal (progress = "auto" with stdout a tty, or "bar"): one status line redrawn in
// place after every step,
//   [#########.........]  120/1000 | loss 3.412 | lr 5.9e-04 | 14.2k tok/s | MFU 41.2% | ETA 4m10s
// with the full line of `plain` kept on screen every `every` steps. Otherwise ("plain", or a
// log file): a full line every `every` steps, and for the first and the last step:
//   step 120/1000 | loss 3.4121 | lr 5.90e-04 | grad norm 0.412 | 14210 tok/s | MFU 41.2% | HFU 41.2% | 288.1 ms | ETA 4m10s
// and with several ranks, before the ETA, the step's communication and how much of it compute
// hid: "| comm 41.0 ms, 87% hidden".
// Messages (evaluation, checkpoints, samples) print on their own lines without breaking the bar.
// "off" prints nothing: the ranks other than 0 of a multi-rank job.
#pragma once

#include <cstdint>
#include <string>

namespace dt {

struct StepReport {
  int64_t step = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  double hfu = 0;
  double step_ms = 0;
  float loss_scale = 0;     // shown when loss scaling is on (> 0)
  double communication_ms = 0;  // shown when there was communication (> 0)
  double hidden_fraction = 1;   // of it, the share compute covered
  std::string skipped_by;   // when the step was skipped: the first non-finite gradient tensor
};

class ProgressDisplay {
 public:
  // mode: "auto", "bar", "plain" or "off"; steps run from first_step + 1 to total_steps.
  ProgressDisplay(const std::string& mode, int64_t first_step, int64_t total_steps, int64_t every);
  ~ProgressDisplay();

  void step(const StepReport& report);
  void message(const std::string& text);

 private:
  std::string plain_line(const StepReport& r) const;
  std::string eta() const;
  void clear_bar();

  bool silent_;
  bool bar_;
  int64_t first_step_, total_steps_, every_;
  int64_t current_ = 0;
  double mean_step_s_ = 0;  // over the steps of this process, for the ETA
  int64_t timed_steps_ = 0;
  bool bar_shown_ = false;
};

// "4m10s", "2h03m", "17s".
std::string format_duration(double seconds);

}  // namespace dt
