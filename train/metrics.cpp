#include "train/metrics.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dt {

namespace {

// The lines of an earlier metrics.jsonl for steps up to `step`: a resumed run continues the
// log of the checkpoint it resumed from, dropping what the interrupted run logged after it.
std::string lines_up_to(const std::filesystem::path& path, int64_t step) {
  std::ifstream in(path);
  std::string kept, line;
  while (std::getline(in, line)) {
    const auto entry = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (entry.is_object() && entry.contains("step") && entry["step"].is_number_integer() &&
        entry["step"].get<int64_t>() <= step)
      kept += line + '\n';
  }
  return kept;
}

}  // namespace

MetricsLog::MetricsLog(const std::filesystem::path& run_dir, int64_t resumed_step, bool tensorboard,
                       std::unique_ptr<MlflowTracker> mlflow)
    : metrics_path_(run_dir / "metrics.jsonl"), mlflow_(std::move(mlflow)) {
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec)
    throw Error(str("cannot create the run directory '", run_dir.string(), "': ", ec.message(),
                    "; choose a writable log.run_dir"));
  const std::string kept = resumed_step > 0 ? lines_up_to(metrics_path_, resumed_step) : "";
  metrics_.open(metrics_path_, std::ios::trunc);
  if (!metrics_) throw Error(str("cannot write '", metrics_path_.string(), "'; choose a writable log.run_dir"));
  metrics_ << kept;
  if (tensorboard) events_.emplace(run_dir);
}

void MetricsLog::write_line(const std::string& line) {
  metrics_ << line << '\n';
  metrics_.flush();
  if (!metrics_) throw Error(str("cannot write '", metrics_path_.string(), "' (is the disk full?)"));
}

void MetricsLog::log_step(const StepMetrics& m) {
  nlohmann::ordered_json peaks = nlohmann::ordered_json::object();
  for (int t = 0; t < kNumMemTags; ++t)
    peaks[std::string(mem_tag_name(static_cast<MemTag>(t)))] = m.memory.peak_bytes[t];
  const auto or_null = [&](double v) { return m.skipped ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(v); };
  nlohmann::ordered_json line = {{"step", m.step},
                                       {"loss", m.loss},
                                       {"lr", or_null(m.lr)},
                                       {"grad_norm", or_null(m.grad_norm)},
                                       {"tokens", m.tokens},
                                       {"tokens_per_s", m.tokens_per_s},
                                       {"step_ms", m.step_ms},
                                       {"mfu", or_null(m.mfu)},
                                       {"hfu", or_null(m.hfu)},
                                       {"loss_scale", m.loss_scale},
                                       {"skipped", m.skipped},
                                       {"communication_ms", m.communication_ms},
                                       {"communication_hidden", m.hidden_fraction},
                                       {"peak_bytes", peaks}};
  const std::pair<const char*, const std::vector<std::pair<int, double>>*> by_block[] = {
      {"expert_imbalance", &m.expert_imbalance}, {"expert_aux_loss", &m.expert_aux_loss},
      {"router_z_loss", &m.router_z_loss}, {"expert_dropped", &m.expert_dropped}};
  for (const auto& [name, values] : by_block) {
    if (values->empty()) continue;
    nlohmann::ordered_json blocks = nlohmann::ordered_json::object();
    for (const auto& [layer, value] : *values) blocks[str("h.", layer)] = value;
    line[name] = blocks;
  }
  write_line(line.dump());
  std::vector<std::pair<std::string, double>> scalars = {
      {"train/loss", m.loss}, {"train/tokens_per_s", m.tokens_per_s}, {"train/loss_scale", m.loss_scale}};
  if (!m.skipped)
    scalars.insert(scalars.end(),
                   {{"train/lr", m.lr}, {"train/grad_norm", m.grad_norm}, {"train/mfu", m.mfu}, {"train/hfu", m.hfu}});
  for (const auto& [tag, values] : {std::pair{"moe/imbalance/h.", &m.expert_imbalance},
                                    {"moe/aux_loss/h.", &m.expert_aux_loss}, {"moe/z_loss/h.", &m.router_z_loss},
                                    {"moe/dropped/h.", &m.expert_dropped}})
    for (const auto& [layer, value] : *values) scalars.emplace_back(str(tag, layer), value);
  record(scalars, m.step);
}

void MetricsLog::log_checkpoint(int64_t step, double stall_ms, double save_ms) {
  write_line(nlohmann::ordered_json{{"step", step}, {"checkpoint_stall_ms", stall_ms}, {"checkpoint_save_ms", save_ms}}.dump());
  record({{"checkpoint/stall_ms", stall_ms}, {"checkpoint/save_ms", save_ms}}, step);
}

void MetricsLog::log_validation(int64_t step, double loss) {
  write_line(nlohmann::ordered_json{{"step", step}, {"val_loss", loss}}.dump());
  record({{"val/loss", loss}}, step);
}

void MetricsLog::record(const std::vector<std::pair<std::string, double>>& scalars, int64_t step) {
  for (const auto& [name, value] : scalars) {
    if (events_) events_->add_scalar(name, value, step);
    if (mlflow_) mlflow_->log(name, value, step);
  }
  if (events_) events_->flush();
}

std::vector<std::string> MetricsLog::take_tracking_news() {
  return mlflow_ ? mlflow_->take_news() : std::vector<std::string>{};
}

std::string MetricsLog::end_tracking(RunEnd end, const std::function<void(const std::string&)>& say) {
  if (!mlflow_) return "";
  std::string account = mlflow_->end(end, say);
  mlflow_.reset();
  return account;
}

}  // namespace dt
