// Loading a run configuration: parse, apply the command line's overrides, read every key,
// resolve the model description, then check every value and combination, collecting every
// problem before throwing one dt::Error that lists them, each on its own line:
//   <file>:<line>: <section.key> = <value>: <what is wrong>; <the fix>
// ("command line" instead of file:line for an override; "(default)" after a value not given).
#include "train/run_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "ckpt/hf_config.h"
#include "comm/world.h"
#include "core/error.h"
#include "core/suggest.h"
#include "model/block_declaration.h"
#include "model/quantized_weights.h"
#include "model/tensor_shard.h"
#include "parallel/pipeline/partition.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/schedule_check.h"
#include "train/run_config_keys.h"

namespace dt {

namespace {

using namespace run_config;

constexpr int kCommandLineOrder = 1 << 30;  // command-line problems sort after the file's

// Where each key's value came from, for messages.
struct Origins {
  std::string file;
  std::map<std::string, int> lines;             // "section.key" -> line in the file
  std::map<std::string, std::string> overrides;  // "section.key" -> the override as typed

  bool given(const std::string& key) const { return lines.count(key) || overrides.count(key); }
  int order(const std::string& key) const {
    if (overrides.count(key)) return kCommandLineOrder;
    const auto it = lines.find(key);
    return it == lines.end() ? 0 : it->second;
  }
  std::string where(const std::string& key) const {
    if (overrides.count(key)) return "command line";
    const auto it = lines.find(key);
    return it == lines.end() ? file : str(file, ":", it->second);
  }
};

// Every problem found, sorted by where it is (the file's top, its lines, the command line).
class Problems {
 public:
  void add(int order, std::string line) { entries_.push_back({order, entries_.size(), std::move(line)}); }
  bool empty() const { return entries_.empty(); }
  void throw_if_any(const std::filesystem::path& file) {
    if (entries_.empty()) return;
    throw ConfigError(str("run configuration '", file.string(), "' has ", entries_.size(),
                          entries_.size() == 1 ? " problem:" : " problems:", lines()));
  }
  // Each problem on a line of its own, indented, in the order of the keys.
  std::string lines() {
    std::sort(entries_.begin(), entries_.end(),
              [](const Entry& a, const Entry& b) { return std::tie(a.order, a.seq) < std::tie(b.order, b.seq); });
    std::string out;
    for (const Entry& e : entries_) out += "\n  " + e.line;
    return out;
  }

 private:
  struct Entry {
    int order;
    size_t seq;
    std::string line;
  };
  std::vector<Entry> entries_;
};

// The checks of one loaded configuration: every message names the key, its value and origin.
class Checker {
 public:
  Checker(const RunConfig& config, const Origins& origins, Problems& problems)
      : config_(config), origins_(origins), problems_(problems) {}

  // "<where>: <key> = <value>: <what>" when !ok.
  bool given(const std::string& key) const { return origins_.given(key); }
  void require(bool ok, const std::string& key, const std::string& what) {
    if (!ok) report(key, what);
  }
  void report(const std::string& key, const std::string& what) {
    const std::string dot = key.substr(0, key.find('.'));
    const ConfigKey* k = find_config_key(dot, key.substr(key.find('.') + 1));
    DT_CHECK(k != nullptr, "no configuration key ", key);
    problems_.add(origins_.order(key), str(origins_.where(key), ": ", key, " = ", k->write(config_),
                                           origins_.given(key) ? "" : " (default)", ": ", what));
  }
  // A line about the file or a section as a whole.
  void report_file(const std::string& what) { problems_.add(0, str(origins_.file, ": ", what)); }

  // Files a validator's problems (LrSchedule, AdamWConfig, LossScalerConfig, the model's), whose
  // fields it named by their configuration keys, each under its key.
  void file(const FieldProblems& problems) {
    for (const FieldProblem& p : problems.all())
      problems_.add(origins_.order(p.field), str(origins_.where(p.field), ": ", p.field, " = ", p.value, ": ", p.what));
  }

 private:
  const RunConfig& config_;
  const Origins& origins_;
  Problems& problems_;
};

toml::table parse_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ConfigError(str("cannot read run configuration '", path.string(), "': no such file or not readable; check the "
                    "path (configs/ holds examples)"));
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return toml::parse(text.str(), path.string());
  } catch (const toml::parse_error& e) {
    throw ConfigError(str(path.string(), ":", e.source().begin.line, ":", e.source().begin.column, ": ", e.description(),
                    " (not valid TOML)"));
  }
}

// Sets each "section.key=value" in doc. The value is parsed as a TOML value; one that does not
// parse, or that a string key cannot take (sample.prompt=1999), is the string as typed.
void apply_overrides(toml::table& doc, const std::vector<std::string>& overrides, Origins& origins,
                     Problems& problems) {
  for (const std::string& override : overrides) {
    const size_t eq = override.find('='), dot = override.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq) {
      problems.add(kCommandLineOrder, str("command line: '", override, "': write an override as section.key=value, "
                                          "e.g. optim.lr=3e-4"));
      continue;
    }
    const std::string section = override.substr(0, dot), name = override.substr(dot + 1, eq - dot - 1);
    const std::string text = override.substr(eq + 1);
    toml::table parsed;
    try {
      parsed = toml::parse(str("x = ", text), std::string_view("command line"));
    } catch (const toml::parse_error&) {
      parsed.insert_or_assign("x", text);
    }
    toml::node* value = parsed.get("x");
    if (const ConfigKey* k = find_config_key(section, name)) {
      RunConfig scratch;
      if (!k->read(*value, scratch).empty() && k->read(toml::value<std::string>(text), scratch).empty()) {
        parsed.insert_or_assign("x", text);
        value = parsed.get("x");
      }
    }
    // A section that is not a table in the file is reported by read_keys().
    if (auto* table = doc.insert(section, toml::table()).first->second.as_table())
      table->insert_or_assign(name, std::move(*value));
    origins.overrides[str(section, ".", name)] = override;
  }
}

// Reads every known key of doc into config (model fields into `model_fields`, for later), and
// reports unknown sections and keys with a did-you-mean.
void read_keys(const toml::table& doc, RunConfig& config, std::vector<std::pair<const ConfigKey*, const toml::node*>>& model_fields,
               Origins& origins, Problems& problems) {
  const std::vector<std::string> sections = config_sections();
  const auto where = [&](const std::string& key, const toml::node& node) {
    const int line = static_cast<int>(node.source().begin.line);
    // Sections and keys that only the command line created have no place in the file.
    if (origins.overrides.count(key) || line == 0) return std::pair{kCommandLineOrder, std::string("command line")};
    return std::pair{line, str(origins.file, ":", line)};
  };
  for (const auto& [section_key, section_node] : doc) {
    const std::string section(section_key.str());
    const toml::table* table = section_node.as_table();
    const bool known = std::find(sections.begin(), sections.end(), section) != sections.end();
    if (!table || !known) {
      const auto [order, at] = where(section, section_node);
      std::string fix;
      if (!table) {
        for (const auto& s : sections)
          if (find_config_key(s, section)) fix = str("; keys belong in a section: did you mean ", s, ".", section, "?");
        if (fix.empty() && known) fix = str("; [", section, "] is a section, write it as a table");
        problems.add(order, str(at, ": ", section, " = ", toml_text(section_node),
                                fix.empty() ? ": unknown key outside any section" : str(": not a section", fix)));
      } else {
        std::string best = closest_match(section, sections);
        for (const auto& s : sections)
          if (best.empty() && (section.starts_with(s) || s.starts_with(section))) best = s;
        std::string list;
        for (const auto& s : sections) list += str(list.empty() ? "" : ", ", s);
        problems.add(order, str(at, ": [", section, "]: unknown section",
                                best.empty() ? str("; the sections are ", list) : str(" (did you mean [", best, "]?)")));
      }
      continue;
    }
    for (const auto& [name_key, node] : *table) {
      const std::string name(name_key.str()), key = str(section, ".", name);
      const auto [order, at] = where(key, node);
      const ConfigKey* k = find_config_key(section, name);
      if (!k) {
        std::string suggestion;
        for (const auto& s : sections)
          if (find_config_key(s, name)) suggestion = str(s, ".", name);
        if (suggestion.empty())
          if (const std::string best = closest_match(name, config_key_names(section)); !best.empty())
            suggestion = str(section, ".", best);
        std::string list;
        for (const auto& n : config_key_names(section)) list += str(list.empty() ? "" : ", ", n);
        problems.add(order, str(at, ": ", key, " = ", toml_text(node), ": unknown key",
                                suggestion.empty() ? str("; [", section, "] keys are ", list)
                                                   : str(" (did you mean ", suggestion, "?)")));
        continue;
      }
      if (!origins.overrides.count(key)) origins.lines[key] = order;
      const bool model_field = section == "model" && name != "preset" && name != "family";
      if (const std::string problem = k->read(node, config); !problem.empty())
        problems.add(order, str(at, ": ", key, " = ", toml_text(node), ": ", problem));
      else if (model_field)
        model_fields.emplace_back(k, &node);
    }
  }
}

// init.from, checked: the model description of a Hugging Face directory, when it is one.
std::optional<ModelConfig> read_init_from(const RunConfig& config, Checker& check) {
  if (config.init.from.empty()) return std::nullopt;
  const std::filesystem::path from = config.init.from;
  std::error_code ec;
  if (!std::filesystem::exists(from, ec)) {
    check.report("init.from", "no such file or directory; give a .safetensors file or a Hugging Face model directory "
                              "(config.json and model.safetensors), or remove init.from to start from random weights");
    return std::nullopt;
  }
  if (!std::filesystem::is_directory(from, ec)) {
    if (from.extension() != ".safetensors")
      check.report("init.from", "is neither a .safetensors file nor a directory; give a .safetensors file or a "
                                "Hugging Face model directory (config.json and model.safetensors)");
    return std::nullopt;
  }
  for (const char* needed : {"config.json", "model.safetensors"})
    if (!std::filesystem::exists(from / needed, ec))
      check.report("init.from", str("is a directory without ", needed, "; a Hugging Face model directory holds "
                                    "config.json and model.safetensors (save_pretrained writes both)"));
  if (!std::filesystem::exists(from / "config.json", ec)) return std::nullopt;
  try {
    return ckpt::model_config_from_hf(from / "config.json");
  } catch (const Error& e) {
    check.report("init.from", e.what());
    return std::nullopt;
  }
}

// The fields where two model descriptions differ: "n_layer 12 vs 2, d_model 768 vs 64". Fields
// whose 0 means a default (ffn_hidden_size, n_kv_head) compare by the value they stand for.
std::string model_differences(const ModelConfig& a, const ModelConfig& b) {
  RunConfig ra, rb;
  ra.model = a;
  rb.model = b;
  for (ModelConfig* m : {&ra.model, &rb.model}) {
    m->ffn_hidden_size = m->ffn_hidden();
    m->n_kv_head = m->kv_heads();
  }
  std::string out;
  for (const ConfigKey& k : config_keys())
    if (k.section == "model" && k.name != "preset" && k.name != "vocab_pad_multiple" && k.write(ra) != k.write(rb))
      out += str(out.empty() ? "" : ", ", k.name, " ", k.write(ra), " vs ", k.write(rb));
  return out;
}

// Resolves config.model: the preset or init.from's config.json, then the explicit fields
// (which must agree with config.json, whose weights have that shape). Returns whether the
// description is complete enough to check further.
bool resolve_model(RunConfig& config, const std::vector<std::pair<const ConfigKey*, const toml::node*>>& fields,
                   const Origins& origins, Checker& check) {
  const std::optional<ModelConfig> hf = read_init_from(config, check);
  std::optional<ModelConfig> preset;
  if (!config.model_preset.empty()) {
    const std::vector<std::string> names = model_preset_names();
    if (std::find(names.begin(), names.end(), config.model_preset) == names.end())
      check.report("model.preset", not_one_of(config.model_preset, names));
    else
      preset = model_preset(config.model_preset);
  }
  if (preset && hf) {
    // The preset as the file amends it: explicit fields are checked one by one below.
    RunConfig described;
    described.model = *preset;
    for (const auto& [key, node] : fields) key->read(*node, described);
    const std::string differences = model_differences(*hf, described.model);
    if (!differences.empty())
      check.report("model.preset", str("disagrees with init.from's config.json (", differences,
                                       "); remove model.preset, the model comes from init.from"));
  }
  const std::optional<ModelConfig> base = hf ? hf : preset;
  const ModelFamily family = config.model.family;  // as read: the default, or model.family
  if (base && origins.given("model.family") && family != base->family) {
    const std::string base_family(model_family_name(base->family)), other(model_family_name(family));
    if (hf)
      check.report("model.family", str("disagrees with init.from's config.json (a ", base_family,
                                       " model); remove model.family"));
    else
      check.report("model.family", str("disagrees with preset ", config.model_preset, " (a ", base_family,
                                       " model); remove model.family or choose a ", other, " preset"));
  }
  bool complete = base.has_value();
  if (!base) {
    std::string missing;
    for (const char* key : {"family", "n_layer", "d_model", "n_head", "vocab_size", "max_seq_len"})
      if (!origins.given(str("model.", key))) missing += str(missing.empty() ? "" : ", ", key);
    if (!missing.empty()) {
      std::string presets;
      for (const auto& p : model_preset_names()) presets += str(presets.empty() ? "" : ", ", p);
      check.report_file(str("[model] gives neither a preset nor a whole description (missing ", missing,
                            "); set model.preset to one of ", presets, ", or add the missing keys"));
    }
    complete = missing.empty();
    config.model = ModelConfig{.family = family};
  } else {
    config.model = *base;
  }
  for (const auto& [key, node] : fields) {
    const std::string before = key->write(config);
    key->read(*node, config);
    if (hf && key->name != "vocab_pad_multiple" && key->write(config) != before)
      check.report(key->path(), str("disagrees with init.from's config.json (", key->name, " = ", before,
                                    " there); remove ", key->path(), ", the weights have that shape"));
    if (key->trait == ConfigKey::Trait::rotary && !key->applies_to(config.model))
      check.report(key->path(), str(model_family_name(config.model.family), " models have learned position embeddings,"
                                    " not rotary ones; remove ", key->path(), " or set model.family = \"llama\""));
  }
  // Checked once every field is read: model.moe_experts may come after the keys it enables.
  for (const auto& [key, node] : fields)
    if (key->trait == ConfigKey::Trait::moe && key->name != "moe_experts" && !key->applies_to(config.model))
      check.report(key->path(), str("describes a mixture of experts, and this model's MLPs are dense (model.moe_experts "
                                    "= 0); remove ", key->path(), ", or give model.moe_experts (2 or more) and "
                                    "model.moe_expert_hidden"));
  if (!complete) return false;
  FieldProblems model_problems;
  check_model_config(config.model, model_problems);
  check.file(model_problems);
  return model_problems.all().empty();
}

// Multiples of `unit` next to `value`, and the divisors of `value` nearest `near`: the values
// that would make a batch divide.
std::string batch_fixes(int global, int micro, int dp) {
  const int unit = micro * dp, lower = global / unit * unit;
  std::string fix = lower > 0 ? str("global_batch_size = ", lower, " or ", lower + unit)
                              : str("global_batch_size = ", unit);
  if (global % dp == 0) {
    std::vector<int> divisors;
    for (int d = 1; d <= global / dp; ++d)
      if (global / dp % d == 0) divisors.push_back(d);
    std::sort(divisors.begin(), divisors.end(),
              [&](int a, int b) { return std::abs(a - micro) < std::abs(b - micro) || (std::abs(a - micro) == std::abs(b - micro) && a < b); });
    divisors.resize(std::min<size_t>(divisors.size(), 6));
    std::sort(divisors.begin(), divisors.end());
    std::string list;
    for (int d : divisors) list += str(list.empty() ? "" : ", ", d);
    fix += str(", or micro_batch_size = one of ", list);
  }
  return fix;
}

// Context parallelism: every chunk of a sequence needs a token; a length the chunks do not divide
// is padded, which learned positions must cover, and which experts would route: their loads and
// balance loss would count the padding.
void check_context(const RunConfig& config, bool model_complete, Checker& check) {
  const RunConfig::Parallel& p = config.parallel;
  const int T = config.data.seq_len;
  if (p.cp <= 1 || T < 1) return;
  const int chunks = p.cp_zigzag ? 2 * p.cp : p.cp;
  if (T < chunks)
    return check.report("parallel.cp", str("context parallelism cuts each sequence into ", chunks, " chunks (",
                                           p.cp_zigzag ? "2 x parallel.cp, zig-zag" : "parallel.cp", "), and data.seq_len = ",
                                           T, " leaves some without a token; use parallel.cp <= ",
                                           p.cp_zigzag ? T / 2 : T, p.cp_zigzag ? ", or parallel.cp_zigzag = false" : ""));
  const int padded = (T + chunks - 1) / chunks * chunks;
  if (model_complete && config.model.traits().positions == PositionKind::learned && padded > config.model.max_seq_len)
    check.report("data.seq_len", str("context parallelism pads sequences of ", T, " tokens to ", padded, " (", chunks,
                                     " equal chunks), beyond model.max_seq_len = ", config.model.max_seq_len,
                                     "; use a data.seq_len that is a multiple of ", chunks, ", or at most ",
                                     config.model.max_seq_len / chunks * chunks));
  if (model_complete && config.model.moe.experts > 0 && config.model.moe.capacity_factor > 0)
    check.report("model.moe_capacity_factor", str("an expert's capacity is counted over each rank's rows of a "
                                                  "micro-batch, which context parallelism splits (parallel.cp = ",
                                                  p.cp, "), so other tokens would be dropped than on one rank; use "
                                                  "moe_capacity_factor = 0 (dropless) or parallel.cp = 1"));
  if (model_complete && config.model.moe.experts > 0 && padded != T)
    check.report("data.seq_len", str("context parallelism would pad sequences of ", T, " tokens to ", padded, " (",
                                     chunks, " equal chunks), and the experts would route the padding, which their "
                                     "loads and balance loss would count; use a data.seq_len that is a multiple of ",
                                     chunks));
}

// Expert parallelism: ep of the dp × cp ranks share out the experts of a model that has them,
// at least one each.
void check_experts(const RunConfig& config, bool model_complete, Checker& check) {
  const RunConfig::Parallel& p = config.parallel;
  if (p.ep <= 1 || p.dp < 1 || p.cp < 1) return;
  const int replicas = p.dp * p.cp;
  if (replicas % p.ep != 0) {
    std::string divisors;
    for (int d = 1; d <= replicas; ++d)
      if (replicas % d == 0) divisors += str(divisors.empty() ? "" : ", ", d);
    check.report("parallel.ep", str("expert parallelism spreads the experts over ep of the dp × cp = ", replicas,
                                    " ranks that hold the same other parameters, and ", p.ep, " does not divide ",
                                    replicas, "; use parallel.ep = ", divisors, ", or parallel.dp a multiple of ",
                                    p.ep));
  }
  if (!model_complete) return;
  const int experts = config.model.moe.experts;
  if (experts == 0)
    check.report("parallel.ep", str("expert parallelism spreads a mixture of experts' experts over ranks, and this "
                                    "model's MLPs are dense (model.moe_experts = 0); set parallel.ep = 1"));
  else if (experts < p.ep)
    check.report("parallel.ep", str("each of the ", p.ep, " expert-parallel ranks holds at least one expert, and "
                                    "the model has ", experts, " (model.moe_experts); use parallel.ep <= ", experts));
}

// Pipeline parallelism: the schedule must exist for the step's micro-batches, the stages must
// have a block each, and what the schedules cannot run with is named.
void check_pipeline(const RunConfig& config, bool model_complete, Checker& check) {
  const RunConfig::Parallel& p = config.parallel;
  if (p.pp_virtual < 1) return check.report("parallel.pp_virtual", "must be at least 1");
  if (p.pp_virtual > 1 && p.pp_schedule != "interleaved")
    return check.report("parallel.pp_virtual", str("virtual stages are the interleaved schedule's, and parallel."
                                                   "pp_schedule = \"", p.pp_schedule, "\"; set parallel.pp_virtual = 1, "
                                                   "or parallel.pp_schedule = \"interleaved\""));
  if (p.pp <= 1) return;
  const bool zero_bubble = p.pp_schedule.starts_with("zb");
  if (zero_bubble && config.train.recompute != Recompute::none)
    check.report("train.recompute", str("the ", p.pp_schedule, " schedule runs each weight-gradient pass apart from "
                                        "its backward, reading the activations forward kept, so none may be "
                                        "recomputed; set train.recompute = \"none\", or parallel.pp_schedule = "
                                        "\"1f1b\""));
  if (ZeroPolicy::exists(p.zero_stage)) {
    const ZeroPolicy zero = config.zero();
    if (!zero.allows_pipeline())
      check.report("parallel.zero_stage", str(zero.pipeline_conflict(), "; with parallel.pp = ", p.pp,
                                              " use parallel.zero_stage = ", ZeroPolicy::stages_allowing_pipeline()));
  }
  const int micro_batches = config.accumulation_steps();
  if (micro_batches < 1) return;  // reported with the batch sizes
  std::optional<pipeline::Schedule> schedule;
  try {
    schedule = pipeline::make_schedule(p.pp_schedule, p.pp, micro_batches, p.pp_virtual);
  } catch (const ConfigError& e) {
    return check.report("parallel.pp_schedule",
                        str(e.message(), " (train.global_batch_size ", config.global_batch_size(), " / (",
                            "train.micro_batch_size ", config.train.micro_batch_size, " x parallel.dp ", p.dp,
                            ") = ", micro_batches, " micro-batches per step)"));
  }
  const Device device = config.train.device == "cuda" ? Device::cuda : Device::cpu;
  if (uses_nccl(device, p.backend))
    if (const std::string waits = pipeline::check_schedule(*schedule).nccl_deadlock; !waits.empty())
      check.report("parallel.pp_schedule",
                   str("under NCCL (parallel.backend = \"", p.backend, "\" with train.device = \"",
                       config.train.device, "\"), a send waits until its receive runs once messages pass NCCL's "
                       "eager size, and this schedule's lists then wait for ever: ", waits, "; use parallel."
                       "pp_schedule = \"1f1b\" or \"zb-h1\", or parallel.backend = \"mpi\""));
  try {
    if (model_complete) pipeline::partition_stages(config.model, schedule->stages(), config.data.seq_len);
  } catch (const ConfigError& e) {
    check.report("parallel.pp", str("the ", p.pp_schedule, " schedule over ", p.pp, " ranks has ", e.message(),
                                    p.pp_schedule == "zb-v" ? " (zb-v runs 2 stages per rank)"
                                    : p.pp_virtual > 1  ? " (parallel.pp x parallel.pp_virtual)"
                                                        : ""));
  }
}

// The data's shards and sequence length.
void check_data(const RunConfig& config, bool model_complete, Checker& check) {
  check.require(!config.data.train_prefix.empty(), "data.train_prefix", "must not be empty (llm.c's shards: \"train\")");
  check.require(!config.data.val_prefix.empty(), "data.val_prefix", "must not be empty (llm.c's shards: \"val\")");
  if (model_complete)
    check.require(config.data.seq_len >= 1 && config.data.seq_len <= config.model.max_seq_len, "data.seq_len",
                  str("must be in [1, model.max_seq_len = ", config.model.max_seq_len, "]"));
  else
    check.require(config.data.seq_len >= 1, "data.seq_len", "must be at least 1");
}

// The batch: whole micro-batches on every data-parallel rank; clipping and precision.
void check_batch(const RunConfig& config, Checker& check) {
  const auto& t = config.train;
  const int dp = config.parallel.dp;
  check.require(t.micro_batch_size >= 1, "train.micro_batch_size", "must be at least 1");
  check.require(t.global_batch_size >= 1, "train.global_batch_size", "must be at least 1");
  if (t.micro_batch_size >= 1 && t.global_batch_size >= 1 && dp >= 1)
    check.require(t.global_batch_size % (t.micro_batch_size * dp) == 0, "train.global_batch_size",
                  str("must be a multiple of train.micro_batch_size * parallel.dp = ", t.micro_batch_size, " * ", dp,
                      " = ", t.micro_batch_size * dp, " (a step accumulates whole micro-batches); set ",
                      batch_fixes(t.global_batch_size, t.micro_batch_size, dp)));
  check.require(t.grad_clip >= 0 && std::isfinite(t.grad_clip), "train.grad_clip",
                "must be finite and at least 0 (0 disables clipping)");
  check.require(t.precision != DType::f16 || config.loss_scale.enabled, "train.precision",
                "fp16 gradients underflow without loss scaling; set loss_scale.enabled = true, or use precision = "
                "\"bf16\"");
}

// The learning-rate schedule, AdamW and the loss scaler: their own checks, under their keys.
void check_optimizer(const RunConfig& config, Checker& check) {
  check.require(config.lr.peak_lr > 0 && std::isfinite(config.lr.peak_lr), "optim.lr",
                "must be finite and above 0 (typical: 6e-4 for GPT-2 124M, 3e-4 for larger models)");
  check.require(config.lr.decay == LrDecay::wsd || config.lr.decay_steps == 0 || !check.given("optim.decay_steps"),
                "optim.decay_steps", "is used only by decay = \"wsd\"; remove it or set optim.decay = \"wsd\"");
  // The schedule's own peak check is the one above, with typical values.
  FieldProblems lr({{"lr", ""},
                    {"min_lr_ratio", "optim.min_lr_ratio"},
                    {"steps", "train.steps"},
                    {"warmup_steps", "optim.warmup_steps"},
                    {"decay_steps", "optim.decay_steps"}});
  config.lr.check(lr);
  check.file(lr);
  FieldProblems adamw({{"beta1", "optim.beta1"}, {"beta2", "optim.beta2"}, {"eps", "optim.eps"},
                       {"weight_decay", "optim.weight_decay"}});
  config.adamw.check(adamw);
  check.file(adamw);
  FieldProblems scaler({{"initial_scale", "loss_scale.initial"}, {"growth_interval", "loss_scale.growth_interval"},
                        {"min_scale", "loss_scale.min_scale"}});
  config.loss_scale.config.check(scaler);
  check.file(scaler);
}

// The layout: each dimension's size, then what each parallelism needs of the model and batch.
void check_layout(const RunConfig& config, bool model_complete, Checker& check) {
  const auto& t = config.train;
  const auto& p = config.parallel;
  const struct {
    const char* key;
    int size;
    const char* what;
  } dims[] = {{"parallel.dp", p.dp, "data parallelism"},
              {"parallel.tp", p.tp, "tensor parallelism"},
              {"parallel.pp", p.pp, "pipeline parallelism"},
              {"parallel.cp", p.cp, "context parallelism"},
              {"parallel.ep", p.ep, "expert parallelism"}};
  for (const auto& d : dims)
    if (d.size < 1) check.report(d.key, "must be at least 1");
  check_pipeline(config, model_complete, check);
  check_experts(config, model_complete, check);
  check_context(config, model_complete, check);
  if (model_complete && p.tp > 1) {
    FieldProblems tp;
    check_tensor_parallel(config.model, p.tp, tp);
    for (const FieldProblem& problem : tp.all()) check.report(problem.field, problem.what);
  }
  // Sequence parallelism splits each micro-batch's tokens over the tp ranks: each needs one.
  const int64_t tokens = int64_t{t.micro_batch_size} * config.data.seq_len;
  if (p.sp && p.tp == 1)
    check.report("parallel.sp", "sequence parallelism splits the tokens over the tensor-parallel ranks, and "
                                "parallel.tp = 1; set parallel.tp above 1, or parallel.sp = false");
  else if (p.sp && tokens >= 1 && p.tp > tokens)
    check.report("parallel.sp", str("the ", p.tp, " tensor-parallel ranks would split micro-batches of ", tokens,
                                    " tokens (train.micro_batch_size ", t.micro_batch_size, " x data.seq_len ",
                                    config.data.seq_len, "), and each needs at least one; use parallel.tp <= ",
                                    tokens, ", or longer micro-batches"));
  check.require(ZeroPolicy::exists(p.zero_stage), "parallel.zero_stage", str("must be 0 to ", ZeroPolicy::kHighestStage));
  check.require(p.bucket_mb > 0 && std::isfinite(p.bucket_mb), "parallel.bucket_mb", "must be finite and above 0");
  check.require(p.backend != "nccl" || t.device == "cuda", "parallel.backend",
                "NCCL moves CUDA buffers; set train.device = \"cuda\", or parallel.backend = \"mpi\" (or \"auto\")");
  check.require(p.timeout_s > 0 && std::isfinite(p.timeout_s), "parallel.timeout_s",
                "must be finite and above 0 (seconds a collective may wait before the job is ended as hung)");
}

// FP8 training: bf16 storage, the recipe's own keys, and blockwise tiles that lie within each
// rank's pieces of a tensor, covering the same elements as one rank's (model/float8_linear.h).
void check_float8(const RunConfig& config, bool model_complete, Checker& check) {
  const Float8Recipe& r = config.fp8;
  if (!r.enabled()) return;
  if (config.train.precision != DType::bf16)
    check.report("train.fp8", str("FP8 quantizes the bf16 activations and weights, and train.precision = \"",
                                  dtype_name(config.train.precision), "\"; set train.precision = \"bf16\""));
  const auto problems = float8_recipe_problems(r);
  for (const auto& [key, what] : problems) check.report(key, what);
  if (r.scaling != Float8Scaling::blockwise || !model_complete || !problems.empty()) return;
  const auto& p = config.parallel;
  // The weight gradient's tiles run down a rank's rows of a micro-batch: each sequence's tokens
  // there come in runs (context parallelism's chunks), and a tile must not straddle two.
  const int64_t T = config.data.seq_len, runs = p.cp == 1 ? 1 : (p.cp_zigzag ? 2 * p.cp : p.cp);
  const int64_t run = p.cp == 1 ? int64_t{config.train.micro_batch_size} * T : T / runs;
  if (run % r.block != 0)
    check.report("fp8.block", p.cp == 1 ? str("blockwise tiles run down a micro-batch's ", run, " rows (train.micro_batch_size ",
                                              config.train.micro_batch_size, " x data.seq_len ", T, "), which fp8.block = ",
                                              r.block, " does not divide; use a block dividing it, or longer micro-batches")
                                        : str("blockwise tiles run down each context-parallel chunk of ", run,
                                              " tokens (data.seq_len ", T, " in ", runs, " chunks), which fp8.block = ",
                                              r.block, " does not divide; use a block dividing it"));
  for (int rank = 0; rank < std::max(p.tp, 1); ++rank) {
    const ShardDims dims = shard_dims(config.model, TensorShard{.rank = rank, .size = std::max(p.tp, 1)});
    for (const BlockDeclaration* b : block_declarations(config.model))
      for (const LinearDeclaration* l : b->linears()) {
        if (!float8_quantizes(l->name)) continue;
        const int64_t in = l->in_features(config.model, dims), out = l->out_features(config.model, dims);
        if (in % r.block == 0 && out % r.block == 0) continue;
        check.report("fp8.block", str("linear layer ", l->name, "'s weight is ", out, " x ", in,
                                      p.tp > 1 ? str(" on tensor-parallel rank ", rank) : std::string(),
                                      ", which fp8.block = ", r.block, " tiles do not divide; use fp8.block = ",
                                      std::gcd(in, out) & -std::gcd(in, out), " or a smaller power of two"));
        return;
      }
  }
}

// Quantization-aware training: the formats' blocks must be whole in every weight on every
// tensor-parallel rank, and what it does not compose with yet is refused.
void check_qat(const RunConfig& config, bool model_complete, Checker& check) {
  const std::optional<kernels::WeightFormat> format = config.train.qat_format();
  if (!format) {
    if (config.train.qat_activations != "none")
      check.report("train.qat_activations", "quantizes the inputs of the layers whose weights train.qat quantizes; "
                                            "set train.qat too, or train.qat_activations = \"none\"");
    return;
  }
  const std::string name(kernels::weight_format_name(*format));
  if (config.fp8.enabled())
    check.report("train.qat", "FP8 training would quantize the fake-quantized weights again; set train.fp8 = \"none\" "
                              "or train.qat = \"none\"");
  if (config.train.target_device() != Device::cpu)
    check.report("train.qat", "runs on the CPU only so far (the GPU has no fake quantizer yet); set train.device = \"cpu\"");
  if (!model_complete) return;
  if (config.model.moe.experts > 0) {
    check.report("train.qat", "the experts' weights are not quantized yet, and this model has experts");
    return;
  }
  const ParameterLayout whole(config.model);
  if (const std::string misfits = weights_not_in_blocks(whole, *format); !misfits.empty())
    return check.report("train.qat", str(name, " quantizes rows in blocks of 32, and these weights' rows are not a "
                                         "multiple of that: ", misfits, "; use int8, or a model whose dimensions are "
                                         "multiples of 32"));
  const int tp = std::max(config.parallel.tp, 1);
  // A row-parallel layer's rank holds a slice of each row: its blocks must not straddle two
  // (int8's scale is the whole row's, its largest value gathered over the ranks).
  if (tp == 1 || *format == kernels::WeightFormat::int8) return;
  for (int rank = 0; rank < tp; ++rank) {
    const ShardDims dims = shard_dims(config.model, TensorShard{.rank = rank, .size = tp});
    for (const BlockDeclaration* b : block_declarations(config.model))
      for (const LinearDeclaration* l : b->linears()) {
        const int64_t in = l->in_features(config.model, dims);
        if (in % kernels::kGgufBlock == 0) continue;
        return check.report("train.qat", str("linear layer ", l->name, "'s weight has rows of ", in,
                                             " on tensor-parallel rank ", rank, ", which ", name,
                                             "'s blocks of 32 do not divide; choose a parallel.tp that leaves a "
                                             "multiple of 32"));
      }
  }
}

// What the run writes: checkpoints, logs, evaluations and samples.
void check_outputs(const RunConfig& config, bool model_complete, Checker& check) {
  check.require(config.checkpoint.every >= 0, "checkpoint.every", "must be at least 0 (0: save only at the end)");
  check.require(config.checkpoint.keep_last >= 1, "checkpoint.keep_last", "must be at least 1");
  check.require(config.log.every >= 1, "log.every", "must be at least 1");
  check.require(config.eval.every >= 0, "eval.every", "must be at least 0 (0: evaluate only at the end)");
  check.require(config.eval.batches >= 1, "eval.batches", "must be at least 1");
  const auto& s = config.sample;
  check.require(s.every >= 0, "sample.every", "must be at least 0 (0: sample only at the end)");
  check.require(s.max_tokens >= 1, "sample.max_tokens", "must be at least 1");
  check.require(s.temperature > 0 && std::isfinite(s.temperature), "sample.temperature",
                "must be finite and above 0 (for greedy decoding set sample.top_k = 1)");
  if (model_complete)
    check.require(s.top_k >= 0 && s.top_k <= config.model.vocab_size, "sample.top_k",
                  str("must be in [0, model.vocab_size = ", config.model.vocab_size, "] (0: no top-k cut)"));
  check.require(s.top_p > 0 && s.top_p <= 1, "sample.top_p", "must be in (0, 1] (1: no nucleus cut)");
  const auto& m = config.mlflow;
  check.require(m.uri.empty() || m.uri.starts_with("http://") || m.uri.starts_with("https://"), "mlflow.uri",
                "must be an MLflow server's http:// or https:// address (dtrain speaks its REST API; for a local "
                "store, start `mlflow server --backend-store-uri DIR` and give its address), or \"\" for none");
  check.require(!m.uri.ends_with("/"), "mlflow.uri", "must not end with '/'");
  check.require(!m.experiment.empty(), "mlflow.experiment", "must name an experiment");
  check.require(m.end_wait_s >= 0 && std::isfinite(m.end_wait_s), "mlflow.end_wait_s",
                "must be at least 0 (0: do not wait for queued values at the end)");
}

// Every check of a loaded configuration's values; `model_complete` when the model is whole
// enough to check what depends on it.
void check_values(const RunConfig& config, bool model_complete, Checker& check) {
  check_data(config, model_complete, check);
  check_batch(config, check);
  check_optimizer(config, check);
  check_layout(config, model_complete, check);
  check_float8(config, model_complete, check);
  check_qat(config, model_complete, check);
  check_outputs(config, model_complete, check);
}

}  // namespace

std::string run_config_problems(const RunConfig& config) {
  const Origins origins{.file = config.source.string(), .lines = {}, .overrides = {}};
  Problems problems;
  Checker check(config, origins, problems);
  check_values(config, /*model_complete=*/true, check);
  return problems.lines();
}

bool run_config_valid(const RunConfig& config) { return run_config_problems(config).empty(); }

RunConfig load_run_config(const std::filesystem::path& path, const std::vector<std::string>& overrides) {
  toml::table doc = parse_file(path);
  Origins origins{.file = path.string(), .lines = {}, .overrides = {}};
  Problems problems;
  apply_overrides(doc, overrides, origins, problems);

  RunConfig config;
  config.source = path;
  std::vector<std::pair<const ConfigKey*, const toml::node*>> model_fields;
  read_keys(doc, config, model_fields, origins, problems);
  Checker check(config, origins, problems);
  const bool model_complete = resolve_model(config, model_fields, origins, check);
  config.lr.total_steps = config.train.steps;
  if (config.log.run_dir.empty()) config.log.run_dir = std::filesystem::path("runs") / path.stem();
  check_values(config, model_complete, check);
  problems.throw_if_any(path);
  return config;
}

}  // namespace dt
