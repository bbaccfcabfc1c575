#include "train/mlflow_tracker.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/http_client.h"

namespace dt {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr auto kBatchPeriod = std::chrono::seconds(1);
constexpr auto kFirstBackoff = std::chrono::milliseconds(250);
constexpr auto kMaxBackoff = std::chrono::milliseconds(8000);
constexpr int kTriesPerRefusal = 3;
constexpr double kRequestTimeout_s = 15;
constexpr const char* kRunFile = "mlflow_run.json";
constexpr size_t kMaxValueLength = 6000;  // of a parameter or tag

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string getenv_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// MLflow's client variables (mlflow_tracker.h).
HttpOptions http_options_from_environment() {
  HttpOptions options{.headers = {}, .username = getenv_or_empty("MLFLOW_TRACKING_USERNAME"),
                      .password = getenv_or_empty("MLFLOW_TRACKING_PASSWORD"),
                      .ca_file = getenv_or_empty("MLFLOW_TRACKING_SERVER_CERT_PATH"),
                      .verify_tls = getenv_or_empty("MLFLOW_TRACKING_INSECURE_TLS") != "true",
                      .timeout_s = kRequestTimeout_s};
  if (const std::string token = getenv_or_empty("MLFLOW_TRACKING_TOKEN"); !token.empty())
    options.headers.push_back("Authorization: Bearer " + token);
  return options;
}

std::string percent_encoded(const std::string& text) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (const unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// A double as protobuf's JSON writes it: a number, or "NaN", "Infinity", "-Infinity".
json metric_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

// Parameters and tags as MLflow takes them; values cut to its limit (a long sample.prompt), which
// a server would refuse.
json key_values(const std::vector<std::pair<std::string, std::string>>& entries) {
  json list = json::array();
  for (const auto& [key, value] : entries) list.push_back({{"key", key}, {"value", value.substr(0, kMaxValueLength)}});
  return list;
}

}  // namespace

// A response, and what it means for the request: done, try again (the server could not be
// reached, or said it is busy or behind a failing gateway), or refused.
struct MlflowReply {
  enum class Kind { done, retry, refused } kind;
  json body;                // the response's JSON, when there is one
  std::string error_code;   // MLflow's, on a refusal: "RESOURCE_DOES_NOT_EXIST", ...
  std::string why;          // for a person, when not done
};

namespace {

using Reply = MlflowReply;

Reply request(HttpClient& http, const std::string& uri, const std::string& method, const json* body) {
  const std::string url = uri + "/api/2.0/mlflow/" + method;
  const HttpResponse response = body ? http.post_json(url, body->dump()) : http.get(url);
  if (response.status == 0) return {Reply::Kind::retry, {}, "", response.error};
  const json parsed = json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  if (response.status == 200) return {Reply::Kind::done, parsed, "", ""};
  std::string error_code, message = response.body.substr(0, 300);
  if (parsed.is_object() && parsed.contains("error_code")) {
    error_code = parsed["error_code"].get<std::string>();
    message = str(error_code, ": ", parsed.value("message", ""));
  }
  const bool busy = response.status == 429 || response.status == 502 || response.status == 503 || response.status == 504;
  return {busy ? Reply::Kind::retry : Reply::Kind::refused, parsed, error_code,
          str("HTTP ", response.status, " from ", method, ": ", message)};
}

// The run mlflow_run.json names, when it names one on `uri`: {experiment_id, run_id}.
std::pair<std::string, std::string> recorded_run(const std::filesystem::path& run_dir, const std::string& uri) {
  std::ifstream in(run_dir / kRunFile);
  const json recorded = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!recorded.is_object() || recorded.value("uri", "") != uri) return {};
  return {recorded.value("experiment_id", ""), recorded.value("run_id", "")};
}

}  // namespace

const char* mlflow_status(RunEnd end) {
  switch (end) {
    case RunEnd::finished:
      return "FINISHED";
    case RunEnd::killed:
      return "KILLED";
    case RunEnd::failed:
      return "FAILED";
  }
  return "FAILED";
}

MlflowTracker::MlflowTracker(MlflowRun run) : run_(std::move(run)), params_left_(run_.params) {
  load_libcurl();
  sender_ = std::thread([this] {
    send_loop();
    std::lock_guard lock(mutex_);
    sender_done_ = true;
    wake_.notify_all();
  });
}

MlflowTracker::~MlflowTracker() {
  if (!sender_.joinable()) return;
  const auto say = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  say(end(RunEnd::failed, say));
}

void MlflowTracker::log(std::string key, double value, int64_t step) {
  const int64_t timestamp = now_ms();
  std::lock_guard lock(mutex_);
  ++logged_;
  if (given_up_) return;
  if (queue_.size() >= kMaxQueued) {
    if (dropped_++ == 0)
      news_.push_back(str("MLflow: ", kMaxQueued, " values wait to be sent; further ones are dropped (they are in ",
                          (run_.run_dir / "metrics.jsonl").string(), ")"));
    return;
  }
  queue_.push_back({std::move(key), value, timestamp, step});
  if (queue_.size() == kMetricsPerRequest) wake_.notify_one();
}

std::vector<std::string> MlflowTracker::take_news() {
  std::lock_guard lock(mutex_);
  return std::exchange(news_, {});
}

void MlflowTracker::tell(std::string line) {
  std::lock_guard lock(mutex_);
  news_.push_back("MLflow: " + std::move(line));
  wake_.notify_all();
}

bool MlflowTracker::ending_and_past_deadline() {
  std::lock_guard lock(mutex_);
  return ending_ && Clock::now() >= deadline_;
}

void MlflowTracker::back_off() {
  std::unique_lock lock(mutex_);
  backoff_ = std::min(backoff_.count() == 0 ? kFirstBackoff : 2 * backoff_, kMaxBackoff);
  Clock::time_point until = Clock::now() + backoff_;
  if (ending_) until = std::min(until, deadline_);
  // end() cuts a wait short once: the end is a good moment to try again.
  wake_.wait_until(lock, until, [&] { return ending_ && !end_noticed_; });
  if (ending_) end_noticed_ = true;
}

bool MlflowTracker::succeeded(const Reply& reply) {
  if (reply.kind == Reply::Kind::done) {
    backoff_ = {};
    refusals_ = 0;
    last_error_.clear();
    if (unreachable_) tell(str("reached ", run_.uri, " again"));
    unreachable_ = false;
    return true;
  }
  if (reply.kind == Reply::Kind::retry && !unreachable_)
    tell(str("cannot reach ", run_.uri, " (", reply.why, "); the values wait and are sent when it answers"));
  unreachable_ = reply.kind == Reply::Kind::retry;
  if (reply.kind == Reply::Kind::refused) ++refusals_;
  last_error_ = reply.why;
  return false;
}

void MlflowTracker::give_up(const std::string& why) {
  tell(str("stopped sending: ", why, "; every value is in ", (run_.run_dir / "metrics.jsonl").string()));
  std::lock_guard lock(mutex_);
  given_up_ = true;
  queue_.clear();
}

bool MlflowTracker::find_experiment(HttpClient& http) {
  const Reply found = request(http, run_.uri, "experiments/get-by-name?experiment_name=" +
                                                  percent_encoded(run_.experiment), nullptr);
  if (found.kind == Reply::Kind::done) {
    const json& experiment = found.body["experiment"];
    if (experiment.value("lifecycle_stage", "active") != "active") {
      give_up(str("experiment '", run_.experiment, "' is deleted on ", run_.uri,
                  "; restore it (mlflow experiments restore) or choose another mlflow.experiment"));
      return false;
    }
    experiment_id_ = experiment["experiment_id"].get<std::string>();
    return succeeded(found);
  }
  if (found.error_code != "RESOURCE_DOES_NOT_EXIST") return succeeded(found);
  const json name = {{"name", run_.experiment}};
  const Reply created = request(http, run_.uri, "experiments/create", &name);
  if (created.kind == Reply::Kind::done) experiment_id_ = created.body["experiment_id"].get<std::string>();
  // Created meanwhile by another run: found on the next try.
  if (created.error_code == "RESOURCE_ALREADY_EXISTS") return false;
  return succeeded(created);
}

bool MlflowTracker::reopen_run(HttpClient& http, const std::string& experiment_id, const std::string& run_id) {
  const Reply got = request(http, run_.uri, "runs/get?run_id=" + percent_encoded(run_id), nullptr);
  if (got.error_code == "RESOURCE_DOES_NOT_EXIST" ||
      (got.kind == Reply::Kind::done && got.body["run"]["info"].value("lifecycle_stage", "") != "active")) {
    tell(str("run ", run_id, " of ", (run_.run_dir / kRunFile).string(), " is no longer on ", run_.uri,
             "; this resumed run starts a new one"));
    return true;  // reopened nothing: a new run is created
  }
  if (!succeeded(got)) return false;
  // A run's parameters cannot change: the ones it has are kept, and named when they differ.
  std::vector<std::string> changed;
  for (const json& p : got.body["run"]["data"].value("params", json::array())) {
    const auto it = std::find_if(params_left_.begin(), params_left_.end(),
                                 [&](const auto& kv) { return kv.first == p["key"].get<std::string>(); });
    if (it == params_left_.end()) continue;
    if (it->second.substr(0, kMaxValueLength) != p["value"].get<std::string>())
      changed.push_back(str(it->first, " (", it->second, ", was ", p["value"].get<std::string>(), ")"));
    params_left_.erase(it);
  }
  if (!changed.empty()) {
    std::string list;
    for (const std::string& c : changed) list += (list.empty() ? "" : ", ") + c;
    tell(str("run ", run_id, " keeps its first value of parameters that this resumed run changed: ", list,
             "; the resolved configuration is in ", (run_.run_dir / "config.toml").string()));
  }
  experiment_id_ = experiment_id;
  run_id_ = run_id;
  return true;
}

bool MlflowTracker::create_run(HttpClient& http) {
  const std::string user = getenv_or_empty("USER");
  const json body = {{"experiment_id", experiment_id_}, {"run_name", run_.name}, {"start_time", now_ms()},
                     {"user_id", user}, {"tags", key_values(run_.tags)}};
  const Reply created = request(http, run_.uri, "runs/create", &body);
  if (!succeeded(created)) return false;
  run_id_ = created.body["run"]["info"]["run_id"].get<std::string>();
  // Recorded for a resume (through a temporary file: a reader never sees half of it).
  const std::filesystem::path path = run_.run_dir / kRunFile, temporary = path.string() + ".tmp";
  std::ofstream(temporary) << json{{"uri", run_.uri}, {"experiment_id", experiment_id_}, {"run_id", run_id_}}.dump(2)
                           << '\n';
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) tell(str("cannot write ", path.string(), " (", ec.message(), "); a resumed run will start a new MLflow run"));
  return true;
}

bool MlflowTracker::open_run(HttpClient& http) {
  if (run_id_.empty() && run_.resume && !resume_checked_) {
    const auto [experiment_id, run_id] = recorded_run(run_.run_dir, run_.uri);
    if (!run_id.empty() && !reopen_run(http, experiment_id, run_id)) return false;
    resume_checked_ = true;
    if (!run_id_.empty()) {
      const json running = {{"run_id", run_id_}, {"status", "RUNNING"}};
      if (!succeeded(request(http, run_.uri, "runs/update", &running))) return false;
    }
  }
  if (run_id_.empty() && experiment_id_.empty() && !find_experiment(http)) return false;
  if (run_id_.empty() && !create_run(http)) return false;
  while (!params_left_.empty()) {
    const size_t n = std::min(params_left_.size(), kParamsPerRequest);
    const std::vector<std::pair<std::string, std::string>> batch(params_left_.begin(), params_left_.begin() + n);
    const json body = {{"run_id", run_id_}, {"params", key_values(batch)}};
    if (!succeeded(request(http, run_.uri, "runs/log-batch", &body))) return false;
    params_left_.erase(params_left_.begin(), params_left_.begin() + n);
  }
  return true;
}

bool MlflowTracker::send_batch(HttpClient& http) {
  std::vector<Metric> batch;
  {
    std::lock_guard lock(mutex_);
    batch.assign(queue_.begin(), queue_.begin() + std::min(queue_.size(), kMetricsPerRequest));
  }
  if (batch.empty()) return false;
  json metrics = json::array();
  for (const Metric& m : batch)
    metrics.push_back({{"key", m.key}, {"value", metric_value(m.value)}, {"timestamp", m.timestamp_ms}, {"step", m.step}});
  const json body = {{"run_id", run_id_}, {"metrics", std::move(metrics)}};
  const Reply reply = request(http, run_.uri, "runs/log-batch", &body);
  const int64_t n = static_cast<int64_t>(batch.size());
  if (succeeded(reply)) {
    std::lock_guard lock(mutex_);
    queue_.erase(queue_.begin(), queue_.begin() + n);
    sent_ += n;
    return true;
  }
  if (reply.kind == Reply::Kind::retry || refusals_ < kTriesPerRefusal) {
    back_off();
    return true;
  }
  tell(str(n, " values rejected: ", reply.why));
  refusals_ = 0;
  std::lock_guard lock(mutex_);
  queue_.erase(queue_.begin(), queue_.begin() + n);
  rejected_ += n;
  return true;
}

void MlflowTracker::send_loop() {
  HttpClient http(http_options_from_environment());
  while (!ending_and_past_deadline()) {
    if (!open_run(http)) {
      if (refusals_ >= kTriesPerRefusal) return give_up(str("cannot open the run: ", last_error_));
      back_off();
      continue;
    }
    // Everything queued, a request at a time; then wait for more, or end.
    while (!ending_and_past_deadline() && send_batch(http)) {
    }
    std::unique_lock lock(mutex_);
    if (ending_ && queue_.empty()) break;
    wake_.wait_for(lock, kBatchPeriod, [&] { return ending_ || queue_.size() >= kMetricsPerRequest; });
  }
  if (run_id_.empty()) return;
  const json ended = {{"run_id", run_id_}, {"status", mlflow_status(end_)}, {"end_time", now_ms()}};
  do {
    run_ended_ = succeeded(request(http, run_.uri, "runs/update", &ended));
    if (!run_ended_) back_off();
  } while (!run_ended_ && !ending_and_past_deadline());
}

std::string MlflowTracker::end(RunEnd end, const std::function<void(const std::string&)>& say) {
  {
    std::lock_guard lock(mutex_);
    ending_ = true;
    end_ = end;
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(run_.end_wait_s));
  }
  wake_.notify_all();
  // What the sending thread tells meanwhile is said as it happens: the wait may be long.
  std::unique_lock lock(mutex_);
  while (!sender_done_ || !news_.empty()) {
    wake_.wait(lock, [&] { return sender_done_ || !news_.empty(); });
    for (const std::string& line : std::exchange(news_, {})) {
      lock.unlock();
      say(line);
      lock.lock();
    }
  }
  lock.unlock();
  sender_.join();
  const std::string page = run_id_.empty() ? run_.uri : str(run_.uri, "/#/experiments/", experiment_id_, "/runs/", run_id_);
  if (logged_ == sent_ && run_ended_)
    return str("MLflow: run ", page, " ended ", mlflow_status(end), ", all ", sent_, " values sent");
  std::string lost = str("MLflow: ", logged_ - sent_, " of ", logged_, " values not sent to ", page);
  if (rejected_ > 0) lost += str(" (", rejected_, " rejected)");
  if (dropped_ > 0) lost += str(" (", dropped_, " dropped past ", kMaxQueued, " waiting)");
  if (!last_error_.empty()) lost += str(": ", last_error_);
  if (!run_id_.empty() && !run_ended_) lost += str("; the run's state there is still RUNNING");
  return lost + str("; every value is in ", (run_.run_dir / "metrics.jsonl").string());
}

}  // namespace dt
