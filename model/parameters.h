// Parameters as named views into one flat buffer.
//
// A ParameterLayout lists every parameter of a model — name, shape, offset, optimizer and
// initialisation properties — computed from the ModelConfig alone, without allocating. The
// parameters, their gradients and each optimizer moment are then one flat buffer each with
// that layout (FlatTensors), so gradient buckets, ZeRO shards and checkpoint shards are
// ranges of a buffer.
//
// Every tensor starts at a multiple of kParamAlignment elements; the gaps are zero. The
// parameters fall into units — the embeddings, each block, the head (ln_f and lm_head) — that
// ZeRO shards and gathers whole; with a unit multiple M each unit is padded to a multiple of M
// elements, so that it splits into equal, aligned parts over the data-parallel ranks (M = 16 ×
// ranks). The default M adds no padding. An expert block's experts come last in its unit, in a
// part of their own that starts and ends at a multiple of M (its experts range): under expert
// parallelism the ranks that hold the same experts are fewer than those holding the rest of the
// block, and data parallelism reduces and shards each part over its own ranks. A tensor
// may be stored with more rows than it shows (the padded vocabulary): `stored_rows` rows are
// in the buffer, the first `shape[0]` are the parameter. Only the unpadded part counts as a
// parameter, is saved, or is compared.
//
// Under tensor parallelism a rank's layout holds its shard of the model (model/tensor_shard.h):
// the same names, each tensor this rank's rows or columns of the model's, and each parameter
// says where they lie in the whole tensor — what initialisation, checkpoints and the gradient
// norm read. Under expert parallelism (ExpertShard) a rank's expert layers hold its experts,
// (E_local, out, in): rows of the model's. Under pipeline parallelism a rank's layout holds only
// the units of its stages
// (HeldUnits), under the same names; a tied model's head on a rank without the embeddings holds
// a copy of wte that the rank does not own (its gradient is summed with the embeddings' and it
// is counted, saved and decayed as one tensor with them: parallel/pipeline/pipeline_parallel.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "kernels/flat_ranges.h"
#include "model/block_declaration.h"
#include "model/config.h"
#include "model/tensor_shard.h"

namespace dt {

enum class ParamInit { normal, ones, zeros };

// Rows (or columns) [range.begin, range.end) of a whole tensor that a tensor-parallel rank
// holds; owned unless the rank holds a copy of another's (a replicated norm on ranks above 0, a
// copied key/value head).
struct SlicePiece {
  kernels::FlatRange range;
  bool owned = true;
};

// Where a rank's tensor lies in the model's: pieces of the whole tensor's dimension `dim` (0:
// rows, 1: columns), one after another in the rank's tensor.
struct TensorSlice {
  Shape whole;
  int dim = 0;
  std::vector<SlicePiece> pieces;

  // All of a tensor of shape `whole`, owned or a copy.
  static TensorSlice all(Shape whole, bool owned = true) { return {whole, 0, {{{0, whole[0]}, owned}}}; }
};

// The prefix of block `layer`'s parameter names: "h.3.".
std::string block_prefix(int layer);
// The pieces of a linear layer's split dimension, made of `spans`, that a tensor-parallel rank
// with `dims` holds, in order: all of it on one rank. A span tensor parallelism does not split
// (an expert's) is whole on every rank, owned by the first (`lead`).
std::vector<SlicePiece> span_pieces(const ModelConfig& config, const ShardDims& dims, const std::vector<Span>& spans,
                                    bool lead);

// A contiguous range of the model's units — optionally the embeddings, blocks [first, end),
// optionally the head (the final norm, the output projection and the loss): what one stage runs
// (model/stage.h).
struct StageUnits {
  bool embeddings = true;
  int first_block = 0, end_block = 0;  // blocks [first_block, end_block)
  bool head = true;

  // Every unit of the model.
  static StageUnits whole(const ModelConfig& config) { return {.end_block = config.n_layer}; }
};

// The units a rank holds: every one, or under pipeline parallelism its stages'.
struct HeldUnits {
  bool embeddings = true, head = true;
  std::vector<bool> blocks;  // by layer; empty: every block

  static HeldUnits of(const std::vector<StageUnits>& stages, int n_layer);
  bool holds_block(int layer) const { return blocks.empty() || blocks.at(static_cast<size_t>(layer)); }
};

struct ParamInfo {
  std::string name;
  Shape shape;              // what the parameter is: (V, C) for the embedding
  int64_t stored_rows = 0;  // rows in the buffer: shape[0], or Vp for the embedding
  int64_t offset = 0;       // in elements from the start of the flat buffer
  ParamInit init = ParamInit::normal;
  float init_std = 0;
  bool is_matrix = false;     // weights of 2 or more dimensions get weight decay
  bool is_embedding = false;  // token/position embeddings: weight decay only if configured
  bool is_expert = false;     // an expert layer's (E, out, in): a token reads top_k of its E slabs
  TensorSlice slice;          // the whole tensor on one rank

  // Elements [local, local + count) of this tensor are the whole tensor's [global, global + count)
  // (both row-major, unpadded).
  struct Run {
    int64_t local = 0, global = 0, count = 0;
    bool owned = true;
  };
  // Every element of the tensor in runs, in local order: a run per piece of rows, or per row and
  // piece of columns.
  std::vector<Run> runs() const;

  int64_t numel() const { return shape.numel(); }
  int64_t stored_numel() const { return shape[0] == 0 ? 0 : numel() / shape[0] * stored_rows; }
  Shape stored_shape() const;
};

constexpr int64_t kParamAlignment = 16;  // elements: 64 bytes of fp32, one cache line

class ParameterLayout {
 public:
  // Validates config first. `shard`: the tensor-parallel rank whose part of the model this lays
  // out (the whole model by default); `held`: the units it holds (every one by default);
  // `experts`: the expert-parallel rank whose experts it holds (all of them by default).
  explicit ParameterLayout(const ModelConfig& config, int64_t unit_multiple = kParamAlignment, TensorShard shard = {},
                           HeldUnits held = {}, ExpertShard experts = {});

  const ModelConfig& config() const { return config_; }
  const TensorShard& shard() const { return shard_; }
  const ExpertShard& expert_shard() const { return expert_shard_; }
  // This rank's heads, MLP columns and vocabulary rows (the model's own on one rank).
  const ShardDims& dims() const { return dims_; }
  const HeldUnits& held_units() const { return held_; }
  // Whether this layout holds all of the model: every unit (of its tensor-parallel shard).
  bool whole_model() const;
  // Whether the head holds a copy of a tied wte whose owner is the rank with the embeddings.
  bool holds_wte_copy() const { return held_.head && !held_.embeddings && config_.tied_embeddings; }
  const std::vector<ParamInfo>& params() const { return params_; }
  const ParamInfo& find(std::string_view name) const;  // throws dt::Error naming close matches
  const ParamInfo* find_if_any(std::string_view name) const;  // nullptr where there is none
  int64_t num_parameters() const;   // unpadded elements only: the published count
  // Those a token's forward reads: an expert layer's top_k of E (the published "active" count).
  int64_t active_parameters() const;
  int64_t total_elements() const { return total_elements_; }  // buffer size incl. padding and gaps
  int64_t unit_multiple() const { return unit_multiple_; }
  // The units in layout order, covering [0, total_elements()): embeddings, blocks, head.
  const std::vector<kernels::FlatRange>& units() const { return units_; }
  // The unit holding parameter p.
  size_t unit_of(const ParamInfo& p) const;
  // Unit u's experts' part: its end, from the first expert layer's weight (a multiple of the unit
  // multiple); empty, at the unit's end, where the unit has no experts.
  kernels::FlatRange experts_of_unit(size_t u) const { return unit_experts_[u]; }
  // The units of the embeddings (the first), of block l and of the head (the last); each must be
  // held.
  size_t embeddings_unit() const;
  size_t block_unit(int layer) const;
  size_t head_unit() const;
  // The unpadded elements of the parameters `include` selects (all without it), as increasing
  // ranges of the flat buffer with touching ones merged: what the multi-tensor ops run over.
  std::vector<kernels::FlatRange> unpadded_ranges(const std::function<bool(const ParamInfo&)>& include = {}) const;
  // The unpadded elements this rank owns (every one on one rank) of the parameters `include`
  // selects (all without it), as such ranges: what its share of the gradient norm counts, so that
  // a tensor held by several tensor-parallel ranks counts once.
  std::vector<kernels::FlatRange> owned_ranges(const std::function<bool(const ParamInfo&)>& include = {}) const;

 private:
  // A parameter of this rank: its slice of the model's tensor, stored with `stored_rows` rows
  // (its own rows when -1).
  void add(std::string name, TensorSlice slice, ParamInit init, float init_std, int64_t stored_rows = -1);
  // Pads the layout to a multiple of unit_multiple_.
  void pad_to_unit_multiple();
  // Ends the unit that began at `begin`, padded; its experts' part from `experts_begin` (none: empty).
  void end_unit(int64_t begin, std::optional<int64_t> experts_begin = std::nullopt);
  ModelConfig config_;
  int64_t unit_multiple_;
  TensorShard shard_;
  ExpertShard expert_shard_;
  ShardDims dims_;
  HeldUnits held_;
  std::vector<int> block_units_;  // by layer: its unit, or -1 where not held
  std::vector<ParamInfo> params_;
  std::vector<kernels::FlatRange> units_;
  std::vector<kernels::FlatRange> unit_experts_;  // by unit
  int64_t total_elements_ = 0;
};

// How a FlatTensors holds its elements. whole: one buffer, always there. per_unit: a buffer
// per unit of the layout, allocated by hold() and freed by release(), so that only the units in
// use take memory (ZeRO stages 2 and 3 hold gradients, and stage 3 parameters, a few blocks at
// a time: parallel/data_parallel.h).
enum class Storage { whole, per_unit };

// How a model's parameters and gradients are stored: the layout's unit multiple, and each
// buffer's storage. The default is one process's: no padding, everything whole.
struct ParameterStorage {
  int64_t unit_multiple = kParamAlignment;
  Storage weights = Storage::whole;  // what forward reads: the parameters, or the 16-bit copy
  Storage grads = Storage::whole;
  // 16-bit precision: whether the model keeps the f32 master weights. Under ZeRO the sharded
  // optimizer keeps them as shards instead and writes the 16-bit copy itself.
  bool master_weights = true;
};

// One flat buffer laid out by a ParameterLayout, with named views: f32 for master weights,
// gradients and optimizer moments; bf16 or f16 for the compute copy of mixed precision.
class FlatTensors {
 public:
  FlatTensors(const ParameterLayout& layout, MemTag tag, Device device = Device::cpu, DType dtype = DType::f32,
              Storage storage = Storage::whole);
  // The bytes such flat tensors allocate when made: the whole buffer, or nothing until units are
  // held (a pass holds a few at a time).
  static size_t held_bytes(const ParameterLayout& layout, DType dtype, Storage storage);
  // The bytes hold(u) allocates, stored per unit.
  static size_t unit_bytes(const ParameterLayout& layout, DType dtype, size_t u);

  const ParameterLayout& layout() const { return *layout_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  Storage storage() const { return storage_; }
  // Every element (whole storage only).
  Tensor all() const;
  // Unit u's elements; with per-unit storage, the unit must be held.
  Tensor unit(size_t u) const;
  // Per-unit storage: allocates unit u (its contents undefined until written), frees it.
  // Whole storage holds every unit always.
  bool held(size_t u) const;
  void hold(size_t u);
  void release(size_t u);
  // The stored view, (stored_rows, ...): what kernels use.
  Tensor stored(const ParamInfo& info) const;
  Tensor stored(std::string_view name) const { return stored(layout_->find(name)); }
  // The unpadded view, shape[0] rows: what is saved and compared.
  Tensor unpadded(const ParamInfo& info) const;
  Tensor unpadded(std::string_view name) const { return unpadded(layout_->find(name)); }
  // Zeroes every element held.
  void zero();

 private:
  // The buffer holding `info` and the byte offset of its first element there.
  std::pair<const Buffer*, size_t> locate(const ParamInfo& info) const;
  const ParameterLayout* layout_;
  DType dtype_;
  MemTag tag_;
  Device device_;
  Storage storage_;
  Buffer buffer_;              // whole
  std::vector<Buffer> units_;  // per unit: empty while not held
};

// Sets each of shard's tensors — a tensor-parallel rank's slices, or whole tensors — from
// `whole`: the whole model's flat tensors, or any slicing of it holding every element shard's
// do (a tensor-parallel rank's, with every expert, holds those of its expert-parallel ranks). Any
// device, both the same.
void copy_slices(const FlatTensors& whole, FlatTensors& shard);
// The reverse for the slices shard owns of the parameters `include` selects (all without it):
// sets them in whole.
void place_slices(const FlatTensors& shard, FlatTensors& whole,
                  const std::function<bool(const ParamInfo&)>& include = {});

// Sets every parameter from its init rule; element i of parameter p is a function of
// (seed, p.name, i) only (core/rng.h), so any process can build any part of the model.
void init_parameters(FlatTensors& params, uint64_t seed);

}  // namespace dt
