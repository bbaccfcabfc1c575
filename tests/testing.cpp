#include "tests/testing.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

namespace dt::testing {

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  path_ = std::filesystem::temp_directory_path() /
          str("dtrain_test_", ::getpid(), "_", counter.fetch_add(1));
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

int run_reference_script(const std::string& script, const std::string& args) {
  const std::string command =
      str("/usr/bin/python3 ", DTRAIN_SOURCE_DIR, "/tests/reference/", script, " ", args, " 2>&1");
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string mpirun(int ranks) {
  return str("mpirun --oversubscribe --allow-run-as-root -np ", ranks, " -x OMP_NUM_THREADS=1 ");
}

CommandResult run_dtrain(const std::string& args, const std::string& launcher) {
  return run_command(str(launcher, DTRAIN_BINARY_DIR, "/dtrain ", args));
}

CommandResult run_command(const std::string& shell_command) {
  const std::string command = shell_command + " 2>&1";
  CommandResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  DT_CHECK(pipe != nullptr, "popen failed for ", command);
  char chunk[4096];
  while (const size_t n = std::fread(chunk, 1, sizeof chunk, pipe)) result.output.append(chunk, n);
  const int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

namespace {

// The processes whose parent is `pid`.
std::vector<int> children_of(int pid) {
  std::vector<int> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    // /proc/PID/stat: "PID (COMMAND) STATE PPID ..."; the command may hold spaces, not ')'.
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    int parent = -1;
    if (std::sscanf(line.c_str() + line.rfind(')') + 1, " %*c %d", &parent) == 1 && parent == pid)
      children.push_back(std::stoi(name));
  }
  return children;
}

// Whether the environment of process `pid` holds `variable` ("NAME=value").
bool environment_holds(int pid, const std::string& variable) {
  std::ifstream environment(str("/proc/", pid, "/environ"));
  for (std::string entry; std::getline(environment, entry, '\0');)
    if (entry == variable) return true;
  return false;
}

// Kills `pid` and its descendants: a launcher's ranks (in process groups of their own), or a
// server's workers, would go on without it. Each is stopped before its children are listed, so
// none starts another meanwhile.
void kill_with_children(int pid) {
  ::kill(pid, SIGSTOP);
  for (const int child : children_of(pid)) kill_with_children(child);
  ::kill(pid, SIGKILL);
}

}  // namespace

BackgroundProcess::BackgroundProcess(const std::string& command) {
  output_ = std::filesystem::temp_directory_path() / str("dtrain_background_", ::getpid(), "_", this, ".log");
  // exec replaces the shell, so pid_ is the program itself and signals reach it directly. No
  // input: mpirun would forward the terminal's to rank 0.
  const std::string shell_command = str("exec ", command, " < /dev/null > ", output_.string(), " 2>&1");
  pid_ = ::fork();
  DT_CHECK(pid_ >= 0, "fork failed");
  if (pid_ == 0) {
    ::execl("/bin/sh", "sh", "-c", shell_command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
}

// env sets the environment and execs the launcher or dtrain in its place.
BackgroundDtrain::BackgroundDtrain(const std::string& args, const std::string& environment,
                                   const std::string& launcher)
    : BackgroundProcess(str("env ", environment, " ", launcher, DTRAIN_BINARY_DIR, "/dtrain ", args)) {}

BackgroundProcess::~BackgroundProcess() {
  if (pid_ > 0) {
    kill_with_children(pid_);
    ::waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  std::filesystem::remove(output_, ec);
}

void BackgroundProcess::signal(int signal_number) const { ::kill(pid_, signal_number); }

bool BackgroundProcess::signal_rank(int rank, int signal_number) const {
  for (const int child : children_of(pid_))
    if (environment_holds(child, str("OMPI_COMM_WORLD_RANK=", rank))) return ::kill(child, signal_number) == 0;
  return false;
}

bool BackgroundProcess::signal_pending(int signal_number) const {
  // /proc/PID/status: "ShdPnd:" the process's pending signals, "SigPnd:" its main thread's, each
  // a hexadecimal mask with bit n - 1 for signal n.
  std::ifstream status(str("/proc/", pid_, "/status"));
  for (std::string line; std::getline(status, line);) {
    if (!line.starts_with("ShdPnd:") && !line.starts_with("SigPnd:")) continue;
    if ((std::stoull(line.substr(7), nullptr, 16) >> (signal_number - 1)) & 1) return true;
  }
  return false;
}

void BackgroundProcess::pause() {
  ::kill(pid_, SIGSTOP);
  int status = 0;
  ::waitpid(pid_, &status, WUNTRACED);  // returns once every thread has stopped
  if (WIFSTOPPED(status)) return;
  pid_ = -1;  // it ended first and is reaped
  DT_CHECK(false, "the process ended before it could be paused");
}

void BackgroundProcess::resume() const { ::kill(pid_, SIGCONT); }

bool BackgroundProcess::running() const {
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0;
}

bool BackgroundProcess::wait_while_running_until(const std::function<bool()>& predicate, double seconds) const {
  return wait_until([&] { return predicate() || !running(); }, seconds) && predicate();
}

std::string BackgroundProcess::output() const { return file_bytes(output_); }

BackgroundResult BackgroundProcess::wait(double seconds) {
  BackgroundResult result;
  int status = 0;
  result.timed_out = !wait_until([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, seconds);
  if (result.timed_out) {
    kill_with_children(pid_);
    ::waitpid(pid_, &status, 0);
  }
  pid_ = -1;
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  result.output = output();
  return result;
}

int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  DT_CHECK(s >= 0, "socket failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  DT_CHECK(::bind(s, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0, "bind failed");
  socklen_t length = sizeof address;
  DT_CHECK(::getsockname(s, reinterpret_cast<sockaddr*>(&address), &length) == 0, "getsockname failed");
  ::close(s);
  return ntohs(address.sin_port);
}

bool port_accepts(int port) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  DT_CHECK(s >= 0, "socket failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  const bool accepted = ::connect(s, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  ::close(s);
  return accepted;
}

bool wait_until(const std::function<bool()>& predicate, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return predicate();
}

double normalized_max_error(const Tensor& actual, const Tensor& expected, double floor) {
  DT_CHECK(actual.numel() == expected.numel() && actual.dtype == DType::f32 && expected.dtype == DType::f32,
           actual.describe(), " vs ", expected.describe());
  const float* a = actual.ptr<float>();
  const float* b = expected.ptr<float>();
  double max_diff = 0, scale = floor;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    max_diff = std::isnan(d) ? INFINITY : std::max(max_diff, d);
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return max_diff / scale;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace dt::testing
