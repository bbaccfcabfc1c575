// Fault injection for the tests of durability and of the tools' own checks: a crash, a full disk
// or a wrong collective result at a chosen moment.
//
// The environment variable DTRAIN_INJECT_FAULT names one fault and where it strikes, "FAULT@N":
// N is a step, or for collective-result-wrong a rank. The faults are:
//   checkpoint-write-fails   saving the checkpoint of STEP fails after its tensor file is
//                            written and before its manifest, as a full disk would (the error
//                            says it was injected)
//   checkpoint-write-stalls  saving the checkpoint of STEP stops at that same point for a
//                            minute, so that a test can SIGKILL the process mid-save
//   checkpoint-write-slow    each tensor file of STEP's checkpoint starts to be written two
//                            seconds late, as on a slow disk (an asynchronous save's test: the
//                            steps go on meanwhile)
//   step-stalls              the rank stops for ten minutes before step STEP, calling no
//                            collective (the collective watchdog's test: the other ranks
//                            report it)
//   step-kills-rank          the rank kills itself (SIGKILL) before step STEP: a rank that
//                            dies mid-run
//   step-waits-for-signal    the rank waits before step STEP until SIGTERM or SIGINT reaches it
//                            (a signal sent from outside, scancel's, then surely arrives mid-run)
//   gradient-bucket-unsummed data parallelism leaves the first bucket of step STEP's gradients
//                            (ZeRO 0 and 1: the last layers') unsummed over the ranks, each
//                            keeping its own: a missing reduction (`dtrain check`'s test: it must
//                            name the step and a tensor of that bucket)
//   collective-result-wrong  in `dtrain bench comm` and `dtrain doctor`, rank N's copy of every
//                            collective result they check has its last element off by one, as a
//                            faulty link or MPI library would leave it (the tests of those checks:
//                            the count of wrong elements must rise and the command must fail)
// Unset (the normal case), nothing is injected. A malformed value is an error, so a test
// cannot silently run without its fault.
#pragma once

#include <cstdint>
#include <string_view>

namespace dt {

// Whether `fault` strikes at `where` (a step, or a rank: above). Throws dt::Error for a
// malformed DTRAIN_INJECT_FAULT.
bool fault_injected(std::string_view fault, int64_t where);

}  // namespace dt
