// cuBLASLt as the CUDA kernels use it (kernels/cuda/cublaslt.h): the handle, the workspace,
// the algorithm cache and the error check.
#include "kernels/cuda/cublaslt.h"

#include <array>
#include <bit>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "core/buffer.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "kernels/cuda/cublaslt_library.h"

namespace dt::kernels::cuda {

namespace {

// cuBLASLt's recommended workspace on Hopper (Ampere needs less); split-K and the larger tiles
// need it. Allocated once and reused by every GEMM: they all run on the compute stream, in
// order, so one never overwrites another's workspace while it runs.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// Handle and workspace live for the process: destroying them after main returns could run
// after the CUDA runtime has shut down.
cublasLtHandle_t handle() {
  static const cublasLtHandle_t h = [] {
    cublasLtHandle_t created = nullptr;
    DT_CUBLAS_CHECK(cublaslt().create(&created), std::string("creating the cuBLASLt handle"));
    return created;
  }();
  return h;
}

void* workspace() {
  static Buffer* const buffer = new Buffer(kWorkspaceBytes, MemTag::workspace, Device::cuda, /*zero=*/false);
  return buffer->data();
}

const char* type_name(cudaDataType_t type) {
  switch (type) {
    case CUDA_R_32F:
      return "f32";
    case CUDA_R_64F:
      return "f64";
    case CUDA_R_16BF:
      return "bf16";
    case CUDA_R_16F:
      return "f16";
    case CUDA_R_8F_E4M3:
      return "f8e4m3";
    case CUDA_R_8F_E5M2:
      return "f8e5m2";
    default:
      return "other";
  }
}

// The largest power of two (at most 256, cuBLASLt's default assumption) dividing the address.
uint32_t alignment_bytes(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  if (address == 0) return 256;
  return static_cast<uint32_t>(std::min<uintptr_t>(uintptr_t{1} << std::countr_zero(address), 256));
}

// Everything the heuristic's choice depends on.
using AlgoKey = std::array<int64_t, 24>;

AlgoKey key_of(const GemmProblem& p) {
  int device = 0;
  DT_CUDA_CHECK(cudaGetDevice(&device));
  return {device,
          p.compute,
          p.a.type, p.a.rows, p.a.cols, p.a.ld, p.a.transposed, alignment_bytes(p.a.data),
          p.b.type, p.b.rows, p.b.cols, p.b.ld, p.b.transposed, alignment_bytes(p.b.data),
          p.d.type, p.d.rows, p.d.cols, p.d.ld, alignment_bytes(p.d.data),
          p.bias != nullptr, p.bias_type, p.bias ? alignment_bytes(p.bias) : 0,
          p.a_scale != nullptr, p.b_scale != nullptr};
}

// Owners of the cuBLASLt descriptors of one call.
struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublaslt().desc_destroy(d); }
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const { cublaslt().layout_destroy(l); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublaslt().preference_destroy(p); }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, DescDeleter>;

struct Descriptors {
  MatmulDesc desc;
  Layout a, b, d;
};

cudaDataType_t scale_type(cublasComputeType_t compute) {
  return compute == CUBLAS_COMPUTE_64F ? CUDA_R_64F : CUDA_R_32F;
}

Layout layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, const GemmProblem& p) {
  cublasLtMatrixLayout_t l = nullptr;
  DT_CUBLAS_CHECK(cublaslt().layout_create(&l, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld),
                  describe(p));
  return Layout(l);
}

template <typename V>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const V& value, const GemmProblem& p) {
  DT_CUBLAS_CHECK(cublaslt().desc_set_attribute(desc, attribute, &value, sizeof(value)), describe(p));
}

Descriptors descriptors(const GemmProblem& p) {
  cublasLtMatmulDesc_t desc = nullptr;
  DT_CUBLAS_CHECK(cublaslt().desc_create(&desc, p.compute, scale_type(p.compute)), describe(p));
  Descriptors d{.desc = MatmulDesc(desc),
                .a = layout(p.a.type, p.a.rows, p.a.cols, p.a.ld, p),
                .b = layout(p.b.type, p.b.rows, p.b.cols, p.b.ld, p),
                .d = layout(p.d.type, p.d.rows, p.d.cols, p.d.ld, p)};
  const cublasOperation_t transa = p.a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t transb = p.b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  set(desc, CUBLASLT_MATMUL_DESC_TRANSA, transa, p);
  set(desc, CUBLASLT_MATMUL_DESC_TRANSB, transb, p);
  if (p.bias) {
    set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS, p);
    set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias, p);
    set(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(p.bias_type), p);
  }
  if (p.a_scale) set(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, p.a_scale, p);
  if (p.b_scale) set(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, p.b_scale, p);
  return d;
}

// The heuristic's first choice for the problem, or none.
std::optional<cublasLtMatmulAlgo_t> choose_algo(const GemmProblem& p, const Descriptors& d) {
  cublasLtMatmulPreference_t pref_raw = nullptr;
  DT_CUBLAS_CHECK(cublaslt().preference_create(&pref_raw), describe(p));
  const Preference pref(pref_raw);
  const auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attribute, auto value) {
    DT_CUBLAS_CHECK(cublaslt().preference_set_attribute(pref.get(), attribute, &value, sizeof(value)), describe(p));
  };
  set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(kWorkspaceBytes));
  // Views into flat buffers start wherever the previous tensor ended: tell the heuristic the
  // alignment each pointer really has (it assumes 256 bytes otherwise).
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_bytes(p.a.data));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_bytes(p.b.data));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_bytes(p.d.data));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_bytes(p.d.data));
  // Split-K only with parts kept in the compute type and summed in a separate, ordered step
  // (cublaslt.h: determinism, and one rounding of a 16-bit D).
  set_pref(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublaslt().algo_get_heuristic(handle(), d.desc.get(), d.a.get(), d.b.get(),
                                                               d.d.get(), d.d.get(), pref.get(), 1, &result, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) return std::nullopt;
  DT_CUBLAS_CHECK(status, describe(p));
  return result.algo;
}

// The cached choice for the problem, asking the heuristic the first time (the answer "none"
// is cached too, so a caller's fallback costs no repeated query).
std::optional<cublasLtMatmulAlgo_t> cached_algo(const GemmProblem& p, const Descriptors& d) {
  static std::mutex mutex;
  static std::map<AlgoKey, std::optional<cublasLtMatmulAlgo_t>> cache;
  const AlgoKey key = key_of(p);
  std::lock_guard<std::mutex> lock(mutex);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const std::optional<cublasLtMatmulAlgo_t> algo = choose_algo(p, d);
  cache.emplace(key, algo);
  return algo;
}

}  // namespace

void throw_cublas_error(cublasStatus_t status, const char* call, const std::string& problem, const char* file,
                        int line) {
  throw Error(str(call, " failed: ", cublaslt().status_name(status), " (", cublaslt().status_string(status), ") for ",
                  problem, " at ", file, ":", line));
}

std::string describe(const GemmProblem& p) {
  const auto operand = [](const char* name, const MatrixOperand& m) {
    return str(name, m.transposed ? "^T" : "", " (", m.rows, " x ", m.cols, ", ld ", m.ld, ", ", type_name(m.type),
               ")");
  };
  return str(p.op, ": D (", p.d.rows, " x ", p.d.cols, ", ld ", p.d.ld, ", ", type_name(p.d.type), ") = ",
             p.beta != 0 ? "D + " : "", operand("A", p.a), " @ ", operand("B", p.b),
             p.bias ? str(" + bias (", type_name(p.bias_type), ")") : std::string(),
             p.a_scale ? ", A and B scaled" : "", ", column-major");
}

bool try_gemm(const GemmProblem& p) {
  const Descriptors d = descriptors(p);
  const std::optional<cublasLtMatmulAlgo_t> algo = cached_algo(p, d);
  if (!algo) return false;
  const float alpha32 = static_cast<float>(p.alpha), beta32 = static_cast<float>(p.beta);
  const bool f64 = p.compute == CUBLAS_COMPUTE_64F;
  const void* alpha = f64 ? static_cast<const void*>(&p.alpha) : &alpha32;
  const void* beta = f64 ? static_cast<const void*>(&p.beta) : &beta32;
  DT_CUBLAS_CHECK(cublaslt().matmul(handle(), d.desc.get(), alpha, p.a.data, d.a.get(), p.b.data, d.b.get(), beta,
                                 p.d.data, d.d.get(), p.d.data, d.d.get(), &*algo, workspace(), kWorkspaceBytes,
                                 ::dt::cuda::compute_stream()),
                  describe(p));
  return true;
}

void gemm(const GemmProblem& p) {
  if (!try_gemm(p))
    throw Error(str(describe(p), ": cuBLASLt has no algorithm for this problem on ", ::dt::cuda::device_info().name));
}

}  // namespace dt::kernels::cuda
