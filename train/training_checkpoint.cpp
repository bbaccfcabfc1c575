#include "train/training_checkpoint.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ckpt/tensor_pieces.h"
#include "comm/single_process.h"
#include "core/device.h"
#include "core/error.h"

namespace dt {

namespace {

// The checkpoint buffer of the per-linear states: linear_state.NAME.
constexpr std::string_view kLinearStateBuffer = "linear_state";

}  // namespace

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

// Reads each of `states`' entries by its name (checked by check_linear_states first).
void read_linear_states(const ckpt::Checkpoint& checkpoint, LinearStates& states) {
  for (const LinearStates::Entry& e : states.entries()) {
    const Tensor to = states.at(e);
    if (to.device == Device::cpu) {
      checkpoint.read_into(linear_state_tensor_name(e.name), to);
      continue;
    }
    const Buffer host(to.bytes(), MemTag::workspace, Device::cpu, false);
    checkpoint.read_into(linear_state_tensor_name(e.name), host.view(to.dtype, to.shape));
    copy_bytes(to.data, to.device, host.data(), Device::cpu, to.bytes());
  }
}

// "'a', 'b', 'c' and 2 more": the first few of `names`.
std::string some_of(const std::vector<std::string>& names) {
  constexpr size_t kShown = 3;
  std::string text;
  for (size_t i = 0; i < std::min(names.size(), kShown); ++i) text += str(i == 0 ? "" : ", ", "'", names[i], "'");
  if (names.size() > kShown) text += str(" and ", names.size() - kShown, " more");
  return text;
}

}  // namespace

void check_linear_states(const ckpt::Checkpoint& checkpoint, const LinearStates* states) {
  const std::string prefix = linear_state_tensor_name("");
  std::set<std::string> declared;
  if (states != nullptr)
    for (const std::string& name : states->model_names()) declared.insert(linear_state_tensor_name(name));
  // What the checkpoint holds, with the file holding it.
  std::map<std::string, std::string> saved;
  for (const auto& t : checkpoint.manifest().at("tensors"))
    if (const std::string name = t.at("name").get<std::string>(); name.starts_with(prefix))
      saved.emplace(name, t.at("file").get<std::string>());
  const std::string directory = checkpoint.directory().string();
  const std::string fix =
      "resume with the configuration that saved it, or start a new run in another checkpoint.dir (set "
      "checkpoint.resume = false to ignore it)";
  std::vector<std::string> extra, missing;
  for (const auto& [name, file] : saved)
    if (declared.count(name) == 0) extra.push_back(str(name, "' in '", (checkpoint.directory() / file).string()));
  if (!extra.empty())
    throw Error(str("checkpoint '", directory, "' holds per-linear state this model does not declare (",
                    states == nullptr || states->empty() ? "it declares none" : str("it declares ", states->model_names().size()),
                    "; model/linear_state.h): ", extra.size(), " tensors, ", some_of(extra), "; ", fix));
  for (const std::string& name : declared)
    if (saved.count(name) == 0) missing.push_back(name);
  if (!missing.empty())
    throw Error(str("checkpoint '", directory, "' lacks per-linear state this model declares (model/linear_state.h): ",
                    "its manifest '", (checkpoint.directory() / "manifest.json").string(), "' names no tensor ",
                    some_of(missing), " (", missing.size(), " of ", declared.size(),
                    " missing), so it was saved by a model that does not declare them; ", fix));
}

void load_linear_states(const ckpt::Checkpoint& checkpoint, LinearStates& states) {
  with_context(str("reading per-linear state from checkpoint '", checkpoint.directory().string(), "'"), [&] {
    check_linear_states(checkpoint, &states);
    read_linear_states(checkpoint, states);
  });
}

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

std::string linear_state_tensor_name(const std::string& name) { return str(kLinearStateBuffer, ".", name); }

namespace {

// Adds every per-linear state `states` holds (none: nothing) to what `share` saves whole.
void add_linear_states(CheckpointShare& share, const LinearStates* states) {
  if (states == nullptr) return;
  for (const LinearStates::Entry& e : states->entries())
    share.whole.emplace_back(linear_state_tensor_name(e.name), states->at(e));
}

}  // namespace

CheckpointShare checkpoint_share(const DataParallel& dp, const FlatTensors& params,
                                 const LinearStates* linear_states) {
  const AdamW& optimizer = dp.optimizer();
  const int rank = dp.group().rank();
  CheckpointShare share;
  const auto pieces = [&](const std::vector<Tensor>& parts) {
    std::vector<CheckpointShare::Piece> out;
    for (size_t i = 0; i < parts.size(); ++i) out.push_back({optimizer.ranges()[i], parts[i]});
    return out;
  };
  // What every rank of a group holds whole, its rank 0 writes: the experts, their group's (the
  // ranks holding the same ones: each expert-parallel rank's are others), the rest the data-
  // parallel group's. What is sharded, every rank writes its parts of.
  const ParameterLayout& layout = params.layout();
  const bool lead = rank == 0, experts_lead = dp.expert_group().rank() == 0;
  const auto held_whole = [&](const Tensor& buffer) {
    std::vector<CheckpointShare::Piece> out;
    for (size_t u = 0; u < layout.units().size(); ++u) {
      const kernels::FlatRange unit = layout.units()[u], experts = layout.experts_of_unit(u);
      for (const auto& [range, writes] : {std::pair{kernels::FlatRange{unit.begin, experts.begin}, lead},
                                          std::pair{experts, experts_lead}})
        if (writes && range.size() > 0)
          out.push_back({range, buffer.reshape({buffer.numel()}).slice_rows(range.begin, range.size())});
    }
    return out;
  };
  share.buffers.emplace_back("model", dp.policy().shards_f32_parameters() ? pieces(dp.parameter_parts())
                                                                         : held_whole(params.all()));
  for (const auto& [name, moment] : {std::pair{"adamw.m", AdamW::Moment::first}, {"adamw.v", AdamW::Moment::second}})
    share.buffers.emplace_back(name, dp.policy().shards_optimizer_state ? pieces(optimizer.moment_parts(moment))
                                                                        : held_whole(optimizer.moment_parts(moment)[0]));
  // A per-linear state is the same on every rank of its pipeline stage: the stage's first rank
  // (rank 0 of dp × cp and of tp) writes it.
  if (lead && layout.shard().rank == 0) add_linear_states(share, linear_states);
  return share;
}

std::vector<std::pair<std::string, Tensor>> checkpoint_tensors(const ParameterLayout& layout,
                                                              const CheckpointShare& share) {
  // For each parameter inside a piece, the whole tensor under its name, or the part of it the
  // piece holds.
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [buffer, pieces] : share.buffers)
    for (const CheckpointShare::Piece& piece : pieces) {
      const Tensor values = piece.values.reshape({piece.range.size()});
      for (const ParamInfo& p : layout.params()) {
        const int64_t b = std::max(p.offset, piece.range.begin), e = std::min(p.offset + p.numel(), piece.range.end);
        if (b >= e) continue;
        for (ckpt::NamedPiece& named : ckpt::saved_pieces(str(buffer, ".", p.name), p, b - p.offset,
                                                          values.slice_rows(b - piece.range.begin, e - b)))
          tensors.emplace_back(std::move(named.name), named.values);
      }
    }
  for (const auto& [name, tensor] : share.whole) tensors.emplace_back(name, tensor);
  return tensors;
}

CheckpointShare share_copy(const CheckpointShare& share, const std::function<Tensor(const Tensor&)>& copy) {
  CheckpointShare copied{.buffers = {}, .whole = {}};
  for (const auto& [buffer, pieces] : share.buffers) {
    std::vector<CheckpointShare::Piece>& to = copied.buffers.emplace_back(buffer, std::vector<CheckpointShare::Piece>{}).second;
    for (const CheckpointShare::Piece& piece : pieces) to.push_back({piece.range, copy(piece.values)});
  }
  for (const auto& [name, tensor] : share.whole) copied.whole.emplace_back(name, copy(tensor));
  return copied;
}

void CheckpointShare::for_each_value(const std::function<void(const Tensor&)>& visit) const {
  for (const auto& [buffer, pieces] : buffers)
    for (const Piece& piece : pieces) visit(piece.values);
  for (const auto& [name, tensor] : whole) visit(tensor);
}

size_t checkpoint_share_bytes(const CheckpointShare& share) {
  size_t bytes = 0;
  share.for_each_value([&](const Tensor& t) { bytes += t.bytes(); });
  return bytes;
}

CheckpointFiles checkpoint_files(Communicator& control, bool writes) {
  const int rank = control.rank(), ranks = control.size();
  const Buffer flags_buffer(static_cast<size_t>(ranks) * sizeof(int32_t), MemTag::workspace, Device::cpu);
  const Tensor flags = flags_buffer.view(DType::i32, {ranks});
  flags.ptr<int32_t>()[rank] = writes ? 1 : 0;
  control.all_gather(flags, flags.slice_rows(rank, 1)).wait();
  CheckpointFiles files;
  std::vector<int> writers;
  for (int r = 0; r < ranks; ++r)
    if (flags.ptr<int32_t>()[r] != 0) writers.push_back(r);
  for (size_t i = 0; i < writers.size(); ++i) {
    files.all.push_back(ckpt::shard_file_name(static_cast<int>(i), static_cast<int>(writers.size())));
    if (writers[i] == rank) files.own = files.all.back();
  }
  return files;
}

ckpt::CheckpointContent checkpoint_content(const ParameterLayout& layout, const AdamW& optimizer,
                                           const LossScaler* scaler, const TrainingProgress& progress) {
  return {.step = progress.step,
          .model = model_description(layout.config()),
          .state = training_state(optimizer.steps_taken(), scaler, progress),
          .tensors = {}};
}

std::filesystem::path save_training_checkpoint(const std::filesystem::path& root, int keep_last,
                                               Communicator& control, const ParameterLayout& layout,
                                               const CheckpointShare& share, const AdamW& optimizer,
                                               const LossScaler* scaler, const TrainingProgress& progress) {
  // This rank's tensors, in host memory: pieces on a GPU are copied out.
  std::deque<Buffer> host_copies;
  const CheckpointShare on_host = share_copy(share, [&](const Tensor& t) {
    if (t.device == Device::cpu) return t;
    const Tensor host =
        host_copies.emplace_back(t.bytes(), MemTag::workspace, Device::cpu, false).view(t.dtype, t.shape);
    copy_bytes(host.data, Device::cpu, t.data, t.device, t.bytes());
    return host;
  });
  const std::vector<std::pair<std::string, Tensor>> tensors = checkpoint_tensors(layout, on_host);
  const CheckpointFiles files = checkpoint_files(control, !tensors.empty());
  // Rank 0 makes the directory, the writers write their files (the slowest is waited for
  // untimed: a large write is not a hang), then rank 0 writes the manifest and puts it in place.
  if (control.rank() == 0) ckpt::begin_checkpoint(root, progress.step);
  control.barrier().wait();
  if (!files.own.empty()) ckpt::write_checkpoint_file(root, progress.step, files.own, tensors);
  control.barrier(/*timed=*/false).wait();
  if (control.rank() != 0) return {};
  return ckpt::finish_checkpoint(root, checkpoint_content(layout, optimizer, scaler, progress), files.all, keep_last);
}

std::filesystem::path save_training_checkpoint(const std::filesystem::path& root, int keep_last,
                                               const FlatTensors& params, const AdamW& optimizer,
                                               const LossScaler* scaler, const TrainingProgress& progress,
                                               const LinearStates* linear_states) {
  DT_CHECK(optimizer.ranges().size() == 1 && optimizer.ranges()[0].size() == params.layout().total_elements(),
           "one process's checkpoint needs an optimizer of the whole layout");
  const kernels::FlatRange all{0, params.layout().total_elements()};
  CheckpointShare share{.buffers = {{"model", {{all, params.all()}}},
                                    {"adamw.m", {{all, optimizer.moment_parts(AdamW::Moment::first)[0]}}},
                                    {"adamw.v", {{all, optimizer.moment_parts(AdamW::Moment::second)[0]}}}},
                        .whole = {}};
  add_linear_states(share, linear_states);
  SingleProcessCommunicator control(Device::cpu, "control");
  return save_training_checkpoint(root, keep_last, control, params.layout(), share, optimizer, scaler, progress);
}

TrainingProgress load_training_checkpoint(const ckpt::Checkpoint& checkpoint, FlatTensors& params, AdamW& optimizer,
                                          LossScaler* scaler, LinearStates* linear_states) {
  return with_context(str("resuming from checkpoint '", checkpoint.directory().string(), "'"), [&] {
    check_same_model(checkpoint, params.layout().config());
    check_linear_states(checkpoint, linear_states);
    const HostBuffers buffers(params, optimizer);
    buffers.read(checkpoint);
    buffers.upload();
    if (linear_states != nullptr) read_linear_states(checkpoint, *linear_states);
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
