#include "core/error.h"

namespace dt {

Error& Error::add_context(std::string_view context) {
  context_.insert(context_.begin(), std::string(context));
  rebuild();
  return *this;
}

void Error::rebuild() {
  what_.clear();
  for (const auto& c : context_) {
    what_ += c;
    what_ += ": ";
  }
  what_ += message_;
}

void check_failed(const char* statement, const std::string& detail, const char* function, const char* file,
                  int line) {
  throw Error(str("internal check failed: ", statement, detail.empty() ? "" : " (", detail,
                  detail.empty() ? "" : ")", " in ", function, " at ", file, ":", line,
                  ". This is a bug in dtrain; please report it with the command that triggered it."));
}

}  // namespace dt
