#include "train/stop_request.h"

#include <csignal>

#include "core/error.h"

namespace dt {

namespace {

volatile std::sig_atomic_t g_signal = 0;
bool g_installed = false;
struct sigaction g_previous_term, g_previous_int;

// The first signal is a request; the default actions then come back (sigaction is
// async-signal-safe), so a second signal of either kind ends the process.
void on_signal(int signal_number) {
  g_signal = signal_number;
  struct sigaction default_action = {};
  default_action.sa_handler = SIG_DFL;
  sigaction(SIGTERM, &default_action, nullptr);
  sigaction(SIGINT, &default_action, nullptr);
}

}  // namespace

StopRequest::StopRequest() {
  DT_CHECK(!g_installed, "a StopRequest is already installed");
  g_signal = 0;
  struct sigaction action = {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, &g_previous_term);
  sigaction(SIGINT, &action, &g_previous_int);
  g_installed = true;
}

StopRequest::~StopRequest() {
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGINT, &g_previous_int, nullptr);
  g_installed = false;
}

int StopRequest::signal_number() const { return g_signal; }

}  // namespace dt
