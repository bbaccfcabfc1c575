#include "train/training_checkpoint.h"

#include <deque>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/error.h"

namespace dt {

nlohmann::ordered_json model_description(const ModelConfig& c) {
  return {{"family", model_family_name(c.family)},
          {"n_layer", c.n_layer},
          {"d_model", c.d_model},
          {"n_head", c.n_head},
          {"n_kv_head", c.kv_heads()},
          {"ffn_hidden_size", c.ffn_hidden()},
          {"vocab_size", c.vocab_size},
          {"max_seq_len", c.max_seq_len},
          {"tied_embeddings", c.tied_embeddings},
          {"norm_eps", c.norm_eps},
          {"rope_theta", c.rope_theta},
          {"rope_scaling_factor", c.rope_scaling_factor},
          {"rope_low_freq_factor", c.rope_low_freq_factor},
          {"rope_high_freq_factor", c.rope_high_freq_factor},
          {"rope_original_max_seq_len", c.rope_original_max_seq_len}};
}

ModelConfig model_config_of(const ckpt::Checkpoint& checkpoint) {
  return with_context(str("checkpoint '", checkpoint.directory().string(), "': model description"), [&] {
    const nlohmann::json& d = checkpoint.model();
    try {
      const std::string family = d.at("family").get<std::string>();
      if (family != "gpt2" && family != "llama") throw Error(str("unknown family '", family, "'"));
      ModelConfig c;
      c.family = family == "gpt2" ? ModelFamily::gpt2 : ModelFamily::llama;
      c.n_layer = d.at("n_layer").get<int>();
      c.d_model = d.at("d_model").get<int>();
      c.n_head = d.at("n_head").get<int>();
      c.n_kv_head = d.at("n_kv_head").get<int>();
      c.ffn_hidden_size = d.at("ffn_hidden_size").get<int>();
      c.vocab_size = d.at("vocab_size").get<int>();
      c.max_seq_len = d.at("max_seq_len").get<int>();
      c.tied_embeddings = d.at("tied_embeddings").get<bool>();
      c.norm_eps = d.at("norm_eps").get<float>();
      c.rope_theta = d.at("rope_theta").get<double>();
      c.rope_scaling_factor = d.at("rope_scaling_factor").get<double>();
      c.rope_low_freq_factor = d.at("rope_low_freq_factor").get<double>();
      c.rope_high_freq_factor = d.at("rope_high_freq_factor").get<double>();
      c.rope_original_max_seq_len = d.at("rope_original_max_seq_len").get<int>();
      validate_model_config(c);
      return c;
    } catch (const nlohmann::json::exception& e) {
      throw Error(str("incomplete or malformed (", e.what(), "); was it written by another program?"));
    }
  });
}

void load_checkpoint_parameters(const ckpt::Checkpoint& checkpoint, FlatTensors& params) {
  for (const ParamInfo& p : params.layout().params()) checkpoint.read_into("model." + p.name, params.shown(p));
}

namespace {

// The flat buffers a training checkpoint holds — the parameters and AdamW's moments — as host
// memory, which is what checkpoints are read from and written to: the buffers themselves for a
// model on the CPU, else host copies (download() before saving, upload() after loading).
class HostBuffers {
 public:
  HostBuffers(FlatTensors& params, AdamW& optimizer) {
    for (const auto& [prefix, flat] : {std::pair<std::string, FlatTensors*>{"model.", &params},
                                       {"adamw.m.", &optimizer.m()},
                                       {"adamw.v.", &optimizer.v()}}) {
      FlatTensors* host = flat;
      if (flat->device() != Device::cpu) host = &copies_.emplace_back(flat->layout(), MemTag::workspace, Device::cpu);
      entries_.push_back({prefix, flat, host});
    }
  }
  // Every tensor with its checkpoint name, in one order for saving and loading.
  std::vector<std::pair<std::string, Tensor>> tensors() const {
    std::vector<std::pair<std::string, Tensor>> out;
    for (const Entry& e : entries_)
      for (const ParamInfo& p : e.host->layout().params()) out.emplace_back(e.prefix + p.name, e.host->shown(p));
    return out;
  }
  void download() const {
    for (const Entry& e : entries_) copy(*e.host, *e.own);
  }
  void upload() const {
    for (const Entry& e : entries_) copy(*e.own, *e.host);
  }

 private:
  struct Entry {
    std::string prefix;
    FlatTensors* own;   // where training keeps it
    FlatTensors* host;  // the same, or its host copy
  };
  static void copy(FlatTensors& dst, const FlatTensors& src) {
    if (&dst == &src) return;
    const Tensor to = dst.all(), from = src.all();
    copy_bytes(to.data, to.device, from.data, from.device, from.bytes());
  }
  std::deque<FlatTensors> copies_;  // stable addresses
  std::vector<Entry> entries_;
};

void check_same_model(const ckpt::Checkpoint& checkpoint, const ModelConfig& config) {
  const nlohmann::ordered_json ours = model_description(config);
  const nlohmann::json& saved = checkpoint.model();
  std::string differences;
  for (const auto& [key, value] : ours.items()) {
    const std::string theirs = saved.contains(key) ? saved[key].dump() : "(missing)";
    if (theirs != nlohmann::json(value).dump()) differences += str("\n  model.", key, ": checkpoint ", theirs, ", config ", value.dump());
  }
  if (!differences.empty())
    throw Error(str("checkpoint '", checkpoint.directory().string(), "' was saved by a different model:", differences,
                    "\nresume with the configuration that saved it, or start a new run in another "
                    "checkpoint.dir (set checkpoint.resume = false to ignore it)"));
}

}  // namespace

std::filesystem::path save_training_checkpoint(const std::filesystem::path& root, int keep_last, FlatTensors& params,
                                               AdamW& optimizer, const LossScaler* scaler,
                                               const TrainingProgress& progress) {
  nlohmann::ordered_json state = {{"adamw_steps", optimizer.steps_taken()},
                                  {"loader", {{"epoch", progress.loader.epoch}, {"position", progress.loader.position}}}};
  if (scaler) {
    const LossScalerState s = scaler->state();
    state["loss_scaler"] = {{"scale", s.scale}, {"finite_in_a_row", s.finite_in_a_row}, {"skipped", s.skipped}};
  }
  const HostBuffers buffers(params, optimizer);
  buffers.download();
  return ckpt::save_checkpoint(root,
                               {.step = progress.step,
                                .model = model_description(params.layout().config()),
                                .state = state,
                                .tensors = buffers.tensors()},
                               keep_last);
}

TrainingProgress load_training_checkpoint(const ckpt::Checkpoint& checkpoint, FlatTensors& params, AdamW& optimizer,
                                          LossScaler* scaler) {
  return with_context(str("resuming from checkpoint '", checkpoint.directory().string(), "'"), [&] {
    check_same_model(checkpoint, params.layout().config());
    const HostBuffers buffers(params, optimizer);
    for (const auto& [name, tensor] : buffers.tensors()) checkpoint.read_into(name, tensor);
    buffers.upload();
    const nlohmann::json& state = checkpoint.state();
    optimizer.restore_steps_taken(state.at("adamw_steps").get<int64_t>());
    if (scaler) {
      if (!state.contains("loss_scaler"))
        throw Error("it was saved without loss scaling; set loss_scale.enabled = false to resume it");
      const auto& s = state["loss_scaler"];
      scaler->restore({s.at("scale").get<float>(), s.at("finite_in_a_row").get<int64_t>(), s.at("skipped").get<int64_t>()});
    }
    return TrainingProgress{.step = checkpoint.step(),
                            .loader = {state.at("loader").at("epoch").get<int64_t>(),
                                       state.at("loader").at("position").get<int64_t>()}};
  });
}

}  // namespace dt
