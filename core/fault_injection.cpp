#include "core/fault_injection.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace dt {

bool fault_injected(std::string_view fault, int64_t where) {
  const char* value = std::getenv("DTRAIN_INJECT_FAULT");
  if (value == nullptr || *value == '\0') return false;
  const std::string spec = value;
  const size_t at = spec.find('@');
  const std::string name = spec.substr(0, at);
  if (at == std::string::npos ||
      (name != "checkpoint-write-fails" && name != "checkpoint-write-stalls" && name != "checkpoint-write-slow" &&
       name != "step-stalls" &&
       name != "step-kills-rank" && name != "collective-result-wrong"))
    throw Error(str("DTRAIN_INJECT_FAULT = '", spec, "': expected checkpoint-write-fails@STEP, "
                    "checkpoint-write-stalls@STEP, checkpoint-write-slow@STEP, step-stalls@STEP, step-kills-rank@STEP or "
                    "collective-result-wrong@RANK; unset it for a normal run"));
  char* end = nullptr;
  const long long fault_at = std::strtoll(spec.c_str() + at + 1, &end, 10);
  if (*end != '\0' || end == spec.c_str() + at + 1)
    throw Error(str("DTRAIN_INJECT_FAULT = '", spec, "': the number after '@' is not an integer"));
  return name == fault && fault_at == where;
}

}  // namespace dt
