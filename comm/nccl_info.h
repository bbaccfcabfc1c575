// NCCL as this build knows it, for `dtrain doctor`. No NCCL header here.
#pragma once

#include <string>

namespace dt {

// "2.27.7", or why there is none ("this build has no CUDA backend").
std::string nccl_version();

}  // namespace dt
