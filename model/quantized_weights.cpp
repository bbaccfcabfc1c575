#include "model/quantized_weights.h"

#include "core/error.h"

namespace dt {

bool is_quantized_weight(const ParamInfo& p) {
  return p.is_matrix && !p.is_expert && p.name != "wte" && p.name != "wpe";
}

std::string weights_not_in_blocks(const ParameterLayout& layout, kernels::WeightFormat format) {
  const int64_t block = kernels::weight_format_block(format);
  std::string misfits;
  for (const ParamInfo& p : layout.params()) {
    if (!is_quantized_weight(p) || p.shape[1] % block == 0) continue;
    misfits += str(misfits.empty() ? "" : ", ", p.name, " (", p.shape[0], " x ", p.shape[1], ")");
  }
  return misfits;
}

void check_quantizable(const ParameterLayout& layout, kernels::WeightFormat format) {
  if (layout.config().moe.experts > 0)
    throw Error(str("quantizing to ", kernels::weight_format_name(format), ": the experts' weights are not quantized "
                    "yet; this model has experts"));
  if (const std::string misfits = weights_not_in_blocks(layout, format); !misfits.empty())
    throw Error(str(kernels::weight_format_name(format), " quantizes rows in blocks of ",
                    kernels::weight_format_block(format), ", and these weights' rows are not a multiple of that: ",
                    misfits, "; choose int8 (per output channel), or a model whose dimensions are multiples of 32"));
}

void fake_quantize_weights(FlatTensors& params, kernels::WeightFormat format) {
  const ParameterLayout& layout = params.layout();
  check_quantizable(layout, format);
  for (const ParamInfo& p : layout.params()) {
    if (!is_quantized_weight(p)) continue;
    const Tensor w = params.unpadded(p);
    const std::span<float> values(w.ptr<float>(), static_cast<size_t>(w.numel()));
    kernels::fake_quantize(format, values, p.shape[0], values);
  }
}

}  // namespace dt
