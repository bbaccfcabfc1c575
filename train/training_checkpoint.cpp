#include "train/training_checkpoint.h"

#include <algorithm>
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

namespace {

std::string part_name(const std::string& buffer, size_t unit, int rank) {
  return str(buffer, ".unit.", unit, ".part.", rank);
}

// Reads flat buffer `buffer` ("model", "adamw.m" or "adamw.v") into `dest`, whole: tensor by
// tensor when the checkpoint holds it whole; when sharded, every rank's part of every unit into
// the saving run's layout, then tensor by tensor from there (the padding may differ).
void read_flat(const ckpt::Checkpoint& checkpoint, const std::string& buffer, FlatTensors& dest) {
  const ParameterLayout& layout = dest.layout();
  const nlohmann::json& state = checkpoint.state();
  const bool sharded = state.contains("sharding") &&
                       std::ranges::count(state["sharding"].at("buffers").get<std::vector<std::string>>(), buffer) > 0;
  if (!sharded) {
    for (const ParamInfo& p : layout.params()) checkpoint.read_into(str(buffer, ".", p.name), dest.shown(p));
    return;
  }
  const int ranks = state["sharding"].at("ranks").get<int>();
  const ParameterLayout saved(layout.config(), state["sharding"].at("unit_multiple").get<int64_t>());
  const FlatTensors whole(saved, MemTag::workspace, Device::cpu);
  for (size_t u = 0; u < saved.units().size(); ++u) {
    const kernels::FlatRange unit = saved.units()[u];
    const int64_t part = unit.size() / ranks;
    for (int r = 0; r < ranks; ++r)
      checkpoint.read_into(part_name(buffer, u, r), whole.all().slice_rows(unit.begin + r * part, part));
  }
  for (const ParamInfo& p : layout.params()) {
    const Tensor to = dest.shown(p), from = whole.shown(p.name);
    copy_bytes(to.data, to.device, from.data, from.device, to.bytes());
  }
}

}  // namespace

void load_checkpoint_parameters(const ckpt::Checkpoint& checkpoint, FlatTensors& params) {
  read_flat(checkpoint, "model", params);
}

namespace {

// The flat buffers a training checkpoint holds — the parameters and AdamW's moments — as host
// memory of the whole layout, which is what checkpoints are read from and written to: the
// parameters themselves for a model on the CPU, else a host copy; the moments are always a copy,
// put together from the optimizer's parts (download() before saving, upload() after loading).
class HostBuffers {
 public:
  HostBuffers(FlatTensors& params, AdamW& optimizer)
      : params_(params),
        optimizer_(optimizer),
        host_params_(params.device() == Device::cpu ? params : copies_.emplace_back(params.layout(), MemTag::workspace)),
        m_(copies_.emplace_back(params.layout(), MemTag::workspace)),
        v_(copies_.emplace_back(params.layout(), MemTag::workspace)) {}
  // Every tensor with its checkpoint name, for saving.
  std::vector<std::pair<std::string, Tensor>> tensors() const {
    std::vector<std::pair<std::string, Tensor>> out;
    for (const auto& [buffer, host] : entries())
      for (const ParamInfo& p : host->layout().params()) out.emplace_back(str(buffer, ".", p.name), host->shown(p));
    return out;
  }
  // Reads every buffer from `checkpoint`, whole or sharded.
  void read(const ckpt::Checkpoint& checkpoint) const {
    for (const auto& [buffer, host] : entries()) read_flat(checkpoint, buffer, *host);
  }
  void download() const {
    copy(host_params_, params_);
    optimizer_.put_moment(AdamW::Moment::first, m_.all());
    optimizer_.put_moment(AdamW::Moment::second, v_.all());
  }
  void upload() const {
    copy(params_, host_params_);
    optimizer_.take_moment(AdamW::Moment::first, m_.all());
    optimizer_.take_moment(AdamW::Moment::second, v_.all());
  }

 private:
  std::vector<std::pair<std::string, FlatTensors*>> entries() const {
    return {{"model", &host_params_}, {"adamw.m", &m_}, {"adamw.v", &v_}};
  }
  static void copy(FlatTensors& dst, const FlatTensors& src) {
    if (&dst == &src) return;
    const Tensor to = dst.all(), from = src.all();
    copy_bytes(to.data, to.device, from.data, from.device, from.bytes());
  }
  std::deque<FlatTensors> copies_;  // stable addresses; declared before the references into it
  FlatTensors& params_;
  AdamW& optimizer_;
  FlatTensors& host_params_;
  FlatTensors& m_;
  FlatTensors& v_;
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

namespace {

nlohmann::ordered_json training_state(int64_t adamw_steps, const LossScaler* scaler, const TrainingProgress& progress) {
  nlohmann::ordered_json state = {{"adamw_steps", adamw_steps},
                                  {"loader", {{"epoch", progress.loader.epoch}, {"position", progress.loader.position}}}};
  if (scaler) {
    const LossScalerState s = scaler->state();
    state["loss_scaler"] = {{"scale", s.scale}, {"finite_in_a_row", s.finite_in_a_row}, {"skipped", s.skipped}};
  }
  return state;
}

}  // namespace

std::filesystem::path save_training_checkpoint(const std::filesystem::path& root, int keep_last, FlatTensors& params,
                                               AdamW& optimizer, const LossScaler* scaler,
                                               const TrainingProgress& progress) {
  const nlohmann::ordered_json state = training_state(optimizer.steps_taken(), scaler, progress);
  const HostBuffers buffers(params, optimizer);
  buffers.download();
  return ckpt::save_checkpoint(root,
                               {.step = progress.step,
                                .model = model_description(params.layout().config()),
                                .state = state,
                                .tensors = buffers.tensors()},
                               keep_last);
}

std::filesystem::path save_sharded_training_checkpoint(const std::filesystem::path& root, int keep_last,
                                                       Communicator& control, const FlatTensors* params,
                                                       const DataParallel& zero, const LossScaler* scaler,
                                                       const TrainingProgress& progress) {
  const int rank = zero.group().rank(), ranks = zero.group().size();
  DT_CHECK(zero.zero_stage() >= 1, "a sharded checkpoint is ZeRO's");
  DT_CHECK((params != nullptr) == (rank == 0 && !zero.shards_parameters()),
           "rank 0, and only it, passes the whole parameters, unless they are sharded");
  // This rank's tensors, in host memory (parts on a GPU are copied out).
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::deque<Buffer> host_copies;
  const auto add = [&](std::string name, const Tensor& t) {
    Tensor host = t;
    if (t.device != Device::cpu) {
      host = host_copies.emplace_back(t.bytes(), MemTag::workspace, Device::cpu, false).view(t.dtype, t.shape);
      copy_bytes(host.data, Device::cpu, t.data, t.device, t.bytes());
    }
    tensors.emplace_back(std::move(name), host);
  };
  std::vector<std::string> buffers = {"adamw.m", "adamw.v"};
  if (zero.shards_parameters()) buffers.push_back("model");
  for (const std::string& buffer : buffers) {
    const std::vector<Tensor> parts = buffer == "model"     ? zero.parameter_parts()
                                      : buffer == "adamw.m" ? zero.optimizer().moment_parts(AdamW::Moment::first)
                                                            : zero.optimizer().moment_parts(AdamW::Moment::second);
    for (size_t u = 0; u < parts.size(); ++u) add(part_name(buffer, u, rank), parts[u]);
  }
  if (params != nullptr)
    for (const ParamInfo& p : params->layout().params()) add("model." + p.name, params->shown(p));

  // Rank 0 makes the directory, every rank writes its file (the slowest writer is waited for
  // untimed: a large write is not a hang), then rank 0 writes the manifest and puts it in place.
  if (rank == 0) ckpt::begin_checkpoint(root, progress.step);
  control.barrier().wait();
  ckpt::write_checkpoint_file(root, progress.step, ckpt::shard_file_name(rank, ranks), tensors);
  control.barrier(/*timed=*/false).wait();
  if (rank != 0) return {};
  nlohmann::ordered_json state = training_state(zero.optimizer().steps_taken(), scaler, progress);
  state["sharding"] = {{"ranks", ranks},
                       {"unit_multiple", zero.model_layout().unit_multiple()},
                       {"buffers", buffers}};
  std::vector<std::string> files;
  for (int r = 0; r < ranks; ++r) files.push_back(ckpt::shard_file_name(r, ranks));
  const ParameterLayout& layout = zero.model_layout();
  return ckpt::finish_checkpoint(
      root, {.step = progress.step, .model = model_description(layout.config()), .state = state, .tensors = {}}, files,
      keep_last);
}

TrainingProgress load_training_checkpoint(const ckpt::Checkpoint& checkpoint, FlatTensors& params, AdamW& optimizer,
                                          LossScaler* scaler) {
  return with_context(str("resuming from checkpoint '", checkpoint.directory().string(), "'"), [&] {
    check_same_model(checkpoint, params.layout().config());
    const HostBuffers buffers(params, optimizer);
    buffers.read(checkpoint);
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
