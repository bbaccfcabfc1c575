// A real MLflow tracking server for the tests of experiment tracking (train/mlflow_tracker.h):
// `mlflow server` from the environment that scripts/setup.sh --tests installs (/opt/dtrain-mlflow,
// every package pinned in scripts/mlflow-requirements.txt), on a port of this machine, its store
// in a temporary directory; and a run read back through MLflow's own Python client.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/testing.h"

namespace dt::testing {

class MlflowServer {
 public:
  // Starts the server on `port` and returns once it answers; fails the test (an exception with
  // the server's output) when it does not within two minutes, or when MLflow is not installed.
  explicit MlflowServer(int port = free_port());
  std::string uri() const { return str("http://127.0.0.1:", port_); }

 private:
  TempDir store_;
  const int port_;
  std::unique_ptr<BackgroundProcess> process_;
};

// A run as MLflow's client reads it.
struct MlflowRunRecord {
  std::string status, name;
  std::map<std::string, std::string> params, tags;
  std::map<std::string, std::map<int64_t, std::vector<double>>> metrics;  // key -> step -> values logged
  int64_t metric_values() const;  // of every key and step
};
MlflowRunRecord read_mlflow_run(const std::string& uri, const std::string& run_id);

// The Python of MLflow's environment, with `script` from tests/reference/ and `args`.
std::string mlflow_python(const std::string& script, const std::string& args);

}  // namespace dt::testing
