// What the CPU and CUDA mixture-of-experts kernels must compute the same way, written once for
// kernels/cpu/moe_*.cpp and kernels/cuda/moe_*.cu, which both compile this header (as
// gelu_math.h is for GELU): the order in which experts and assignments rank, and the routing
// weight and its gradient with one order of operations.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DT_MOE_INLINE __host__ __device__ __forceinline__
#else
#define DT_MOE_INLINE inline
#endif

namespace dt::kernels::moe_math {

// Added to the sum of the chosen scores before renormalizing (kernels/moe_route.h).
constexpr double kRenormalizeEpsilon = 1e-20;
// Added to the sum of a row's sigmoid scores before they are normalized into the distribution the
// balance loss reads (kernels/moe_router_loss.h).
constexpr double kBalanceEpsilon = 1e-20;

// Whether value a at index ia ranks before value b at index ib: the larger value first, equal
// values (+0 and -0 included) by the lower index, a NaN after every number. A strict total order
// over distinct indices, so a top-k under it is unique, and a warp's tree reduction finds the
// same one as the CPU's sort. Routing ranks experts by choice value (index: the expert);
// moe_dispatch ranks an expert's assignments by routing weight (index: n * k + j) to decide
// which to keep within its capacity.
template <typename T, typename I>
DT_MOE_INLINE bool ranks_before(T a, I ia, T b, I ib) {
  const bool a_nan = a != a, b_nan = b != b;
  if (a_nan || b_nan) return b_nan && (!a_nan || ia < ib);
  return a > b || (a == b && ia < ib);
}

// The weight of a chosen expert of score g: route_scale * (g / Z), or route_scale * g.
template <typename T>
DT_MOE_INLINE T route_weight(T g, T Z, bool renormalize, T route_scale) {
  return renormalize ? g / Z * route_scale : g * route_scale;
}

// The gradient reaching the chosen score g_j from dweights, dot = sum_i dweights_i g_i.
template <typename T>
DT_MOE_INLINE T route_weight_grad(T dweight, T dot, T Z, bool renormalize, T route_scale) {
  return renormalize ? route_scale * (dweight - dot / Z) / Z : route_scale * dweight;
}

// The balance loss's gradient reaching a sigmoid score, g the loss's gradient on its normalized
// score, dot = sum_j g_j P_j over the row, Z its scores' sum + kBalanceEpsilon.
template <typename T>
DT_MOE_INLINE T balance_sigmoid_grad(T g, T dot, T Z) {
  return (g - dot) / Z;
}

}  // namespace dt::kernels::moe_math
