// Experiment tracking in MLflow (train/mlflow_tracker.h; docs/training.md, "MLflow"), against a
// real `mlflow server` started by each test (tests/mlflow_server.h) and read back through
// MLflow's own client: the run, its parameters (the resolved configuration) and every value of
// metrics.jsonl reach the server, the run ends FINISHED or KILLED, a resumed run continues it;
// a server that holds every request does not hold up a step, one that comes up late still gets
// every value, and one that never answers costs the run nothing but a line at its end.
#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
#include <map>
#include <regex>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "tests/mlflow_server.h"
#include "tests/train_run.h"

namespace dt {
namespace {

using testing::BackgroundDtrain;
using testing::BackgroundProcess;
using testing::MlflowRunRecord;
using testing::MlflowServer;
using testing::TrainRun;

// The metrics a run logged, as MLflow names them: metrics.jsonl's scalars, key -> step -> value.
std::map<std::string, std::map<int64_t, double>> logged_metrics(const std::filesystem::path& run_dir) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"loss", "train/loss"},         {"tokens_per_s", "train/tokens_per_s"}, {"loss_scale", "train/loss_scale"},
      {"lr", "train/lr"},             {"grad_norm", "train/grad_norm"},       {"mfu", "train/mfu"},
      {"hfu", "train/hfu"},           {"val_loss", "val/loss"},               {"checkpoint_stall_ms", "checkpoint/stall_ms"},
      {"checkpoint_save_ms", "checkpoint/save_ms"}};
  std::map<std::string, std::map<int64_t, double>> metrics;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto entry = nlohmann::json::parse(line);
    for (const auto& [field, name] : kNames)
      if (entry.contains(field) && !entry[field].is_null())
        metrics[name][entry["step"].get<int64_t>()] = entry[field].get<double>();
  }
  return metrics;
}

int64_t count_values(const std::map<std::string, std::map<int64_t, double>>& metrics) {
  int64_t n = 0;
  for (const auto& [name, by_step] : metrics) n += static_cast<int64_t>(by_step.size());
  return n;
}

// Every value the run logged is on the server, once, and nothing else is.
void expect_every_metric_on_the_server(const std::filesystem::path& run_dir, const MlflowRunRecord& record) {
  const auto logged = logged_metrics(run_dir);
  ASSERT_FALSE(logged.empty());
  EXPECT_EQ(record.metric_values(), count_values(logged));
  for (const auto& [name, by_step] : logged)
    for (const auto& [step, value] : by_step) {
      const auto key = record.metrics.find(name);
      ASSERT_NE(key, record.metrics.end()) << name;
      const auto at = key->second.find(step);
      ASSERT_NE(at, key->second.end()) << name << " at step " << step;
      EXPECT_EQ(at->second, std::vector<double>{value}) << name << " at step " << step;
    }
}

// The MLflow run the run directory records.
std::string recorded_run_id(const std::filesystem::path& run_dir) {
  std::ifstream in(run_dir / "mlflow_run.json");
  return nlohmann::json::parse(in)["run_id"].get<std::string>();
}

std::string end_line(int64_t values, const std::string& status) {
  return str(" ended ", status, ", all ", values, " values sent");
}

TEST(MlflowCli, TheRunItsParametersAndEveryMetricReachTheServer) {
  const MlflowServer server;
  const TrainRun run;
  const auto result = testing::run_dtrain(run.args("run", str("mlflow.uri=", server.uri(), " mlflow.experiment=tests")));
  ASSERT_EQ(result.status, 0) << result.output;
  const auto logged = logged_metrics(run.path("run"));
  EXPECT_NE(result.output.find(end_line(count_values(logged), "FINISHED")), std::string::npos) << result.output;

  const MlflowRunRecord record = testing::read_mlflow_run(server.uri(), recorded_run_id(run.path("run")));
  EXPECT_EQ(record.status, "FINISHED");
  EXPECT_EQ(record.name, "run");  // the run directory's name
  expect_every_metric_on_the_server(run.path("run"), record);
  // The parameters are the resolved configuration, every key of it, strings unquoted.
  const toml::table resolved = toml::parse_file((run.path("run") / "config.toml").string());
  size_t keys = 0;
  for (const auto& [section, table] : resolved)
    for (const auto& [name, value] : *table.as_table()) {
      ++keys;
      const std::string key = str(section.str(), ".", name.str());
      ASSERT_TRUE(record.params.contains(key)) << key;
      const std::string& param = record.params.at(key);
      if (value.is_floating_point()) {
        EXPECT_EQ(std::stod(param), *value.value<double>()) << key << " = " << param;
        continue;
      }
      std::ostringstream text;
      if (value.is_string()) text << *value.value<std::string>();
      else value.visit([&](const auto& v) { text << v; });
      EXPECT_EQ(param, text.str()) << key;
    }
  EXPECT_EQ(record.params.size(), keys);
  EXPECT_EQ(record.params.at("mlflow.experiment"), "tests");
  EXPECT_TRUE(record.tags.contains("dtrain.version"));
}

// A server that holds every request until the test lets it go: the run trains every step,
// validates and saves while not one request has been answered, then waits at its end for the
// values to go out.
TEST(MlflowCli, AServerThatHoldsEveryRequestDoesNotHoldUpTheSteps) {
  const MlflowServer server;
  const TrainRun run;
  const int proxy_port = testing::free_port();
  const std::filesystem::path gate = run.path("gate");
  BackgroundProcess proxy(testing::mlflow_python("held_proxy.py", str(proxy_port, " ", server.uri(), " ", gate.string())));
  ASSERT_TRUE(proxy.wait_while_running_until([&] { return testing::port_accepts(proxy_port); }, 60)) << proxy.output();
  BackgroundDtrain training(run.args("run", str("mlflow.uri=http://127.0.0.1:", proxy_port, " mlflow.end_wait_s=300")));
  // 120 s: the 20 tiny steps take a second or two; the bound only ends a run that hangs.
  ASSERT_TRUE(training.wait_while_running_until(
      [&] { return training.output().find("trained steps 1-20") != std::string::npos; }, 120))
      << training.output() << proxy.output();
  EXPECT_EQ(training.output().find("MLflow"), std::string::npos) << "no request can have been answered yet";
  std::ofstream(gate).put('\n');
  const auto result = training.wait(120);
  ASSERT_EQ(result.status, 0) << result.output << proxy.output();
  EXPECT_NE(result.output.find(end_line(count_values(logged_metrics(run.path("run"))), "FINISHED")),
            std::string::npos)
      << result.output;
  expect_every_metric_on_the_server(run.path("run"),
                                    testing::read_mlflow_run(server.uri(), recorded_run_id(run.path("run"))));
}

// No server when the run starts: the values wait, are retried, and all arrive once it is up.
TEST(MlflowCli, AServerThatComesUpLateGetsEveryValue) {
  const TrainRun run;
  const int port = testing::free_port();
  BackgroundDtrain training(run.args("run", str("mlflow.uri=http://127.0.0.1:", port, " mlflow.end_wait_s=300")));
  ASSERT_TRUE(training.wait_while_running_until(
      [&] { return training.output().find("trained steps 1-20") != std::string::npos; }, 120))
      << training.output();
  const std::string unreachable = str("MLflow: cannot reach http://127.0.0.1:", port, " (");
  EXPECT_NE(training.output().find(unreachable), std::string::npos) << training.output();
  const MlflowServer server(port);
  const auto result = training.wait(120);
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find(str("MLflow: reached http://127.0.0.1:", port, " again")), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find(end_line(count_values(logged_metrics(run.path("run"))), "FINISHED")),
            std::string::npos)
      << result.output;
  expect_every_metric_on_the_server(run.path("run"),
                                    testing::read_mlflow_run(server.uri(), recorded_run_id(run.path("run"))));
}

// A server that never answers: the run trains as without one, and says at its end what did not
// reach it and where every value is.
TEST(MlflowCli, AServerThatNeverAnswersCostsTheRunNothing) {
  const TrainRun run;
  const int port = testing::free_port();
  const auto result = testing::run_dtrain(run.args("run", str("mlflow.uri=http://127.0.0.1:", port, " mlflow.end_wait_s=1")));
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_EQ(run.losses("run").size(), 20u);
  const int64_t values = count_values(logged_metrics(run.path("run")));
  const std::regex account(str("MLflow: ", values, " of ", values, " values not sent to http://127\\.0\\.0\\.1:", port,
                               ": [^\\n]+; every value is in [^\\n]+/run/metrics\\.jsonl"));
  EXPECT_TRUE(std::regex_search(result.output, account)) << result.output;
  EXPECT_FALSE(std::filesystem::exists(run.path("run") / "mlflow_run.json"));
}

// SIGTERM ends the MLflow run KILLED; the resumed training run continues the same MLflow run to
// FINISHED, each step's values once.
TEST(MlflowCli, AStoppedRunEndsKilledAndItsResumeContinuesIt) {
  const MlflowServer server;
  const TrainRun run;
  const std::string tracked = str("mlflow.uri=", server.uri());
  {
    BackgroundDtrain training(run.args("run", tracked), "DTRAIN_INJECT_FAULT=step-waits-for-signal@6");
    ASSERT_TRUE(training.wait_while_running_until([&] { return run.losses("run").size() == 5; }, 120))
        << training.output();
    training.signal(SIGTERM);
    const auto stopped = training.wait(120);
    ASSERT_EQ(stopped.status, 0) << stopped.output;
    EXPECT_NE(stopped.output.find(" ended KILLED, all "), std::string::npos) << stopped.output;
  }
  const std::string run_id = recorded_run_id(run.path("run"));
  EXPECT_EQ(testing::read_mlflow_run(server.uri(), run_id).status, "KILLED");

  const auto resumed = testing::run_dtrain(run.args("run", tracked));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(recorded_run_id(run.path("run")), run_id);
  const MlflowRunRecord record = testing::read_mlflow_run(server.uri(), run_id);
  EXPECT_EQ(record.status, "FINISHED");
  expect_every_metric_on_the_server(run.path("run"), record);
  EXPECT_EQ(record.metrics.at("train/loss").size(), 20u);
}

}  // namespace
}  // namespace dt
