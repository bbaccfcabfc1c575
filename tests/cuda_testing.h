// Tests of the CUDA backend: each compares a CUDA op with the CPU op on the same inputs. Where
// no GPU can be used (no backend in this build, no driver, no device) they are reported as
// skipped, by name and with the reason, never as passed.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/device.h"
#include "tests/gradcheck.h"

namespace dt::testing {

#define DT_SKIP_WITHOUT_CUDA()                                                 \
  do {                                                                         \
    if (const std::string dt_why_ = ::dt::cuda_unavailable_reason(); !dt_why_.empty()) \
      GTEST_SKIP() << "needs a CUDA device: " << dt_why_;                      \
  } while (0)

// A copy of t (any device) on `device`, complete when it returns.
OwnedTensor copy_to(const Tensor& t, Device device);

}  // namespace dt::testing
