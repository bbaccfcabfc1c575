// A run tracked in MLflow, over its REST API (/api/2.0/mlflow) from the lead rank: the run,
// created in its experiment (which is created when missing); its parameters, every key of the
// resolved configuration; every scalar of metrics.jsonl as a metric, under the names TensorBoard
// shows (train/metrics.h); and its end state: FINISHED, KILLED after SIGTERM or SIGINT, FAILED
// after an error. The run is recorded in <run_dir>/mlflow_run.json, and a resumed training run
// continues it (the steps it redoes appear twice in a metric's history).
//
// The step loop never waits on the server. log() appends to a queue that a thread of the
// tracker's own sends, every second or every 1,000 values, in requests within MLflow's limits
// (1,000 metrics or 100 parameters). While the server is slow the queue grows. While it cannot be
// reached, or answers 429, 502, 503 or 504, the values stay queued and the thread retries, backing
// off to every 8 s; a request the server refuses otherwise is tried three times, then its values
// are counted as rejected. end() gives the thread the run's mlflow.end_wait_s to send what is
// queued, ends the run, and says what reached the server; every value is in metrics.jsonl too.
//
// Credentials come from MLflow's own environment variables, never from the configuration (which
// is logged): MLFLOW_TRACKING_TOKEN (a bearer token), MLFLOW_TRACKING_USERNAME and
// MLFLOW_TRACKING_PASSWORD (basic authentication), MLFLOW_TRACKING_SERVER_CERT_PATH (a CA bundle)
// and MLFLOW_TRACKING_INSECURE_TLS=true (no certificate check).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace dt {

class HttpClient;
struct MlflowReply;  // a response and what it means (mlflow_tracker.cpp)

struct MlflowRun {
  std::string uri;  // the server: http(s)://host:port[/prefix]
  std::string experiment;
  std::string name;
  std::vector<std::pair<std::string, std::string>> params;
  std::vector<std::pair<std::string, std::string>> tags;  // set when the run is created
  std::filesystem::path run_dir;  // where mlflow_run.json is
  bool resume = false;            // continue the run mlflow_run.json names, when it names one on this server
  double end_wait_s = 60;
};

// How the run ended.
enum class RunEnd { finished, killed, failed };
// MLflow's name for it: FINISHED, KILLED, FAILED.
const char* mlflow_status(RunEnd end);

class MlflowTracker {
 public:
  // Loads libcurl (an error when it is missing) and starts the sending thread; returns at once.
  explicit MlflowTracker(MlflowRun run);
  // Ends the run as failed when end() was not called (an error is unwinding the run).
  ~MlflowTracker();
  MlflowTracker(const MlflowTracker&) = delete;
  MlflowTracker& operator=(const MlflowTracker&) = delete;

  // Queues metric `key` = value at `step`, timestamped now.
  void log(std::string key, double value, int64_t step);
  // What the sending thread has to tell a person since the last call: the server unreachable,
  // reached again, a request rejected.
  std::vector<std::string> take_news();
  // Sends what is queued, waiting at most end_wait_s, passing what the sending thread tells
  // meanwhile to `say`; ends the run as `end`. Returns a line for a person: where the run is and
  // whether every value reached it. Called once.
  std::string end(RunEnd end, const std::function<void(const std::string&)>& say);

  static constexpr size_t kMetricsPerRequest = 1000, kParamsPerRequest = 100;
  static constexpr size_t kMaxQueued = 1'000'000;  // about 80 MB; values past it are dropped and counted

 private:
  struct Metric {
    std::string key;
    double value;
    int64_t timestamp_ms, step;
  };

  // The sending thread's work: open the run, send what is queued until the end, end the run.
  void send_loop();
  // Finds or creates the experiment, reopens (on a resume) or creates the run, logs the
  // parameters; each part once. False while a part must be tried again.
  bool open_run(HttpClient& http);
  bool find_experiment(HttpClient& http);
  bool reopen_run(HttpClient& http, const std::string& experiment_id, const std::string& run_id);
  bool create_run(HttpClient& http);
  // Sends up to kMetricsPerRequest queued values (or backs off after a failure); false when
  // nothing was queued.
  bool send_batch(HttpClient& http);
  // Whether the request was done; otherwise tells a person once the server cannot be reached,
  // and counts a refusal.
  bool succeeded(const MlflowReply& reply);
  void give_up(const std::string& why);
  // Waits the back-off's next interval, cut short once by end() and by its deadline.
  void back_off();
  void tell(std::string line);
  bool ending_and_past_deadline();

  const MlflowRun run_;

  // The sending thread's, read by end() once it has joined.
  std::string experiment_id_, run_id_;
  std::vector<std::pair<std::string, std::string>> params_left_;  // not yet logged
  bool resume_checked_ = false, run_ended_ = false, unreachable_ = false;
  int refusals_ = 0;  // of the request being tried
  std::string last_error_;
  std::chrono::milliseconds backoff_{0};

  // Shared with the step loop, under mutex_.
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Metric> queue_;
  std::vector<std::string> news_;
  bool ending_ = false, end_noticed_ = false, given_up_ = false, sender_done_ = false;
  RunEnd end_ = RunEnd::failed;
  std::chrono::steady_clock::time_point deadline_;
  int64_t logged_ = 0, sent_ = 0, rejected_ = 0, dropped_ = 0;

  std::thread sender_;
};

}  // namespace dt
