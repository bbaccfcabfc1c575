// AdamW over a model's flat parameter buffer, with decoupled weight decay chosen per tensor.
//
// The moments m and v are flat buffers with the parameters' layout (tag optimizer_state).
// Weight decay applies to matrices; never to biases or norm gains; to the token and position
// embeddings only when decay_embeddings is set (GPT-2 and llm.c do not decay them).
#pragma once

#include <cstdint>

#include "kernels/adamw.h"
#include "model/parameters.h"

namespace dt {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  bool decay_embeddings = false;

  // Throws dt::Error listing every field out of range (betas in [0, 1), eps > 0, decay >= 0).
  void validate() const;
};

// Whether `config` decays parameter p (above), and the kernel's settings for one update: the
// config's betas, eps and weight decay with learning rate lr, gradient scale and update count.
// AdamW below and ZeRO's sharded optimizer (parallel/data_parallel.h) share them.
bool adamw_decays(const AdamWConfig& config, const ParamInfo& p);
kernels::AdamWStep adamw_step(const AdamWConfig& config, float lr, float grad_scale, int64_t step);

class AdamW {
 public:
  // The moments live on `device`, beside the parameters they update, accounted under `tag`
  // (a host copy made to save or load a ZeRO run's state is workspace, not optimizer state).
  AdamW(const ParameterLayout& layout, AdamWConfig config, Device device = Device::cpu,
        MemTag tag = MemTag::optimizer_state);

  // One update with learning rate lr, every gradient multiplied by grad_scale first (the
  // clipping coefficient). Reads grads; updates params, m and v (shown elements only: padding
  // and gaps stay zero). Two passes over the flat buffers, one launch each on the GPU.
  void step(FlatTensors& params, const FlatTensors& grads, float lr, float grad_scale);

  bool decays(const ParamInfo& p) const;
  int64_t steps_taken() const { return steps_taken_; }
  // Resuming from a checkpoint: the bias corrections continue from this many updates.
  void restore_steps_taken(int64_t steps) { steps_taken_ = steps; }
  const AdamWConfig& config() const { return config_; }
  FlatTensors& m() { return m_; }
  FlatTensors& v() { return v_; }
  const FlatTensors& m() const { return m_; }
  const FlatTensors& v() const { return v_; }

 private:
  AdamWConfig config_;
  FlatTensors m_, v_;
  // The parameters' ranges of the flat buffers, with weight decay and without: one update each.
  std::vector<kernels::FlatRange> decayed_, not_decayed_;
  int64_t steps_taken_ = 0;
};

}  // namespace dt
