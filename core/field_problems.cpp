#include "core/field_problems.h"

namespace dt {

void FieldProblems::throw_if_any(std::string_view heading) const {
  if (problems_.empty()) return;
  std::string message(heading);
  for (const FieldProblem& p : problems_) message += str("\n  ", p.field, " = ", p.value, ": ", p.what);
  throw Error(message);
}

}  // namespace dt
