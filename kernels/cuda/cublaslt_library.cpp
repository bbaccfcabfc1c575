#include "kernels/cuda/cublaslt_library.h"

#include "core/error.h"
#include "core/shared_library.h"

namespace dt::kernels::cuda {

std::string cublaslt_library_name() { return str("libcublasLt.so.", CUBLAS_VER_MAJOR); }

CublasLtLibrary load_cublaslt(const std::string& name) {
  const SharedLibrary library(name, "cuBLASLt, which GEMMs on the GPU need",
                              str("install the CUDA ", CUBLAS_VER_MAJOR, " toolkit's cuBLAS (", name,
                                  ") or put its directory on LD_LIBRARY_PATH"));
  const std::string mismatch = str("it is not the cuBLAS these kernels were built with (", CUBLAS_VER_MAJOR, ".",
                                   CUBLAS_VER_MINOR, "); install that version");
  const auto resolve = [&](auto& function, const char* symbol) { library.resolve(function, symbol, mismatch); };
  CublasLtLibrary l{};
  resolve(l.create, "cublasLtCreate");
  resolve(l.matmul, "cublasLtMatmul");
  resolve(l.algo_get_heuristic, "cublasLtMatmulAlgoGetHeuristic");
  resolve(l.desc_create, "cublasLtMatmulDescCreate");
  resolve(l.desc_destroy, "cublasLtMatmulDescDestroy");
  resolve(l.desc_set_attribute, "cublasLtMatmulDescSetAttribute");
  resolve(l.layout_create, "cublasLtMatrixLayoutCreate");
  resolve(l.layout_destroy, "cublasLtMatrixLayoutDestroy");
  resolve(l.preference_create, "cublasLtMatmulPreferenceCreate");
  resolve(l.preference_destroy, "cublasLtMatmulPreferenceDestroy");
  resolve(l.preference_set_attribute, "cublasLtMatmulPreferenceSetAttribute");
  resolve(l.status_name, "cublasLtGetStatusName");
  resolve(l.status_string, "cublasLtGetStatusString");
  resolve(l.version, "cublasLtGetVersion");
  return l;
}

const CublasLtLibrary& cublaslt() {
  static const CublasLtLibrary library = load_cublaslt(cublaslt_library_name());
  return library;
}

}  // namespace dt::kernels::cuda
