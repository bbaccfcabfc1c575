#include "parallel/equivalence.h"

#include <algorithm>
#include <cmath>

#include "core/device.h"

namespace dt {

// The bounds, relative (the parameters to the largest, a norm's weight of about 1), over
// kEquivalenceSteps steps at kEquivalenceLr, measured on the layout matrix's models
// (tests/layout_cell.cpp: gpt2-tiny, llama-tiny, moe-tiny, olmoe-tiny and their variations).
//
// f32: the tensor-parallel run sums each row-parallel product in two parts, and the loss's
// exponentials per slice, where one rank sums them in one. Pipeline parallelism adds its own
// rounding in two places only: the gradient norm's sum of squares is completed over the stages
// (double sums in another order), and a tied wte's two shares of its gradient (the lookup's and
// the output projection's) are summed in the schedule's order — on two ranks, once at the end;
// every other gradient is the same sum in the same order (llama, untied, matches bit for bit).
// That is rounding, and Adam turns it into parameter differences where a gradient nearly
// cancels: its first update moves an element by about lr whatever the gradient's size, so an
// element whose tiny gradient changes sign differs by 2 lr. So the norms are bounded twice: at
// the first step, where both runs hold the same parameters, the gradient itself is compared
// (largest measured over the tp and pp matrices, 250 cells: 6.0e-8; bound 4e-7); later steps'
// norms are of parameters that differ that way (largest 1.2e-6, gpt2's tied wte under ZB-V at
// dp 2 × tp 2 × pp 2; bound 1e-5). Losses: 2.2e-8 measured; parameters 3.3e-5; bounds 6-9x.
// A wrong reduction lies far above them: without the copied key/value heads' sum (llama-tiny over
// 3 and 4 ranks) the losses move by 5e-5 to 1.7e-4, the norms by 3-4%, the parameters by 5.8e-3.
// Those measurements are of kEquivalenceSeed's weights and batches: where a near-zero gradient
// changes sign is data's luck, and another seed can cross the later steps' bounds by rounding
// alone (llama-tiny under tp 2 from seed 1337: the second loss 2.9e-7 apart, 1.6e-4 of a weight;
// from seed 7, 1.9e-9). The first step's loss and norm, from the same weights, owe nothing to it.
//
// bf16: each rank rounds its partial product to bf16 before the f32 sum (one rank rounds the
// whole product once), so activations differ by a bf16 ulp (2^-8 relative) here and there and
// every later number follows: measured losses 8.3e-5, norms 1.4e-3 (bounds 12x and 7x). The
// parameters: Adam moves an element by about lr per step whatever its gradient's size, so an
// element whose tiny gradient changes sign moves by about 2 lr per step differently: 3 steps ×
// 2e-3 = 6e-3, and 5.0e-3 is measured (tp 6); the bound, 1e-2, leaves room for Adam's steps a
// little above lr. The bf16 cells check that the 16-bit path works; the f32 cells are the ones
// tight enough to tell a wrong reduction (which moves the norms past the bf16 bound too: 3-4%).
//
// FP8 in f32 storage, tensorwise and delayed: a scale that is not a power of two moves with its
// amax's last bits, and with it every element's rounding, so FP8 turns f32's rounding into FP8
// steps (1/16 of an e4m3 element). One rank against itself with half its initial weights moved
// by one ulp (the probe in model/float8_linear_test.cpp): the third step's gradient norm 2.9e-3
// apart, its loss 6.7e-5 (llama-tiny, tensorwise; gpt2-tiny delayed 6.2e-4). Layouts differ from
// one rank by that f32 rounding after their first step, so those steps get bf16's bounds; the
// first step, from the same weights, keeps f32's, and is where a wrong amax group shows (a
// weight's amax left unreduced over tp: the first loss 1.2e-4 apart). Power-of-two scales
// (blockwise's, and fp8.pow2_scales) do not move with the last bits: those cells keep f32's
// bounds throughout.
//
// Delayed scaling's first amaxes (tests/layout_cell.cpp's expect_same_first_amaxes): in f32 a few ulps apart at most
// (bound 1e-6, 8 ulps); in bf16 the activations and gradients differ by bf16's roundings
// (above), and amaxes by up to 2.5% (measured, tp 2); bound 0.1, a third of a wrong group's.
EquivalenceBounds equivalence_bounds(DType precision, Float8Scaling scaling, int cp) {
  const bool scale_moves_with_last_bits = scaling == Float8Scaling::tensorwise || scaling == Float8Scaling::delayed;
  if (precision != DType::f32)
    return {.first_loss = 1e-3, .losses = 1e-3, .first_norm = 1e-2, .norms = 1e-2, .parameters = 1e-2,
            .first_amaxes = 0.1};
  // Under context parallelism the first step is not free of f32 rounding either: ring attention
  // sums in another order before attention's output projection quantizes. There the first loss
  // is measured 9.3e-7 apart (gpt2, tensorwise), and 8.9e-6 to 6.1e-5 with an activation's amax
  // left unreduced over cp: bound 3e-6. Its first norm (1.6e-4 against 4.9e-4 to 2.2e-3) tells
  // the two apart too narrowly to bound; the delayed cells' amax check covers cp's group.
  if (scale_moves_with_last_bits && cp > 1)
    return {.first_loss = 3e-6, .losses = 1e-3, .first_norm = 1e-2, .norms = 1e-2, .parameters = 1e-2,
            .first_amaxes = 1e-6};
  // Tensorwise's first backward is not free of f32 rounding under tp either: a LayerNorm's input
  // gradient sums the column-parallel layers' pieces over the group in another order, an ulp apart
  // here and there, and where that ulp is an output gradient's amax its scale moves and with it
  // the tensor's FP8 rounding. Measured first norms 3e-9 to 2e-7, and 1.3e-5 (gpt2, dp 2 × tp 2
  // with sp, two micro-batches a rank, on an AVX-512 EPYC: the data decide where an amax lands);
  // a column-parallel gradient's amax left unreduced over tp moves it 6.8e-5 to 6.3e-3. Bound
  // 3e-5. Delayed scaling's first step scales by 1, from no history: f32's bound.
  if (scale_moves_with_last_bits)
    return {.first_loss = 2e-7, .losses = 1e-3, .first_norm = scaling == Float8Scaling::tensorwise ? 3e-5 : 4e-7,
            .norms = 1e-2, .parameters = 1e-2, .first_amaxes = 1e-6};
  return {.first_loss = 2e-7, .losses = 2e-7, .first_norm = 4e-7, .norms = 1e-5, .parameters = 2e-4,
          .first_amaxes = 1e-6};
}

double relative_difference(double a, double b) { return std::fabs(a - b) / std::fabs(b); }

double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, relative_difference(a[i], b[i]));
  return worst;
}

std::vector<TensorDifference> parameter_differences(const FlatTensors& reference, const FlatTensors& part,
                                                    const std::function<bool(const ParamInfo&)>& include) {
  double reference_largest = 0;
  for (const ParamInfo& p : reference.layout().params())
    for (const float x : host_values<float>(reference.unpadded(p)))
      reference_largest = std::max(reference_largest, static_cast<double>(std::fabs(x)));
  std::vector<TensorDifference> differences;
  for (const ParamInfo& p : part.layout().params()) {
    if (include && !include(p)) continue;
    const std::vector<float> mine = host_values<float>(part.unpadded(p));
    const std::vector<float> expected = host_values<float>(reference.unpadded(p.name));
    double largest = 0;
    for (const ParamInfo::Run& run : p.runs())
      for (int64_t i = 0; i < run.count; ++i)
        largest = std::max(largest, static_cast<double>(std::fabs(mine[static_cast<size_t>(run.local + i)] -
                                                                   expected[static_cast<size_t>(run.global + i)])));
    differences.push_back({p.name, largest / reference_largest});
  }
  return differences;
}

}  // namespace dt
