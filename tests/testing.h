// Helpers shared by the tests: temporary directories, running the PyTorch reference scripts,
// and comparing tensors.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "core/tensor.h"

namespace dt::testing {

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A file's bytes ("" when it cannot be read).
std::string file_bytes(const std::filesystem::path& path);

// Runs `/usr/bin/python3 tests/reference/<script> <args>` (Debian's python with torch) and
// returns its exit status; its output goes to the test log.
int run_reference_script(const std::string& script, const std::string& args);

// Runs a shell command and returns its exit status and its stdout and stderr together.
struct CommandResult {
  int status = -1;
  std::string output;
};
CommandResult run_command(const std::string& command);
// Runs the built `dtrain <args>` (args as written in a shell), behind `launcher` when given.
CommandResult run_dtrain(const std::string& args, const std::string& launcher = "");
// The launcher of `ranks` processes on this machine, one thread each: "mpirun -np <ranks> ...".
std::string mpirun(int ranks);

// How a background process ended: as run_command says, and by which signal.
struct BackgroundResult : CommandResult {
  int signal = 0;          // the signal that ended the process, 0 when it exited
  bool timed_out = false;  // it outlived wait's bound and was killed
};

// A shell command running in the background (exec'd, so that signals reach the program itself),
// for tests that signal or kill it mid-run, or that need a server beside them. Output goes to a
// file read back by output() and wait(); the destructor kills the process and its children, if
// still running.
class BackgroundProcess {
 public:
  explicit BackgroundProcess(const std::string& command);
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;
  // To the process.
  void signal(int signal_number) const;
  // To MPI rank `rank` of a job started behind mpirun: the launcher's child whose environment
  // Open MPI gave that rank. False when there is none: not started yet, or ended already.
  bool signal_rank(int rank, int signal_number) const;
  // Whether a signal sent to the process is still waiting to be delivered: one more of the same
  // kind sent now would merge with it (standard signals do not queue).
  bool signal_pending(int signal_number) const;
  // Stops the process (SIGSTOP) and returns once it has stopped, so that it makes no progress
  // while a test looks; resume() lets it go on (SIGCONT), delivering signals sent meanwhile.
  void pause();
  void resume() const;
  // Whether the process has not ended yet (it is not reaped: wait() still gives its result).
  bool running() const;
  // What it has printed so far, stdout and stderr together.
  std::string output() const;
  // Waits until predicate() holds, polling, while the process runs: false when it ended first
  // or `seconds` passed, so a run that died early fails a test at once instead of at the bound.
  bool wait_while_running_until(const std::function<bool()>& predicate, double seconds) const;
  // Waits for the process at most `seconds`; one still running then is killed with its
  // children, and the result says it timed out.
  BackgroundResult wait(double seconds);

 private:
  int pid_ = -1;
  std::filesystem::path output_;
};

// `dtrain <args>` in the background, behind `launcher` when given (mpirun(ranks)); `environment`
// is prepended to the command ("DTRAIN_INJECT_FAULT=... "). Signals go to dtrain, or to the
// launcher when there is one.
class BackgroundDtrain : public BackgroundProcess {
 public:
  BackgroundDtrain(const std::string& args, const std::string& environment = "", const std::string& launcher = "");
};

// A port on 127.0.0.1 that nothing listens on (the system's choice of a free one).
int free_port();
// Whether something accepts connections on 127.0.0.1:port.
bool port_accepts(int port);

// Polls every 10 ms until predicate() holds or `seconds` pass; returns whether it held.
bool wait_until(const std::function<bool()>& predicate, double seconds);

// The message of the dt::Error that fn throws, or "" when it throws none.
std::string error_of(const std::function<void()>& fn);

// max_i |a[i] - b[i]| / max(max_i |b[i]|, floor): the error relative to the reference's scale,
// so one bound fits a tensor whose elements span many magnitudes. f32 tensors of equal size.
double normalized_max_error(const Tensor& actual, const Tensor& expected, double floor = 1e-30);

}  // namespace dt::testing
