#include "model/parameters.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/device.h"
#include "core/rng.h"
#include "core/suggest.h"

namespace dt {

Shape ParamInfo::stored_shape() const {
  Shape s;
  s.push_back(stored_rows);
  for (int i = 1; i < shape.ndim(); ++i) s.push_back(shape[i]);
  return s;
}

std::vector<ParamInfo::Run> ParamInfo::runs() const {
  std::vector<Run> runs;
  const Shape& whole = slice.whole;
  const int64_t row = whole.numel() / whole[0];  // elements per row of the whole tensor
  if (slice.dim == 0) {
    int64_t local = 0;
    for (const SlicePiece& p : slice.pieces) {
      runs.push_back({local, p.range.begin * row, p.range.size() * row, p.owned});
      local += p.range.size() * row;
    }
    return runs;
  }
  int64_t local = 0;
  for (int64_t r = 0; r < whole[0]; ++r)
    for (const SlicePiece& p : slice.pieces) {
      runs.push_back({local, r * row + p.range.begin, p.range.size(), p.owned});
      local += p.range.size();
    }
  return runs;
}

std::string block_prefix(int layer) { return str("h.", layer, "."); }

std::vector<SlicePiece> span_pieces(const ModelConfig& config, const ShardDims& dims, const std::vector<Span>& spans,
                                    bool lead) {
  const int64_t HS = config.head_size();
  const HeadShard& heads = dims.heads;
  std::vector<SlicePiece> pieces;
  int64_t first = 0;  // of the span in the whole dimension
  for (const Span span : spans) {
    switch (span) {
      case Span::query_heads:
        pieces.push_back({{first + heads.q_begin * HS, first + heads.q_end * HS}, true});
        break;
      case Span::kv_heads:
        // Each key/value head the rank's query heads read, owned or a copy; runs of the same
        // ownership merged.
        for (int j = heads.kv_begin; j < heads.kv_end; ++j) {
          const SlicePiece head{{first + j * HS, first + (j + 1) * HS}, heads.owns_kv(j)};
          if (j > heads.kv_begin && pieces.back().owned == head.owned)
            pieces.back().range.end = head.range.end;
          else
            pieces.push_back(head);
        }
        break;
      case Span::ffn:
        pieces.push_back({{first + dims.ffn.begin, first + dims.ffn.end}, true});
        break;
      case Span::shared_ffn:
        pieces.push_back({{first + dims.shared_ffn.begin, first + dims.shared_ffn.end}, true});
        break;
      case Span::experts:
      case Span::expert_ffn:
      case Span::one:
        pieces.push_back({{first, first + span_width(config, span)}, lead});
        break;
    }
    first += span_width(config, span);
  }
  return pieces;
}

HeldUnits HeldUnits::of(const std::vector<StageUnits>& stages, int n_layer) {
  HeldUnits held{.embeddings = false, .head = false, .blocks = std::vector<bool>(static_cast<size_t>(n_layer))};
  for (const StageUnits& s : stages) {
    held.embeddings = held.embeddings || s.embeddings;
    held.head = held.head || s.head;
    for (int l = s.first_block; l < s.end_block; ++l) held.blocks.at(static_cast<size_t>(l)) = true;
  }
  return held;
}

ParameterLayout::ParameterLayout(const ModelConfig& config, int64_t unit_multiple, TensorShard shard, HeldUnits held,
                                 ExpertShard experts)
    : config_(config),
      unit_multiple_(unit_multiple),
      shard_(shard),
      expert_shard_(experts),
      dims_(shard_dims(config, shard, experts)),
      held_(std::move(held)),
      block_units_(static_cast<size_t>(config.n_layer), -1) {
  DT_CHECK(unit_multiple >= 1 && unit_multiple % kParamAlignment == 0, "unit multiple ", unit_multiple,
           " must be a positive multiple of ", kParamAlignment);
  DT_CHECK(held_.blocks.empty() || held_.blocks.size() == static_cast<size_t>(config.n_layer),
           "held units naming ", held_.blocks.size(), " blocks of ", config.n_layer);
  const int64_t C = config.d_model, L = config.n_layer;
  const FamilyTraits traits = config.traits();
  // N(0, 0.02) for weights, as GPT-2 and Hugging Face's Llama initialise (GPT-2 scaling the
  // residual projections': FamilyTraits); norm weights start at one, biases at zero.
  const float std = 0.02f;
  const float residual_std =
      traits.scaled_residual_init ? std / std::sqrt(2.0f * static_cast<float>(L)) : std;
  // What every rank holds whole: owned by rank 0.
  const bool lead = shard.rank == 0;
  const auto copy = [&](Shape whole) { return TensorSlice::all(whole, lead); };
  const auto rows = [](Shape whole, std::vector<SlicePiece> pieces) { return TensorSlice{whole, 0, std::move(pieces)}; };
  // A norm over the model's C columns, whole on every rank; or over a span's, split as it is.
  const auto norm = [&](const std::string& name, std::optional<Span> span = std::nullopt) {
    const TensorSlice slice =
        span ? rows({span_width(config, *span)}, span_pieces(config, dims_, {*span}, lead)) : copy({C});
    add(name + ".weight", slice, ParamInit::ones, 0);
    if (traits.norm == NormKind::layernorm) add(name + ".bias", slice, ParamInit::zeros, 0);
  };
  // A column-parallel layer's weight and bias hold its output rows; a row-parallel one's weight
  // holds its input columns, and its bias is whole (added once, by the owner).
  const auto linear = [&](const std::string& name, const LinearDeclaration& decl) {
    const int64_t width = decl.split_width(config);
    std::vector<SlicePiece> pieces = span_pieces(config, dims_, decl.spans, lead);
    const float init_std = decl.residual ? residual_std : std;
    if (decl.per_expert) {
      // (E_local, out, in): this rank's experts, each whole on every tensor-parallel rank, owned
      // by the first.
      const int64_t E = config.moe.experts, out = decl.out_features(config), in = decl.in_features(config);
      add(name + ".weight", rows({E, out, in}, {{dims_.local_experts, lead}}), ParamInit::normal, init_std);
      params_.back().is_expert = true;
    } else if (decl.style == LinearStyle::column) {
      add(name + ".weight", rows({width, C}, pieces), ParamInit::normal, init_std);
      if (decl.has_bias(config)) add(name + ".bias", rows({width}, std::move(pieces)), ParamInit::zeros, 0);
    } else {
      add(name + ".weight", TensorSlice{{C, width}, 1, std::move(pieces)}, ParamInit::normal, init_std);
      if (decl.has_bias(config)) add(name + ".bias", copy({C}), ParamInit::zeros, 0);
    }
  };
  const kernels::FlatRange vocab = dims_.vocab;

  if (held_.embeddings) {
    add("wte", rows({config.vocab_size, C}, {{vocab, true}}), ParamInit::normal, std, dims_.padded_vocab);
    if (traits.positions == PositionKind::learned)
      add("wpe", copy({config.max_seq_len, C}), ParamInit::normal, std);
    end_unit(0);
  }
  for (int l = 0; l < L; ++l) {
    if (!held_.holds_block(l)) continue;
    block_units_[static_cast<size_t>(l)] = static_cast<int>(units_.size());
    const int64_t block_begin = total_elements_;
    const std::string h = block_prefix(l);
    const auto& layers = declare_block(config, l).layers;
    for (const auto& layer : layers) {
      if (const auto* n = std::get_if<NormDeclaration>(&layer)) norm(h + n->name, n->span);
      if (const auto* decl = std::get_if<LinearDeclaration>(&layer); decl != nullptr && !decl->per_expert)
        linear(h + decl->name, *decl);
    }
    if (!config.moe_block(l)) {
      end_unit(block_begin);
      continue;
    }
    pad_to_unit_multiple();
    const int64_t experts_begin = total_elements_;
    for (const auto& layer : layers)
      if (const auto* decl = std::get_if<LinearDeclaration>(&layer); decl != nullptr && decl->per_expert)
        linear(h + decl->name, *decl);
    end_unit(block_begin, experts_begin);
  }
  if (!held_.head) return;
  const int64_t head_begin = total_elements_;
  norm("ln_f");
  if (!config.tied_embeddings)
    add("lm_head", rows({config.vocab_size, C}, {{vocab, true}}), ParamInit::normal, std, dims_.padded_vocab);
  else if (holds_wte_copy())
    add("wte", rows({config.vocab_size, C}, {{vocab, false}}), ParamInit::normal, std, dims_.padded_vocab);
  end_unit(head_begin);
}

bool ParameterLayout::whole_model() const {
  return held_.embeddings && held_.head && std::ranges::none_of(block_units_, [](int u) { return u < 0; });
}

size_t ParameterLayout::embeddings_unit() const {
  DT_CHECK(held_.embeddings, "the embeddings' unit of a layout without them");
  return 0;
}

size_t ParameterLayout::block_unit(int layer) const {
  const int u = block_units_.at(static_cast<size_t>(layer));
  DT_CHECK(u >= 0, "block ", layer, "'s unit of a layout without it");
  return static_cast<size_t>(u);
}

size_t ParameterLayout::head_unit() const {
  DT_CHECK(held_.head, "the head's unit of a layout without it");
  return units_.size() - 1;
}

void ParameterLayout::pad_to_unit_multiple() {
  total_elements_ = (total_elements_ + unit_multiple_ - 1) / unit_multiple_ * unit_multiple_;
}

void ParameterLayout::end_unit(int64_t begin, std::optional<int64_t> experts_begin) {
  pad_to_unit_multiple();
  units_.push_back({begin, total_elements_});
  unit_experts_.push_back({experts_begin.value_or(total_elements_), total_elements_});
}

void ParameterLayout::add(std::string name, TensorSlice slice, ParamInit init, float init_std, int64_t stored_rows) {
  int64_t held = 0;  // along the split dimension
  for (const SlicePiece& piece : slice.pieces) held += piece.range.size();
  Shape shape;
  for (int i = 0; i < slice.whole.ndim(); ++i) shape.push_back(i == slice.dim ? held : slice.whole[i]);
  ParamInfo p{.name = std::move(name),
              .shape = shape,
              .stored_rows = stored_rows < 0 ? shape[0] : stored_rows,
              .offset = total_elements_,
              .init = init,
              .init_std = init_std,
              .is_matrix = shape.ndim() >= 2,  // an expert layer's (E, out, in) too
              .is_embedding = false,
              .slice = std::move(slice)};
  // The output projection counts as an embedding whether tied (wte) or not (lm_head), so
  // untying does not change which weights decay.
  p.is_embedding = p.name == "wte" || p.name == "wpe" || p.name == "lm_head";
  total_elements_ += (p.stored_numel() + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
  params_.push_back(std::move(p));
}

const ParamInfo* ParameterLayout::find_if_any(std::string_view name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

const ParamInfo& ParameterLayout::find(std::string_view name) const {
  if (const ParamInfo* p = find_if_any(name)) return *p;
  std::vector<std::string> names;
  for (const auto& p : params_) names.push_back(p.name);
  const std::string suggestion = closest_match(name, names);
  throw Error(str("no parameter named '", name, "' in this ", model_family_name(config_.family), " model",
                  suggestion.empty() ? "" : str(" (did you mean '", suggestion, "'?)")));
}

std::vector<kernels::FlatRange> ParameterLayout::unpadded_ranges(
    const std::function<bool(const ParamInfo&)>& include) const {
  std::vector<kernels::FlatRange> ranges;
  for (const ParamInfo& p : params_)
    if (!include || include(p)) kernels::append_range(ranges, {p.offset, p.offset + p.numel()});
  return ranges;
}

std::vector<kernels::FlatRange> ParameterLayout::owned_ranges(
    const std::function<bool(const ParamInfo&)>& include) const {
  std::vector<kernels::FlatRange> ranges;
  for (const ParamInfo& p : params_)
    if (!include || include(p))
      for (const ParamInfo::Run& run : p.runs())
      if (run.owned) kernels::append_range(ranges, {p.offset + run.local, p.offset + run.local + run.count});
  return ranges;
}

int64_t ParameterLayout::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p.numel();
  return n;
}

int64_t ParameterLayout::active_parameters() const {
  int64_t n = 0;
  for (const auto& p : params_)
    n += p.is_expert ? p.numel() / config_.moe.experts * config_.moe.routing.top_k : p.numel();
  return n;
}

size_t ParameterLayout::unit_of(const ParamInfo& p) const {
  const auto after = std::upper_bound(units_.begin(), units_.end(), p.offset,
                                      [](int64_t offset, const kernels::FlatRange& u) { return offset < u.begin; });
  return static_cast<size_t>(after - units_.begin()) - 1;
}

FlatTensors::FlatTensors(const ParameterLayout& layout, MemTag tag, Device device, DType dtype, Storage storage)
    : layout_(&layout), dtype_(dtype), tag_(tag), device_(device), storage_(storage) {
  if (storage == Storage::whole)
    buffer_ = Buffer(held_bytes(layout, dtype, storage), tag, device);
  else
    units_.resize(layout.units().size());
}

size_t FlatTensors::held_bytes(const ParameterLayout& layout, DType dtype, Storage storage) {
  return storage == Storage::whole ? static_cast<size_t>(layout.total_elements()) * dtype_size(dtype) : 0;
}

size_t FlatTensors::unit_bytes(const ParameterLayout& layout, DType dtype, size_t u) {
  return static_cast<size_t>(layout.units().at(u).size()) * dtype_size(dtype);
}

Tensor FlatTensors::all() const {
  DT_CHECK(storage_ == Storage::whole, "all() of flat tensors stored per unit: use unit()");
  return buffer_.view(dtype_, {layout_->total_elements()});
}

Tensor FlatTensors::unit(size_t u) const {
  const kernels::FlatRange& range = layout_->units().at(u);
  if (storage_ == Storage::whole) return all().slice_rows(range.begin, range.size());
  DT_CHECK(held(u), "unit ", u, " of flat tensors stored per unit is not held");
  return units_[u].view(dtype_, {range.size()});
}

bool FlatTensors::held(size_t u) const { return storage_ == Storage::whole || units_.at(u).data() != nullptr; }

void FlatTensors::hold(size_t u) {
  if (held(u)) return;
  units_[u] = Buffer(unit_bytes(*layout_, dtype_, u), tag_, device_, false);
}

void FlatTensors::release(size_t u) {
  if (storage_ == Storage::per_unit) units_.at(u) = Buffer();
}

void FlatTensors::zero() {
  if (storage_ == Storage::whole) return buffer_.zero();
  for (Buffer& b : units_)
    if (b.data() != nullptr) b.zero();
}

std::pair<const Buffer*, size_t> FlatTensors::locate(const ParamInfo& info) const {
  if (storage_ == Storage::whole) return {&buffer_, static_cast<size_t>(info.offset) * dtype_size(dtype_)};
  const size_t u = layout_->unit_of(info);
  DT_CHECK(held(u), info.name, " is in unit ", u, " of flat tensors stored per unit, which is not held");
  return {&units_[u], static_cast<size_t>(info.offset - layout_->units()[u].begin) * dtype_size(dtype_)};
}

Tensor FlatTensors::stored(const ParamInfo& info) const {
  const auto [buffer, offset] = locate(info);
  return buffer->view(dtype_, info.stored_shape(), offset);
}

Tensor FlatTensors::unpadded(const ParamInfo& info) const {
  const auto [buffer, offset] = locate(info);
  return buffer->view(dtype_, info.shape, offset);
}

namespace {

// Where the elements of `p`'s whole tensor lie in `target`'s tensor of the same name, a slicing of
// it holding them (the whole tensor, or a rank's slice that contains p's): its runs by their
// place in the whole tensor.
std::vector<ParamInfo::Run> runs_by_global(const ParamInfo& target) {
  std::vector<ParamInfo::Run> runs = target.runs();
  std::ranges::sort(runs, {}, &ParamInfo::Run::global);
  return runs;
}

// For each run of shard's tensors (the owned ones only when `owned_only`), copies the run's
// elements between the shard and `whole` either way, wherever whole's tensor of the same name
// holds them.
void copy_runs(const FlatTensors& whole, const FlatTensors& shard, bool into_shard, bool owned_only,
               const std::function<bool(const ParamInfo&)>& include = {}) {
  const size_t element = dtype_size(shard.dtype());
  DT_CHECK(whole.dtype() == shard.dtype(), "slices between ", dtype_name(whole.dtype()), " and ",
           dtype_name(shard.dtype()), " tensors");
  for (const ParamInfo& p : shard.layout().params()) {
    if (include && !include(p)) continue;
    const ParamInfo& target = whole.layout().find(p.name);
    const std::vector<ParamInfo::Run> places = runs_by_global(target);
    const Tensor mine = shard.unpadded(p), all = whole.unpadded(target);
    const auto copy = [&](int64_t at_mine, int64_t at_all, int64_t count) {
      char* at_shard = static_cast<char*>(mine.data) + at_mine * static_cast<int64_t>(element);
      char* at_whole = static_cast<char*>(all.data) + at_all * static_cast<int64_t>(element);
      const size_t bytes = static_cast<size_t>(count) * element;
      if (into_shard)
        copy_bytes(at_shard, mine.device, at_whole, all.device, bytes);
      else
        copy_bytes(at_whole, all.device, at_shard, mine.device, bytes);
    };
    for (const ParamInfo::Run& run : p.runs()) {
      if (owned_only && !run.owned) continue;
      // The target's runs overlapping [run.global, run.global + run.count), in order.
      auto place = std::ranges::upper_bound(places, run.global, {}, &ParamInfo::Run::global);
      if (place != places.begin()) --place;
      int64_t from = run.global;
      const int64_t end = run.global + run.count;
      for (; from < end && place != places.end(); ++place) {
        if (place->global + place->count <= from) continue;
        DT_CHECK(place->global <= from, p.name, ": elements ", from, " to ", place->global,
                 " of the whole tensor are not in the tensor they are copied ", into_shard ? "from" : "to");
        const int64_t until = std::min(end, place->global + place->count);
        copy(run.local + (from - run.global), place->local + (from - place->global), until - from);
        from = until;
      }
      DT_CHECK(from == end, p.name, ": elements from ", from, " of the whole tensor are not in the tensor they are copied ",
               into_shard ? "from" : "to");
    }
  }
}

}  // namespace

void copy_slices(const FlatTensors& whole, FlatTensors& shard) { copy_runs(whole, shard, true, false); }

void place_slices(const FlatTensors& shard, FlatTensors& whole, const std::function<bool(const ParamInfo&)>& include) {
  copy_runs(whole, shard, false, true, include);
}

void init_parameters(FlatTensors& params, uint64_t seed) {
  params.zero();  // alignment gaps and padding rows stay zero
  std::vector<float> values;
  for (const auto& p : params.layout().params()) {
    if (p.init == ParamInit::zeros) continue;
    // Filled on the CPU, then copied where the parameters live.
    values.assign(static_cast<size_t>(p.numel()), 1.0f);
    // Element i of the whole tensor is drawn from index i, so a rank's slice holds the same
    // values as one process's whole tensor there.
    const ElementRng rng(seed, p.name);
    if (p.init == ParamInit::normal)
      for (const ParamInfo::Run& run : p.runs())
        fill_normal(values.data() + run.local, run.count, static_cast<uint64_t>(run.global), rng, 0.0f, p.init_std);
    const Tensor unpadded = params.unpadded(p);
    copy_bytes(unpadded.data, unpadded.device, values.data(), Device::cpu, values.size() * sizeof(float));
  }
}

}  // namespace dt
