#include "train/run_config_keys.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/suggest.h"

namespace dt::run_config {

namespace {

// The enumerations a key can name, with their names.
constexpr std::array kRecomputePolicies{Recompute::none, Recompute::selective, Recompute::full};
constexpr std::array kDecays{LrDecay::cosine, LrDecay::linear, LrDecay::wsd};
constexpr std::array kFamilies{ModelFamily::gpt2, ModelFamily::llama};
constexpr std::array kMoeScores{kernels::MoeScore::softmax, kernels::MoeScore::sigmoid};
constexpr std::array kFloat8Scalings{Float8Scaling::none, Float8Scaling::tensorwise, Float8Scaling::delayed,
                                     Float8Scaling::blockwise};

std::string_view name_of(DType v) { return dtype_name(v); }
std::string_view name_of(Recompute v) { return recompute_name(v); }
std::string_view name_of(ModelFamily v) { return model_family_name(v); }
std::string_view name_of(Float8Scaling v) { return float8_scaling_name(v); }
std::string_view name_of(kernels::MoeScore v) { return v == kernels::MoeScore::softmax ? "softmax" : "sigmoid"; }
std::string_view name_of(LrDecay v) {
  switch (v) {
    case LrDecay::cosine:
      return "cosine";
    case LrDecay::linear:
      return "linear";
    case LrDecay::wsd:
      return "wsd";
  }
  return "?";
}

// "expected an integer, got a string", with a hint when the string holds what was expected.
std::string expected(std::string_view what, const toml::node& node, bool (*fits_unquoted)(const toml::node&)) {
  std::string message = str("expected ", what, ", got ", toml_type_name(node));
  if (const auto* text = node.as_string()) {
    try {
      const toml::table unquoted = toml::parse(str("x = ", text->get()), std::string_view("value"));
      if (const toml::node* x = unquoted.get("x"); x && fits_unquoted(*x)) message += "; write it without quotes";
    } catch (const toml::parse_error&) {
    }
  }
  return message;
}
bool is_bool(const toml::node& n) { return n.is_boolean(); }
bool is_integer(const toml::node& n) { return n.is_integer(); }
bool is_number(const toml::node& n) { return n.is_number(); }

std::string read_value(const toml::node& node, bool& out) {
  if (!node.is_boolean()) return expected("true or false", node, is_bool);
  out = node.as_boolean()->get();
  return "";
}

std::string read_value(const toml::node& node, int64_t& out) {
  if (!node.is_integer()) return expected("an integer", node, is_integer);
  out = node.as_integer()->get();
  return "";
}

std::string read_value(const toml::node& node, int& out) {
  int64_t wide = 0;
  if (std::string problem = read_value(node, wide); !problem.empty()) return problem;
  if (wide < std::numeric_limits<int>::min() || wide > std::numeric_limits<int>::max())
    return str("must be in [", std::numeric_limits<int>::min(), ", ", std::numeric_limits<int>::max(), "]");
  out = static_cast<int>(wide);
  return "";
}

std::string read_value(const toml::node& node, uint64_t& out) {
  int64_t wide = 0;
  if (std::string problem = read_value(node, wide); !problem.empty()) return problem;
  if (wide < 0) return "must be at least 0";
  out = static_cast<uint64_t>(wide);
  return "";
}

std::string read_value(const toml::node& node, double& out) {
  if (!node.is_number()) return expected("a number", node, is_number);
  out = *node.value<double>();
  return "";
}

std::string read_value(const toml::node& node, float& out) {
  double wide = 0;
  if (std::string problem = read_value(node, wide); !problem.empty()) return problem;
  if (std::isfinite(wide) && std::fabs(wide) > std::numeric_limits<float>::max())
    return str("is beyond the range of a 32-bit float (", std::numeric_limits<float>::max(), ")");
  out = static_cast<float>(wide);
  return "";
}

std::string read_value(const toml::node& node, std::string& out) {
  if (!node.is_string()) return expected("a string", node, [](const toml::node&) { return false; });
  out = node.as_string()->get();
  return "";
}

std::string read_value(const toml::node& node, std::filesystem::path& out) {
  std::string text;
  if (std::string problem = read_value(node, text); !problem.empty()) return problem;
  out = text;
  return "";
}

template <typename T, size_t N>
std::string read_enum(const toml::node& node, T& out, const std::array<T, N>& values) {
  std::string name;
  if (std::string problem = read_value(node, name); !problem.empty()) return problem;
  std::vector<std::string> names;
  for (T v : values) {
    if (name_of(v) == name) {
      out = v;
      return "";
    }
    names.emplace_back(name_of(v));
  }
  return not_one_of(name, names);
}
std::string read_value(const toml::node& node, DType& out) { return read_enum(node, out, kTrainingPrecisions); }
std::string read_value(const toml::node& node, Recompute& out) { return read_enum(node, out, kRecomputePolicies); }
std::string read_value(const toml::node& node, LrDecay& out) { return read_enum(node, out, kDecays); }
std::string read_value(const toml::node& node, ModelFamily& out) { return read_enum(node, out, kFamilies); }
std::string read_value(const toml::node& node, kernels::MoeScore& out) { return read_enum(node, out, kMoeScores); }
std::string read_value(const toml::node& node, Float8Scaling& out) { return read_enum(node, out, kFloat8Scalings); }

std::string write_value(bool v) { return v ? "true" : "false"; }
std::string write_value(int v) { return std::to_string(v); }
std::string write_value(int64_t v) { return std::to_string(v); }
std::string write_value(uint64_t v) { return std::to_string(v); }
std::string write_value(float v) { return toml_text(v); }
std::string write_value(double v) { return toml_text(v); }
std::string write_value(const std::string& v) { return toml_text(v); }
std::string write_value(const std::filesystem::path& v) { return toml_text(v.string()); }
template <typename T>
  requires std::is_enum_v<T>
std::string write_value(T v) {
  return toml_text(name_of(v));
}

// A key bound to the RunConfig field reached through `members` (&RunConfig::train,
// &RunConfig::Train::steps).
template <typename... Members>
ConfigKey key(std::string_view section, std::string_view name, Members... members) {
  return {.section = section,
          .name = name,
          .read = [=](const toml::node& node, RunConfig& c) { return read_value(node, (c .* ... .* members)); },
          .write = [=](const RunConfig& c) { return write_value((c .* ... .* members)); }};
}

// A key that describes a family trait (ConfigKey::trait).
template <typename... Members>
ConfigKey trait_key(ConfigKey::Trait trait, std::string_view section, std::string_view name, Members... members) {
  ConfigKey k = key(section, name, members...);
  k.trait = trait;
  return k;
}

// A string key whose value must be one of `valid`.
template <typename... Members>
ConfigKey choice_key(std::string_view section, std::string_view name, const std::vector<std::string>& valid,
                     Members... members) {
  ConfigKey k = key(section, name, members...);
  k.read = [=, &valid](const toml::node& node, RunConfig& c) {
    std::string value;
    if (std::string problem = read_value(node, value); !problem.empty()) return problem;
    if (std::find(valid.begin(), valid.end(), value) == valid.end()) return not_one_of(value, valid);
    (c .* ... .* members) = value;
    return std::string();
  };
  return k;
}

std::vector<ConfigKey> make_keys() {
  using C = RunConfig;
  using M = ModelConfig;
  return {
      key("model", "preset", &C::model_preset),
      key("model", "family", &C::model, &M::family),
      key("model", "n_layer", &C::model, &M::n_layer),
      key("model", "d_model", &C::model, &M::d_model),
      key("model", "n_head", &C::model, &M::n_head),
      trait_key(ConfigKey::Trait::grouped_query, "model", "n_kv_head", &C::model, &M::n_kv_head),
      key("model", "ffn_hidden_size", &C::model, &M::ffn_hidden_size),
      key("model", "vocab_size", &C::model, &M::vocab_size),
      key("model", "max_seq_len", &C::model, &M::max_seq_len),
      key("model", "tied_embeddings", &C::model, &M::tied_embeddings),
      key("model", "qkv_bias", &C::model, &M::qkv_bias),
      key("model", "qk_norm", &C::model, &M::qk_norm),
      key("model", "norm_eps", &C::model, &M::norm_eps),
      trait_key(ConfigKey::Trait::rotary, "model", "rope_theta", &C::model, &M::rope_theta),
      trait_key(ConfigKey::Trait::rotary, "model", "rope_scaling_factor", &C::model, &M::rope_scaling_factor),
      trait_key(ConfigKey::Trait::rotary, "model", "rope_low_freq_factor", &C::model, &M::rope_low_freq_factor),
      trait_key(ConfigKey::Trait::rotary, "model", "rope_high_freq_factor", &C::model, &M::rope_high_freq_factor),
      trait_key(ConfigKey::Trait::rotary, "model", "rope_original_max_seq_len", &C::model, &M::rope_original_max_seq_len),
      key("model", "vocab_pad_multiple", &C::model, &M::vocab_pad_multiple),
      trait_key(ConfigKey::Trait::moe, "model", "moe_experts", &C::model, &M::moe, &MoeConfig::experts),
      trait_key(ConfigKey::Trait::moe, "model", "moe_expert_hidden", &C::model, &M::moe, &MoeConfig::expert_hidden),
      trait_key(ConfigKey::Trait::moe, "model", "moe_top_k", &C::model, &M::moe, &MoeConfig::routing,
                &kernels::MoeRouting::top_k),
      trait_key(ConfigKey::Trait::moe, "model", "moe_score", &C::model, &M::moe, &MoeConfig::routing,
                &kernels::MoeRouting::score),
      trait_key(ConfigKey::Trait::moe, "model", "moe_renormalize", &C::model, &M::moe, &MoeConfig::routing,
                &kernels::MoeRouting::renormalize),
      trait_key(ConfigKey::Trait::moe, "model", "moe_route_scale", &C::model, &M::moe, &MoeConfig::routing,
                &kernels::MoeRouting::route_scale),
      trait_key(ConfigKey::Trait::moe, "model", "moe_shared_hidden", &C::model, &M::moe, &MoeConfig::shared_hidden),
      trait_key(ConfigKey::Trait::moe, "model", "moe_shared_gate", &C::model, &M::moe, &MoeConfig::shared_gate),
      trait_key(ConfigKey::Trait::moe, "model", "moe_first_dense_layers", &C::model, &M::moe,
                &MoeConfig::first_dense_layers),
      trait_key(ConfigKey::Trait::moe, "model", "moe_bias_update_rate", &C::model, &M::moe,
                &MoeConfig::bias_update_rate),
      trait_key(ConfigKey::Trait::moe, "model", "moe_aux_loss_coef", &C::model, &M::moe, &MoeConfig::aux_loss_coef),
      trait_key(ConfigKey::Trait::moe, "model", "moe_z_loss_coef", &C::model, &M::moe, &MoeConfig::z_loss_coef),
      trait_key(ConfigKey::Trait::moe, "model", "moe_capacity_factor", &C::model, &M::moe, &MoeConfig::capacity_factor),

      key("init", "from", &C::init, &C::Init::from),
      key("init", "seed", &C::init, &C::Init::seed),

      key("data", "dir", &C::data, &C::Data::dir),
      key("data", "train_prefix", &C::data, &C::Data::train_prefix),
      key("data", "val_prefix", &C::data, &C::Data::val_prefix),
      key("data", "tokenizer", &C::data, &C::Data::tokenizer),
      key("data", "seq_len", &C::data, &C::Data::seq_len),
      key("data", "shuffle", &C::data, &C::Data::shuffle),
      key("data", "seed", &C::data, &C::Data::seed),

      key("train", "steps", &C::train, &C::Train::steps),
      key("train", "micro_batch_size", &C::train, &C::Train::micro_batch_size),
      key("train", "global_batch_size", &C::train, &C::Train::global_batch_size),
      choice_key("train", "device", kDevices, &C::train, &C::Train::device),
      key("train", "precision", &C::train, &C::Train::precision),
      key("train", "fp8", &C::fp8, &Float8Recipe::scaling),
      choice_key("train", "qat", kQatFormats, &C::train, &C::Train::qat),
      choice_key("train", "qat_activations", kQatActivations, &C::train, &C::Train::qat_activations),
      key("train", "recompute", &C::train, &C::Train::recompute),
      key("train", "grad_clip", &C::train, &C::Train::grad_clip),
      key("train", "unsafe_skip_memory_check", &C::train, &C::Train::unsafe_skip_memory_check),

      key("fp8", "format", &C::fp8, &Float8Recipe::format),
      key("fp8", "amax_history", &C::fp8, &Float8Recipe::amax_history),
      key("fp8", "amax_compute", &C::fp8, &Float8Recipe::amax_compute),
      key("fp8", "margin", &C::fp8, &Float8Recipe::margin),
      key("fp8", "pow2_scales", &C::fp8, &Float8Recipe::pow2_scales),
      key("fp8", "block", &C::fp8, &Float8Recipe::block),

      key("optim", "lr", &C::lr, &LrSchedule::peak_lr),
      key("optim", "min_lr_ratio", &C::lr, &LrSchedule::min_lr_ratio),
      key("optim", "warmup_steps", &C::lr, &LrSchedule::warmup_steps),
      key("optim", "decay", &C::lr, &LrSchedule::decay),
      key("optim", "decay_steps", &C::lr, &LrSchedule::decay_steps),
      key("optim", "beta1", &C::adamw, &AdamWConfig::beta1),
      key("optim", "beta2", &C::adamw, &AdamWConfig::beta2),
      key("optim", "eps", &C::adamw, &AdamWConfig::eps),
      key("optim", "weight_decay", &C::adamw, &AdamWConfig::weight_decay),
      key("optim", "decay_embeddings", &C::adamw, &AdamWConfig::decay_embeddings),

      key("loss_scale", "enabled", &C::loss_scale, &C::LossScale::enabled),
      key("loss_scale", "initial", &C::loss_scale, &C::LossScale::config, &LossScalerConfig::initial_scale),
      key("loss_scale", "growth_interval", &C::loss_scale, &C::LossScale::config, &LossScalerConfig::growth_interval),
      key("loss_scale", "min_scale", &C::loss_scale, &C::LossScale::config, &LossScalerConfig::min_scale),

      key("parallel", "dp", &C::parallel, &C::Parallel::dp),
      key("parallel", "tp", &C::parallel, &C::Parallel::tp),
      key("parallel", "pp", &C::parallel, &C::Parallel::pp),
      key("parallel", "cp", &C::parallel, &C::Parallel::cp),
      key("parallel", "ep", &C::parallel, &C::Parallel::ep),
      key("parallel", "zero_stage", &C::parallel, &C::Parallel::zero_stage),
      key("parallel", "sp", &C::parallel, &C::Parallel::sp),
      choice_key("parallel", "pp_schedule", kPipelineSchedules, &C::parallel, &C::Parallel::pp_schedule),
      key("parallel", "pp_virtual", &C::parallel, &C::Parallel::pp_virtual),
      key("parallel", "cp_zigzag", &C::parallel, &C::Parallel::cp_zigzag),
      key("parallel", "bucket_mb", &C::parallel, &C::Parallel::bucket_mb),
      key("parallel", "timeout_s", &C::parallel, &C::Parallel::timeout_s),
      choice_key("parallel", "backend", kCommBackends, &C::parallel, &C::Parallel::backend),

      key("checkpoint", "dir", &C::checkpoint, &C::Checkpointing::dir),
      key("checkpoint", "every", &C::checkpoint, &C::Checkpointing::every),
      key("checkpoint", "keep_last", &C::checkpoint, &C::Checkpointing::keep_last),
      key("checkpoint", "async", &C::checkpoint, &C::Checkpointing::async),
      key("checkpoint", "resume", &C::checkpoint, &C::Checkpointing::resume),

      key("log", "run_dir", &C::log, &C::Log::run_dir),
      key("log", "every", &C::log, &C::Log::every),
      choice_key("log", "progress", kProgressStyles, &C::log, &C::Log::progress),
      key("log", "tensorboard", &C::log, &C::Log::tensorboard),
      key("log", "trace", &C::log, &C::Log::trace),

      key("mlflow", "uri", &C::mlflow, &C::Mlflow::uri),
      key("mlflow", "experiment", &C::mlflow, &C::Mlflow::experiment),
      key("mlflow", "run_name", &C::mlflow, &C::Mlflow::run_name),
      key("mlflow", "end_wait_s", &C::mlflow, &C::Mlflow::end_wait_s),

      key("eval", "every", &C::eval, &C::Eval::every),
      key("eval", "batches", &C::eval, &C::Eval::batches),

      key("sample", "every", &C::sample, &C::Sample::every),
      key("sample", "prompt", &C::sample, &C::Sample::prompt),
      key("sample", "max_tokens", &C::sample, &C::Sample::max_tokens),
      key("sample", "temperature", &C::sample, &C::Sample::temperature),
      key("sample", "top_k", &C::sample, &C::Sample::top_k),
      key("sample", "top_p", &C::sample, &C::Sample::top_p),
      key("sample", "seed", &C::sample, &C::Sample::seed),
  };
}

}  // namespace

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = make_keys();
  return keys;
}

std::vector<std::string> config_sections() {
  std::vector<std::string> sections;
  for (const ConfigKey& k : config_keys())
    if (sections.empty() || sections.back() != k.section) sections.emplace_back(k.section);
  return sections;
}

std::vector<std::string> config_key_names(std::string_view section) {
  std::vector<std::string> names;
  for (const ConfigKey& k : config_keys())
    if (k.section == section) names.emplace_back(k.name);
  return names;
}

const ConfigKey* find_config_key(std::string_view section, std::string_view name) {
  for (const ConfigKey& k : config_keys())
    if (k.section == section && k.name == name) return &k;
  return nullptr;
}

std::string toml_text(std::string_view text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

namespace {
// Shortest decimal that reads back as the same value, in %g's style (0.0003, 1e-05), marked as
// a TOML float ("1.0", not "1").
template <typename T>
std::string shortest_float(T value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::general);
  std::string text(buffer, result.ptr);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}
}  // namespace

std::string toml_text(double value) { return shortest_float(value); }
std::string toml_text(float value) { return shortest_float(value); }

std::string toml_text(const toml::node& node) {
  if (const auto* s = node.as_string()) return toml_text(s->get());
  if (const auto* i = node.as_integer()) return std::to_string(i->get());
  if (const auto* f = node.as_floating_point()) return toml_text(f->get());
  if (const auto* b = node.as_boolean()) return b->get() ? "true" : "false";
  std::ostringstream out;
  out << toml::node_view<const toml::node>(node);
  return out.str();
}

std::string toml_type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    default:
      return "a date or time";
  }
}

std::string not_one_of(std::string_view name, const std::vector<std::string>& valid) {
  std::string list;
  for (const auto& v : valid) list += str(list.empty() ? "" : ", ", v);
  const std::string best = closest_match(name, valid);
  return str("must be one of ", list, best.empty() ? "" : str(" (did you mean ", best, "?)"));
}

}  // namespace dt::run_config
