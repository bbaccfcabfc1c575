// The keys of a run configuration file (train/run_config.h), each with how its TOML value is
// read into a RunConfig and written back: one list that loading, the resolved TOML and the
// did-you-mean suggestions all use, so a key cannot be readable but unwritable or vice versa.
// Internal to train/; docs/config.md documents each key for people.
//
// Reading checks the TOML type and, for enumerations, the name; ranges and combinations are
// checked after everything is read (train/run_config.cpp), when the whole RunConfig is known.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "parallel/pipeline/schedule.h"
#include "train/run_config.h"

namespace dt::run_config {

struct ConfigKey {
  std::string_view section, name;
  // What the key describes, when not every model has it: a family trait (rotary keys are rejected
  // for a family without rotary positions) or a mixture of experts (its keys are rejected for a
  // dense model). Written only for a model that has it.
  enum class Trait { none, grouped_query, rotary, moe } trait = Trait::none;
  bool applies_to(const ModelConfig& model) const {
    switch (trait) {
      case Trait::none:
        return true;
      case Trait::grouped_query:
        return model.traits().grouped_query;
      case Trait::rotary:
        return model.traits().positions == PositionKind::rotary;
      case Trait::moe:
        return model.moe.experts > 0;
    }
    return true;
  }
  // Reads `node` into config; returns "" or what is wrong ("expected an integer, got a string").
  std::function<std::string(const toml::node& node, RunConfig& config)> read;
  // The key's value in config as TOML text ("1000", "\"cosine\"", "0.0006").
  std::function<std::string(const RunConfig& config)> write;

  std::string path() const { return std::string(section) + "." + std::string(name); }
};

// Every key, section by section, in the order resolved_toml() writes them.
const std::vector<ConfigKey>& config_keys();
// The sections, in order; and the key names of one section.
std::vector<std::string> config_sections();
std::vector<std::string> config_key_names(std::string_view section);
// nullptr when there is no such key.
const ConfigKey* find_config_key(std::string_view section, std::string_view name);

// Values of the keys that take one of a few names.
inline const std::vector<std::string> kDevices = {"cpu", "cuda"};
inline const std::vector<std::string> kQatFormats = {"none", "int8", "q8_0", "q4_0"};
inline const std::vector<std::string> kQatActivations = {"none", "int8"};
inline const std::vector<std::string> kProgressStyles = {"auto", "bar", "plain"};
inline const std::vector<std::string> kPipelineSchedules = pipeline::schedule_names();  // parallel/pipeline/schedule.h
inline const std::vector<std::string> kCommBackends = {"auto", "mpi", "nccl"};

// TOML text of a value: shortest round-trip decimals for floats, basic strings with escapes.
std::string toml_text(const toml::node& node);
std::string toml_text(std::string_view text);
std::string toml_text(double value);
std::string toml_text(float value);
// "a string", "an integer", ...: for "expected an integer, got a string".
std::string toml_type_name(const toml::node& node);

// "must be one of a, b, c (did you mean b?)" for a name that is not among `valid`.
std::string not_one_of(std::string_view name, const std::vector<std::string>& valid);

}  // namespace dt::run_config
