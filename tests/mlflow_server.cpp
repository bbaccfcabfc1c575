#include "tests/mlflow_server.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/http_client.h"

namespace dt::testing {

namespace {

// Where scripts/setup.sh --tests installs the server's environment.
constexpr const char* kMlflowEnvironment = "/opt/dtrain-mlflow";

}  // namespace

std::string mlflow_python(const std::string& script, const std::string& args) {
  return str(kMlflowEnvironment, "/bin/python ", DTRAIN_SOURCE_DIR, "/tests/reference/", script, " ", args);
}

MlflowServer::MlflowServer(int port) : port_(port) {
  const std::string mlflow = str(kMlflowEnvironment, "/bin/mlflow");
  if (!std::filesystem::exists(mlflow))
    throw Error(str(mlflow, " is missing: run scripts/setup.sh --tests, which installs the MLflow server"));
  process_ = std::make_unique<BackgroundProcess>(
      str(mlflow, " server --host 127.0.0.1 --port ", port_, " --workers 1 --backend-store-uri ",
          store_.file("store"), " --default-artifact-root ", store_.file("artifacts")));
  HttpClient http(HttpOptions{.headers = {}, .username = "", .password = "", .ca_file = "", .verify_tls = true,
                              .timeout_s = 5});
  const bool answers = process_->wait_while_running_until([&] { return http.get(uri() + "/health").status == 200; }, 120);
  if (!answers) throw Error(str("the MLflow server on port ", port_, " did not answer:\n", process_->output()));
}

int64_t MlflowRunRecord::metric_values() const {
  int64_t n = 0;
  for (const auto& [key, by_step] : metrics)
    for (const auto& [step, values] : by_step) n += static_cast<int64_t>(values.size());
  return n;
}

MlflowRunRecord read_mlflow_run(const std::string& uri, const std::string& run_id) {
  const CommandResult read = run_command(str("(", mlflow_python("mlflow_run.py", str(uri, " ", run_id)), " 2>/dev/null)"));
  if (read.status != 0) throw Error(str("mlflow_run.py failed:\n", read.output));
  const nlohmann::json run = nlohmann::json::parse(read.output);
  MlflowRunRecord record{.status = run["status"], .name = run["name"], .params = run["params"], .tags = run["tags"],
                         .metrics = {}};
  for (const auto& [key, by_step] : run["metrics"].items())
    for (const auto& [step, values] : by_step.items())
      record.metrics[key][std::stoll(step)] = values.get<std::vector<double>>();
  return record;
}

}  // namespace dt::testing
