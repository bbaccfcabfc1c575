// Per-linear state: a few f32 values kept for each linear layer of a block, beside its weights —
// the seam where FP8's scaling state (a history of amaxes, the scales) and a quantizer's state
// will live, and where a mixture of experts' router keeps its balancing bias
// (model/expert_balance.h). With none declared nothing is allocated, saved or read.
//
// A LinearStateDeclaration names one kind of state, its element count per linear layer and the
// layers that carry it. LinearStates lays the declared kinds out over the blocks a rank holds,
// from the block's one declaration (model/block_declaration.h: declare_block(config).linears()),
// in one flat f32 buffer on the model's device, tagged `parameters` (like the weights, it is
// model state that forward reads, held whole by every rank that holds the block; a tag of its
// own would change every report that lists the tags). Kind-major, so that each kind is one
// contiguous (entries, count) range that one collective reduces:
//
//   [kind 0: block b0 linear 0, b0 linear 1, ..., b1 linear 0, ...][kind 1: ...]
//
// each entry named globally by block, linear and kind: "h.3.attn.qkv.amax_history". The names
// do not depend on the layout, so a checkpoint saves each under its name
// (train/training_checkpoint.h: linear_state.NAME) and any layout reads it back.
//
// Replication. A state is one value for the WHOLE tensor of its linear layer, not per piece:
// every rank that holds a piece of the layer — each tensor-parallel rank of the pipeline stage
// holding the block, and each of its data- and context-parallel replicas (every ZeRO stage keeps
// it whole) — holds the same state. A value each rank computes from what it sees must therefore
// be agreed on over all of them: FP8's amax, the largest magnitude of the tensor's values, is the
// max over the tp ranks (each sees its piece of the weight or the output) and over the dp × cp
// replicas (each sees other tokens). Maxing over the tp group and then over dp × cp gives the max
// over every holder (ProcessGroups::stage_replica_groups, parallel/parallel_dims.h); other
// pipeline stages hold other blocks and take no part. reduce_max does that. The experts' grouped
// linear layers (LinearDeclaration::per_expert) hold E weights: each carries its kinds' counts
// once per expert, expert by expert, all E on every holder whichever experts it holds (expert
// parallelism): a rank's values for the experts it does not hold are its kind's initial ones,
// and the max over the holders is the value of the ranks that hold each expert.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "model/qat_recipe.h"
#include "model/block_declaration.h"
#include "model/parameters.h"

namespace dt {

struct Float8Training;

struct LinearStateDeclaration {
  std::string name;                  // "amax_history": the last part of each entry's name
  int64_t count = 1;                 // f32 elements per linear layer (per expert of an experts' one)
  std::vector<std::string> linears;  // the block's linear layers that carry it, by declared name; empty: every one
  float initial = 0;                 // each element's value before anything writes it (FP8's scale: 1)
};

// The states of one linear layer: a view per kind declared for it, in declaration order; none
// where nothing is declared. What a ColumnParallelLinear or RowParallelLinear holds, with the FP8
// training it runs under where FP8 quantizes it (model/float8_recipe.h).
class LinearStateView {
 public:
  LinearStateView() = default;
  bool empty() const { return states_.empty(); }
  // The model's FP8 training where this layer's products run in FP8, else nullptr.
  const Float8Training* float8() const { return float8_; }
  // The format quantization-aware training fake-quantizes this layer's weight in, if any.
  std::optional<QatRecipe> qat() const { return qat_; }
  // The state of kind `state`, (count) f32 on the model's device; throws dt::Error naming the
  // kinds the layer has.
  Tensor get(std::string_view state) const;
  // (kind, view) in declaration order.
  const std::vector<std::pair<std::string, Tensor>>& all() const { return states_; }

 private:
  friend class LinearStates;
  std::string linear_;  // "h.3.attn.qkv", for errors
  std::vector<std::pair<std::string, Tensor>> states_;
  const Float8Training* float8_ = nullptr;
  std::optional<QatRecipe> qat_;
};

class LinearStates {
 public:
  struct Entry {
    std::string name;    // "h.3.attn.qkv.amax_history"
    int layer = 0;       // the block
    std::string linear;  // "attn.qkv"
    size_t kind = 0;     // index of its declaration
    int64_t offset = 0;  // elements from the start of the buffer
    int64_t count = 0;
  };

  // No state: nothing allocated.
  LinearStates() = default;
  // The declared kinds over the blocks `layout` holds, on `device`, each element at its kind's
  // initial value. Throws dt::Error for a kind without a name or elements, a name declared twice
  // or a linear layer the block does not declare (naming those it does). `float8`: the FP8
  // training the layers run under (which must outlive this object), none by default; `qat`:
  // quantization-aware training's recipe, none by default.
  LinearStates(const ParameterLayout& layout, std::vector<LinearStateDeclaration> declared, Device device,
               const Float8Training* float8 = nullptr, std::optional<QatRecipe> qat = std::nullopt);
  LinearStates(LinearStates&&) = default;
  LinearStates& operator=(LinearStates&&) = default;
  // The bytes such states allocate: what plan/memory.h adds to the `parameters` tag where a run
  // declares some.
  static size_t bytes(const ParameterLayout& layout, const std::vector<LinearStateDeclaration>& declared);
  // The one empty instance, for layers and stages made without state.
  static const LinearStates& none();

  bool empty() const { return entries_.empty(); }
  const std::vector<LinearStateDeclaration>& declared() const { return declared_; }
  const Float8Training* float8() const { return float8_; }
  std::optional<QatRecipe> qat() const { return qat_; }
  // Every entry this rank holds, kind-major (as laid out).
  const std::vector<Entry>& entries() const { return entries_; }
  // The names of every entry of the whole model, whichever blocks this rank holds: what a
  // checkpoint of any layout holds.
  const std::vector<std::string>& model_names() const { return model_names_; }
  Device device() const { return buffer_.device(); }

  Tensor at(const Entry& entry) const;
  // Block `layer`'s state of kind `state` of linear layer `linear`; throws dt::Error naming what
  // is held when there is none.
  Tensor find(int layer, std::string_view linear, std::string_view state) const;
  // Every entry of kind `state`, contiguous, as (weights, count): a row per weight, an experts'
  // layer's E rows.
  Tensor all(std::string_view state) const;
  // Block `layer`'s states of linear layer `linear`: none where no kind is declared for it.
  LinearStateView of(int layer, std::string_view linear) const;

  // Sets each element of kind `state` to its max over every rank of `groups`, one group after
  // another (a max of maxes is the max over their product: ProcessGroups::stage_replica_groups).
  // A collective on each group; waits for each.
  void reduce_max(std::string_view state, const std::vector<Communicator*>& groups) const;

 private:
  size_t kind_index(std::string_view state) const;
  std::vector<LinearStateDeclaration> declared_;
  std::vector<Entry> entries_;
  std::vector<std::pair<int64_t, int64_t>> kinds_;  // each kind's [first element, end)
  std::vector<std::string> model_names_;
  Buffer buffer_;
  const Float8Training* float8_ = nullptr;
  std::optional<QatRecipe> qat_;
};

}  // namespace dt
