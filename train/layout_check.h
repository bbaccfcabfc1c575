// `dtrain check`: whether a parallel layout trains as one rank does, on this build and machine —
// the equivalence the layout matrix proves (tests/layout_cell.h), for a user's own layout,
// compiler, BLAS or GPU.
//
// Every rank of the job trains kEquivalenceSteps steps under the configuration's layout, in the
// regime the engine's bounds were measured in (parallel/equivalence.h), while the lead also
// trains the same steps alone, on the whole global batch: one rank's reference, beside its own
// rank of the layout. After each step the layout's whole parameters are gathered on the lead and
// compared with the reference's tensor by tensor, as are the step's loss and gradient norm.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "parallel/equivalence.h"
#include "train/run_config.h"

namespace dt {

// What the check trains: a small model of the configured model's family and shape rules (its
// heads, key/value heads and experts, so that the layout splits them as it would the configured
// model's, at 8 dimensions a head, and the layers a pipeline needs), or the configured model
// itself, at its batch size and sequence length.
enum class CheckedModel { small, configured };

// The run the check trains: `config` with the model `model` says, initialised from `seed`, and,
// for the small model, 2 sequences of
// 16 tokens per micro-batch (24 per context-parallel rank), the configuration's accumulation,
// buckets of 0.05 MB (several per model) and FP8 blocks of 4. Throws dt::Error when the small
// model does not suit the layout.
RunConfig layout_check_config(const RunConfig& config, CheckedModel model, uint64_t seed = kEquivalenceSeed);

// One step of the layout against one rank's (on the lead).
struct StepComparison {
  double loss = 0, reference_loss = 0;
  double grad_norm = 0, reference_grad_norm = 0;
  std::vector<TensorDifference> parameters;  // after the step, in the model's order
};

// A value of a step past its bound: the loss, the gradient norm or a parameter tensor (named).
struct Apart {
  enum class Value { loss, grad_norm, parameter };
  Value value = Value::loss;
  std::string what;  // "the loss", "the gradient norm" or the tensor's name
  double difference = 0, bound = 0;
};

// Where the layout first parts from one rank: the step (from 1) and everything past its bound
// there, the loss, then the gradient norm, then the parameter tensors in the model's order.
struct Divergence {
  int step = 0;
  std::vector<Apart> apart;
};

struct LayoutCheck {
  EquivalenceBounds bounds{};
  std::vector<StepComparison> steps;  // the lead's; empty on the other ranks
  // The first step with a value past its bound; nullopt when every one is within.
  std::optional<Divergence> first_divergence() const;
};

// Trains `check_config` (from layout_check_config) on every rank of the job and one rank's
// reference on the lead, in the bounds' regime whatever the configuration's optimizer: learning
// rate kEquivalenceLr, AdamW's defaults, gradients clipped at 1. A collective.
LayoutCheck check_layout(const RunConfig& check_config, Communicator& control);

}  // namespace dt
