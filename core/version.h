// The build's identity, for run directories and `dtrain --version`: the project version and
// the git commit the build was configured from ("unknown" outside a git checkout).
#pragma once

#include <string>

namespace dt {

std::string dtrain_version();

}  // namespace dt
