// One cell of a parallel layout's equivalence matrix: dp × tp × pp ranks (the world of an
// mpirun), with expert parallelism over the dp × cp ones, ZeRO, sequence parallelism,
// recomputation, a precision and a pipeline schedule,
// trained for a few steps beside the one-rank reference, which every rank trains itself on the
// whole global batch so that the comparison needs no files. Losses, gradient norms and every
// parameter a rank holds are compared with the reference at the same places of the whole model,
// within the bounds of parallel/equivalence.h.
// Used by parallel/tensor/tensor_parallel_test.cpp and parallel/pipeline/pipeline_parallel_test.cpp.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/float8_recipe.h"
#include "model/recompute.h"

namespace dt::testing {

struct LayoutCell {
  // gpt2 (tied), llama (untied), llama_tied, moe (llama's block with experts), olmoe (OLMoE's)
  std::string family;
  DType precision = DType::f32;
  int dp = 1, zero = 0;
  bool sp = false;
  Recompute recompute = Recompute::none;
  int pp = 1;                    // the tp size is what is left of the world
  int cp = 1;                    // context parallelism: each sequence over cp ranks
  bool zigzag = true;            // its chunks zig-zag (else plain)
  bool padded = false;           // a length that the chunks do not divide: padded inside
  std::string schedule = "1f1b";  // with pp > 1
  int virtual_stages = 1;
  int ep = 1;  // expert parallelism: the experts over ep of the dp × cp ranks
  // FP8 training's recipe, tiles of 4 for blockwise: every piece of the test models' weights, and
  // every context-parallel chunk (12 tokens at cp 2), takes them.
  Float8Scaling fp8 = Float8Scaling::none;
  // Quantization-aware training's format (train.qat): "none", "int8", "q8_0" or "q4_0". Only the
  // memory cells (plan/run_memory_test.cpp) train with it.
  std::string qat = "none";
  bool qat_activations = false;  // and the linear layers' inputs in int8
  // Micro-batches per dp rank and step, each run of the cell; under pp the schedule's count.
  std::vector<int> accumulations = {1, 2};
};

// The cell's name:
// family_precision_dpD_zeroS[_sp][_recompute][_ppP_schedule[_vV]][_cpC[_plain][_padded]][_epE][_fp8R][_qatF[_activations]].
std::string cell_name(const LayoutCell& cell);

// How GoogleTest prints a cell: its name.
inline void PrintTo(const LayoutCell& cell, std::ostream* os) { *os << cell_name(cell); }

// Runs the cell in this process's MPI world (gtest expectations).
void expect_layout_matches_one_rank(const LayoutCell& cell);

}  // namespace dt::testing
