#include "core/fault_injection.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "core/error.h"

namespace dt {

namespace {

// Every fault, with what its number names.
constexpr std::pair<std::string_view, std::string_view> kFaults[] = {
    {"checkpoint-write-fails", "STEP"}, {"checkpoint-write-stalls", "STEP"}, {"checkpoint-write-slow", "STEP"},
    {"step-stalls", "STEP"},           {"step-kills-rank", "STEP"},         {"gradient-bucket-unsummed", "STEP"},
    {"step-waits-for-signal", "STEP"},
    {"collective-result-wrong", "RANK"},
};

}  // namespace

bool fault_injected(std::string_view fault, int64_t where) {
  const char* value = std::getenv("DTRAIN_INJECT_FAULT");
  if (value == nullptr || *value == '\0') return false;
  const std::string spec = value;
  const size_t at = spec.find('@');
  const std::string name = spec.substr(0, at);
  const bool known = std::ranges::any_of(kFaults, [&](const auto& f) { return f.first == name; });
  if (at == std::string::npos || !known) {
    std::string expected;
    for (const auto& [known_name, number] : kFaults)
      expected += str(expected.empty() ? "" : ", ", known_name, "@", number);
    throw Error(str("DTRAIN_INJECT_FAULT = '", spec, "': expected one of ", expected, "; unset it for a normal run"));
  }
  char* end = nullptr;
  const long long fault_at = std::strtoll(spec.c_str() + at + 1, &end, 10);
  if (*end != '\0' || end == spec.c_str() + at + 1)
    throw Error(str("DTRAIN_INJECT_FAULT = '", spec, "': the number after '@' is not an integer"));
  return name == fault && fault_at == where;
}

}  // namespace dt
