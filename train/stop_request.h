// SIGTERM and SIGINT as a request to stop: what a preempted cluster job and a person at the
// terminal both need. The trainer finishes the step it is in, saves a checkpoint and exits
// with status 0; running the same command again resumes. A second signal of either kind ends
// the process at once (the default action), for when waiting is not wanted.
#pragma once

namespace dt {

class StopRequest {
 public:
  // Installs the handlers; the destructor puts the previous ones back. One at a time.
  StopRequest();
  ~StopRequest();
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;

  int signal_number() const;  // the signal that asked to stop, 0 when none has
};

}  // namespace dt
