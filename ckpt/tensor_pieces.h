// How a tensor is saved in pieces, and read back from pieces saved under any layout.
//
// A checkpoint names every tensor by its parameter's name in the whole model, and each piece by
// where it lies in the whole tensor, viewed as (rows, row length) — 1-D tensors as one column:
//
//   PREFIX                      the whole tensor
//   PREFIX[B:E]                 its elements B to E, row-major (a ZeRO part; rows of a
//                               tensor-parallel rank's row split)
//   PREFIX[R0:R1,C0:C1]         rows R0 to R1 of columns C0 to C1, row-major (a tensor-parallel
//                               rank's columns: the row-parallel layers' weights)
//
// A rank saves the elements it owns (model/parameters.h: a copy several tensor-parallel ranks
// hold is saved once, by its owner) and reads, for its own slice of each tensor, every saved
// piece that overlaps it — only those, whatever the layout that saved them. The pieces of one
// save do not overlap; the reader checks that they cover the slice and names what is missing.
#pragma once

#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "core/tensor.h"
#include "model/parameters.h"

namespace dt::ckpt {

struct NamedPiece {
  std::string name;
  Tensor values;  // f32, host: a view of the values given
};

// The pieces that save elements [begin, begin + values.numel()) of this rank's tensor p (its
// unpadded elements, flat; `values` holds them, f32 on the host) under PREFIX, in the whole
// tensor's coordinates; elements p holds as a copy of another rank's are left out.
std::vector<NamedPiece> saved_pieces(const std::string& prefix, const ParamInfo& p, int64_t begin, Tensor values);

// Fills `dest` (this rank's tensor p, unpadded, f32 on the host) from the pieces of PREFIX among
// `names` (the checkpoint's tensors) that overlap it. Throws dt::Error naming the tensor and the
// elements no piece holds.
void read_slice(const Checkpoint& checkpoint, const std::vector<std::string>& names, const std::string& prefix,
                const ParamInfo& p, Tensor dest);

}  // namespace dt::ckpt
