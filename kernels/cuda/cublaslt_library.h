// cuBLASLt, opened on first use (dlopen, as cuDNN is: kernels/cuda/cudnn_attention.cpp) rather
// than linked: loading libcublasLt costs a process about 210 MB of resident memory, which a run
// on the CPU, or `dtrain --help`, has no use for. The functions kernels/cuda/cublaslt.cu calls,
// resolved from the library matching the headers' major version (libcublasLt.so.13), found as
// the dynamic loader finds any library: LD_LIBRARY_PATH, the binary's run path, ldconfig's cache.
//
// Included only by kernels/cuda/. Thread-safe.
#pragma once

#include <cublasLt.h>

#include <string>

namespace dt::kernels::cuda {

struct CublasLtLibrary {
  decltype(&::cublasLtCreate) create;
  decltype(&::cublasLtMatmul) matmul;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic;
  decltype(&::cublasLtMatmulDescCreate) desc_create;
  decltype(&::cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&::cublasLtMatmulDescSetAttribute) desc_set_attribute;
  decltype(&::cublasLtMatrixLayoutCreate) layout_create;
  decltype(&::cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&::cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&::cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) preference_set_attribute;
  decltype(&::cublasLtGetStatusName) status_name;
  decltype(&::cublasLtGetStatusString) status_string;
  decltype(&::cublasLtGetVersion) version;
};

// The library's file name: libcublasLt.so.<the headers' major version>.
std::string cublaslt_library_name();

// The library `file` opened and its functions resolved; throws dt::Error naming the file, the
// loader's reason and the fix when it cannot be opened or lacks one of the functions.
CublasLtLibrary load_cublaslt(const std::string& file);

// load_cublaslt(cublaslt_library_name()), on the first call.
const CublasLtLibrary& cublaslt();

}  // namespace dt::kernels::cuda
