#include "train/training_checkpoint.h"

#include <algorithm>
#include <deque>
#include <set>
#include <string>
#include <vector>

#include "ckpt/tensor_pieces.h"
#include "comm/single_process.h"
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

// Reads flat buffer `buffer` ("model", "adamw.m" or "adamw.v") into `dest`, whole: each tensor
// whole or from its pieces. Checkpoints of earlier versions sharded by unit are read into the
// saving run's layout, then tensor by tensor from there (the padding may differ).
void read_flat(const ckpt::Checkpoint& checkpoint, const std::string& buffer, FlatTensors& dest) {
  const ParameterLayout& layout = dest.layout();
  const nlohmann::json& state = checkpoint.state();
  const bool unit_parts = state.contains("sharding") &&
                          std::ranges::count(state["sharding"].at("buffers").get<std::vector<std::string>>(), buffer) > 0;
  if (!unit_parts) {
    const std::vector<std::string> names = checkpoint.tensor_names();
    for (const ParamInfo& p : layout.params()) ckpt::read_slice(checkpoint, names, str(buffer, ".", p.name), p, dest.unpadded(p));
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
  copy_slices(whole, dest);
}

}  // namespace

void load_checkpoint_parameters(const ckpt::Checkpoint& checkpoint, FlatTensors& params) {
  read_flat(checkpoint, "model", params);
}

namespace {

// What a resume reads into: the whole layout of each buffer in host memory — the parameters
// themselves for a model on the CPU, else a host copy; the moments always a copy, of which the
// optimizer then takes its parts (upload()).
class HostBuffers {
 public:
  HostBuffers(FlatTensors& params, AdamW& optimizer)
      : params_(params),
        optimizer_(optimizer),
        host_params_(params.device() == Device::cpu ? params : copies_.emplace_back(params.layout(), MemTag::workspace)),
        m_(copies_.emplace_back(params.layout(), MemTag::workspace)),
        v_(copies_.emplace_back(params.layout(), MemTag::workspace)) {}
  // Reads every buffer from `checkpoint`.
  void read(const ckpt::Checkpoint& checkpoint) const {
    read_flat(checkpoint, "model", host_params_);
    read_flat(checkpoint, "adamw.m", m_);
    read_flat(checkpoint, "adamw.v", v_);
  }
  void upload() const {
    if (&host_params_ != &params_) {
      const Tensor to = params_.all(), from = host_params_.all();
      copy_bytes(to.data, to.device, from.data, from.device, from.bytes());
    }
    optimizer_.take_moment(AdamW::Moment::first, m_.all());
    optimizer_.take_moment(AdamW::Moment::second, v_.all());
  }

 private:
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

CheckpointShare checkpoint_share(const DataParallel& dp, const FlatTensors& params) {
  const AdamW& optimizer = dp.optimizer();
  const int rank = dp.group().rank();
  CheckpointShare share;
  const auto pieces = [&](const std::vector<Tensor>& parts) {
    std::vector<CheckpointShare::Piece> out;
    for (size_t i = 0; i < parts.size(); ++i) out.push_back({optimizer.ranges()[i], parts[i]});
    return out;
  };
  // What every rank holds whole, rank 0 writes; what is sharded, every rank writes its parts of.
  if (dp.policy().shards_f32_parameters())
    share.buffers.emplace_back("model", pieces(dp.parameter_parts()));
  else if (rank == 0)
    share.buffers.emplace_back("model", std::vector<CheckpointShare::Piece>{
                                            {{0, params.layout().total_elements()}, params.all()}});
  if (dp.policy().shards_optimizer_state || rank == 0) {
    share.buffers.emplace_back("adamw.m", pieces(optimizer.moment_parts(AdamW::Moment::first)));
    share.buffers.emplace_back("adamw.v", pieces(optimizer.moment_parts(AdamW::Moment::second)));
  }
  return share;
}

std::filesystem::path save_training_checkpoint(const std::filesystem::path& root, int keep_last,
                                               Communicator& control, const ParameterLayout& layout,
                                               const CheckpointShare& share, const AdamW& optimizer,
                                               const LossScaler* scaler, const TrainingProgress& progress) {
  const int rank = control.rank();
  // This rank's tensors, in host memory (pieces on a GPU are copied out): for each parameter
  // inside a piece, the whole tensor under its name, or the part of it the piece holds.
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::deque<Buffer> host_copies;
  for (const auto& [buffer, pieces] : share.buffers)
    for (const CheckpointShare::Piece& piece : pieces) {
      Tensor values = piece.values.reshape({piece.range.size()});
      if (values.device != Device::cpu) {
        const Tensor host = host_copies.emplace_back(values.bytes(), MemTag::workspace, Device::cpu, false)
                                .view(DType::f32, {piece.range.size()});
        copy_bytes(host.data, Device::cpu, values.data, values.device, values.bytes());
        values = host;
      }
      for (const ParamInfo& p : layout.params()) {
        const int64_t b = std::max(p.offset, piece.range.begin), e = std::min(p.offset + p.numel(), piece.range.end);
        if (b >= e) continue;
        for (ckpt::NamedPiece& named : ckpt::saved_pieces(str(buffer, ".", p.name), p, b - p.offset,
                                                          values.slice_rows(b - piece.range.begin, e - b)))
          tensors.emplace_back(std::move(named.name), named.values);
      }
    }
  // The writers, in rank order: the ranks with something to write.
  const int ranks = control.size();
  const Buffer writes(static_cast<size_t>(ranks) * sizeof(int32_t), MemTag::workspace, Device::cpu);
  const Tensor flags = writes.view(DType::i32, {ranks});
  flags.ptr<int32_t>()[rank] = tensors.empty() ? 0 : 1;
  control.all_gather(flags, flags.slice_rows(rank, 1)).wait();
  std::vector<int> writers;
  for (int r = 0; r < ranks; ++r)
    if (flags.ptr<int32_t>()[r] != 0) writers.push_back(r);
  // Rank 0 makes the directory, the writers write their files (the slowest is waited for
  // untimed: a large write is not a hang), then rank 0 writes the manifest and puts it in place.
  if (rank == 0) ckpt::begin_checkpoint(root, progress.step);
  control.barrier().wait();
  std::vector<std::string> files;
  for (size_t i = 0; i < writers.size(); ++i) {
    files.push_back(ckpt::shard_file_name(static_cast<int>(i), static_cast<int>(writers.size())));
    if (writers[i] == rank) ckpt::write_checkpoint_file(root, progress.step, files.back(), tensors);
  }
  control.barrier(/*timed=*/false).wait();
  if (rank != 0) return {};
  return ckpt::finish_checkpoint(root,
                                 {.step = progress.step,
                                  .model = model_description(layout.config()),
                                  .state = training_state(optimizer.steps_taken(), scaler, progress),
                                  .tensors = {}},
                                 files, keep_last);
}

std::filesystem::path save_training_checkpoint(const std::filesystem::path& root, int keep_last,
                                               const FlatTensors& params, const AdamW& optimizer,
                                               const LossScaler* scaler, const TrainingProgress& progress) {
  DT_CHECK(optimizer.ranges().size() == 1 && optimizer.ranges()[0].size() == params.layout().total_elements(),
           "one process's checkpoint needs an optimizer of the whole layout");
  const kernels::FlatRange all{0, params.layout().total_elements()};
  const CheckpointShare share{
      .buffers = {{"model", {{all, params.all()}}},
                  {"adamw.m", {{all, optimizer.moment_parts(AdamW::Moment::first)[0]}}},
                  {"adamw.v", {{all, optimizer.moment_parts(AdamW::Moment::second)[0]}}}}};
  SingleProcessCommunicator control(Device::cpu, "control");
  return save_training_checkpoint(root, keep_last, control, params.layout(), share, optimizer, scaler, progress);
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
