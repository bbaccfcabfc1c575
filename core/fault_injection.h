// Fault injection for the tests of durability: a crash or a full disk at a chosen moment.
//
// The environment variable DTRAIN_INJECT_FAULT names one fault and the step it strikes at,
// "FAULT@STEP". The faults are:
//   checkpoint-write-fails   saving the checkpoint of STEP fails after its tensor file is
//                            written and before its manifest, as a full disk would (the error
//                            says it was injected)
//   checkpoint-write-stalls  saving the checkpoint of STEP stops at that same point for a
//                            minute, so that a test can SIGKILL the process mid-save
//   step-stalls              the rank stops for ten minutes before step STEP, calling no
//                            collective (the collective watchdog's test: the other ranks
//                            report it)
//   step-kills-rank          the rank kills itself (SIGKILL) before step STEP: a rank that
//                            dies mid-run
// Unset (the normal case), nothing is injected. A malformed value is an error, so a test
// cannot silently run without its fault.
#pragma once

#include <cstdint>
#include <string_view>

namespace dt {

// Whether `fault` is injected at `step`. Throws dt::Error for a malformed DTRAIN_INJECT_FAULT.
bool fault_injected(std::string_view fault, int64_t step);

}  // namespace dt
