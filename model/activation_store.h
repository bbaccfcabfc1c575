// The activation memory of a stage (model/stage.h), in three pools:
//
//   kept     what forward keeps for backward, one buffer per micro-batch in flight (tag
//            activations). A schedule holds several micro-batches' at once (pipeline
//            parallelism's 1F1B holds up to the number of stages) and releases each when its
//            backward is done; a released buffer is reused by the next micro-batch, so a step
//            allocates nothing once the first has run.
//   shared   activations that one micro-batch at a time needs, shared by every block: those a
//            recomputation policy reruns in backward (tag activations).
//   scratch  backward's working gradients, shared by every block (tag workspace).
//
// Each pool is a list of regions laid out once for the largest micro-batch (max_rows rows, or
// fewer for a region that holds a part of the rows: sequence parallelism's share of the
// sequence), each a (rows, width) matrix of one dtype starting on a cache line, viewed with the
// current micro-batch's rows. The same layout gives the bytes a plan predicts and the bytes allocated.
#pragma once

#include <cstdint>
#include <map>

#include "core/buffer.h"
#include "core/tensor.h"

namespace dt {

enum class ActivationPool { kept, shared, scratch };

struct ActivationRegion {
  ActivationPool pool = ActivationPool::kept;
  int64_t offset = 0;  // bytes from the start of the pool's buffer
  int64_t width = 0;   // elements per row
  DType dtype = DType::f32;
};

class RegionLayout {
 public:
  RegionLayout(ActivationPool pool, int64_t max_rows) : pool_(pool), max_rows_(max_rows) {}
  // A new region of `width` elements per row, for max_rows rows or `rows` when given.
  ActivationRegion add(int64_t width, DType dtype, int64_t rows = -1);
  int64_t bytes() const { return bytes_; }

 private:
  ActivationPool pool_;
  int64_t max_rows_;
  int64_t bytes_ = 0;
};

class ActivationStore {
 public:
  // Allocates the shared and scratch buffers and `reserved` kept ones, so that the memory of that
  // many micro-batches in flight is taken at once (a check before a run counts it); hold()
  // allocates more when more are held.
  ActivationStore(int64_t kept_bytes, int64_t shared_bytes, int64_t scratch_bytes, Device device, int reserved);

  // Micro-batch k's kept buffer: hold() makes it (a released one reused), release() gives it back.
  void hold(int k);
  void release(int k);
  bool held(int k) const { return kept_.count(k) != 0; }
  // Region r viewed as (rows, width): micro-batch k's where r is kept.
  Tensor view(int k, const ActivationRegion& r, int64_t rows) const;

 private:
  int64_t kept_bytes_;
  Device device_;
  std::map<int, Buffer> kept_;
  std::vector<Buffer> released_;
  Buffer shared_, scratch_;
};

}  // namespace dt
