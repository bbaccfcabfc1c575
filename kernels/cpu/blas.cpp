#include "kernels/cpu/blas.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

// OpenBLAS's own entry points for its dynamic-architecture build (exported by libopenblas.so).
extern "C" {
char* openblas_get_corename(void);
void gotoblas_dynamic_init(void);
void gotoblas_dynamic_quit(void);
}

namespace dt::kernels::cpu {

namespace {

bool cpu_has_avx512_skylakex_set() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

// Kernel sets OpenBLAS falls back to when it does not recognise the CPU.
bool is_generic_fallback(const char* core) {
  return std::strcmp(core, "Prescott") == 0 || std::strcmp(core, "Core2") == 0 || std::strcmp(core, "Nehalem") == 0;
}

}  // namespace

void ensure_blas_ready() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
    if (!cpu_has_avx512_skylakex_set() || !is_generic_fallback(openblas_get_corename())) return;
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 0);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
  });
}

std::string blas_core_name() {
  ensure_blas_ready();
  return openblas_get_corename();
}

}  // namespace dt::kernels::cpu
