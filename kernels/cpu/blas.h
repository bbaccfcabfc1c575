// OpenBLAS set-up for the CPU kernels: call ensure_blas_ready() before the first BLAS call.
//
// Debian 12's OpenBLAS 0.3.21 picks its kernels by CPU model, and does not know CPUs newer
// than itself (Sapphire and Emerald Rapids: family 6, models 143 and 207). It then falls back
// to its Prescott (SSE3) kernels, which run sgemm at about a fifth of the AVX-512 kernels'
// speed (measured on this project's CI machine: 64 against 300 GFLOP/s on 2 cores at
// 2048^3). When the user has not set OPENBLAS_CORETYPE and the CPU has AVX-512 F, BW, DQ and
// VL, we select the SkylakeX kernels and rerun OpenBLAS's kernel selection. A user-set
// OPENBLAS_CORETYPE is always respected. Thread-safe; does its work once.
#pragma once

#include <string>

namespace dt::kernels::cpu {

void ensure_blas_ready();
// OpenBLAS's name for the kernels in use ("SkylakeX"), for logs and `dtrain bench`.
std::string blas_core_name();

}  // namespace dt::kernels::cpu
