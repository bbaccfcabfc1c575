#include "cli/args.h"

#include <charconv>
#include <cstdio>

#include "core/error.h"
#include "core/suggest.h"

namespace dt::cli {

Args& Args::flag(std::string name, std::string fallback, std::string help) {
  order_.push_back(name);
  flags_[std::move(name)] = {std::move(fallback), std::move(help)};
  return *this;
}

Args& Args::toggle(std::string name, std::string help) {
  order_.push_back(name);
  flags_[std::move(name)] = {"false", std::move(help), /*toggle=*/true};
  return *this;
}

Args& Args::positional(std::string name, std::string help) {
  positional_name_ = std::move(name);
  positional_help_ = std::move(help);
  return *this;
}

bool Args::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage().c_str(), stdout);
      return false;
    }
    if (arg.rfind("--", 0) != 0 && !positional_name_.empty()) {
      positionals_.push_back(arg);
      continue;
    }
    if (arg.rfind("--", 0) != 0)
      throw Error(str(command_, ": unexpected argument '", arg, "'; flags are written --name value\n", usage()));
    std::string name = arg.substr(2), value;
    const auto declared = flags_.find(name);
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    } else if (declared != flags_.end() && declared->second.toggle) {
      value = "true";
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      throw Error(str(command_, ": flag --", name, " needs a value"));
    }
    if (!flags_.count(name)) {
      const std::string best = closest_match(name, order_);
      throw Error(str(command_, ": unknown flag --", name, best.empty() ? "" : str(" (did you mean --", best, "?)"),
                      "\n", usage()));
    }
    given_[name] = value;
  }
  return true;
}

std::string Args::get(const std::string& name) const {
  DT_CHECK(flags_.count(name), "flag --", name, " was never declared");
  if (auto it = given_.find(name); it != given_.end()) return it->second;
  return flags_.at(name).fallback;
}

int64_t Args::get_int(const std::string& name) const {
  const std::string v = get(name);
  int64_t out = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || ptr != v.data() + v.size())
    throw Error(str(command_, ": --", name, " = '", v, "' is not an integer"));
  return out;
}

double Args::get_double(const std::string& name) const {
  const std::string v = get(name);
  double out = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || ptr != v.data() + v.size())
    throw Error(str(command_, ": --", name, " = '", v, "' is not a number"));
  return out;
}

bool Args::get_bool(const std::string& name) const {
  const std::string v = get(name);
  if (v == "true") return true;
  if (v == "false") return false;
  throw Error(str(command_, ": --", name, " = '", v, "' must be true or false"));
}

std::string Args::usage() const {
  std::string out = str("usage: dtrain ", command_, order_.empty() ? "" : " [flags]",
                        positional_name_.empty() ? "" : " " + positional_name_, "\n  ", summary_, "\n");
  if (!positional_name_.empty()) out += str("  ", positional_name_, "  ", positional_help_, "\n");
  if (!order_.empty()) out += "flags:\n";
  for (const auto& name : order_) {
    const Flag& f = flags_.at(name);
    if (f.toggle)
      out += str("  --", name, "  ", f.help, " (a switch: off unless given)\n");
    else
      out += str("  --", name, "  ", f.help, f.fallback.empty() ? "" : str(" (default: ", f.fallback, ")"), "\n");
  }
  return out;
}

}  // namespace dt::cli
