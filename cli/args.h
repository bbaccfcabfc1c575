// Command-line flags: `--name value` or `--name=value`, long names only, typed getters; switches
// (`--json`) take no value.
//
// A command declares its flags (name, default, help with units); parse() rejects unknown
// flags with a did-you-mean and missing or malformed values with the flag's name. --help
// prints the declared flags. A command that takes operands (`tokenizer train ... FILES...`)
// declares them with positional(); others reject any argument that is not a flag.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dt::cli {

class Args {
 public:
  Args(std::string command, std::string summary) : command_(std::move(command)), summary_(std::move(summary)) {}

  // Declares a flag; `fallback` is the default shown in --help ("" = required unless noted).
  Args& flag(std::string name, std::string fallback, std::string help);

  // Declares a switch: `--name` alone sets it (true), `--name=false` clears it; off by default.
  // Read with get_bool().
  Args& toggle(std::string name, std::string help);

  // Accepts arguments that are not flags, collected in order by positionals(); `name` and
  // `help` describe them in --help ("FILES...", "text files to read").
  Args& positional(std::string name, std::string help);

  // Parses argv[first..]; returns false when --help was asked (usage already printed).
  bool parse(int argc, char** argv, int first);

  std::string get(const std::string& name) const;
  int64_t get_int(const std::string& name) const;
  double get_double(const std::string& name) const;
  bool get_bool(const std::string& name) const;  // "true" or "false"
  bool was_given(const std::string& name) const { return given_.count(name) > 0; }
  const std::vector<std::string>& positionals() const { return positionals_; }
  std::string usage() const;
  const std::string& command() const { return command_; }

 private:
  struct Flag {
    std::string fallback, help;
    bool toggle = false;
  };
  std::string command_, summary_;
  std::vector<std::string> order_;
  std::map<std::string, Flag> flags_;
  std::map<std::string, std::string> given_;
  std::string positional_name_, positional_help_;  // empty: no positional arguments
  std::vector<std::string> positionals_;
};

}  // namespace dt::cli
