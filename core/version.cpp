#include "core/version.h"

// Set by CMake for this file alone.
#ifndef DTRAIN_VERSION
#error "DTRAIN_VERSION is defined by CMakeLists.txt"
#endif
#ifndef DTRAIN_GIT_COMMIT
#define DTRAIN_GIT_COMMIT "unknown"
#endif

namespace dt {

std::string dtrain_version() { return std::string(DTRAIN_VERSION) + " (git " + DTRAIN_GIT_COMMIT + ")"; }

}  // namespace dt
