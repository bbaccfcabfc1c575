// cuBLASLt opened at run time: the toolkit's library opens and resolves every function without a
// GPU (the GEMM tests need one), reports the version the headers name, and a library that cannot
// be opened is an error naming the file and the fix. `dtrain` does not load it until a GEMM runs
// on the GPU (cli/cli_test.cpp).
#include "kernels/cuda/cublaslt_library.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace dt::kernels::cuda {
namespace {

TEST(CublasLtLibrary, TheToolkitsLibraryOpensWithItsHeadersMajorVersion) {
  const CublasLtLibrary& library = cublaslt();
  EXPECT_EQ(library.version() / 10000, static_cast<size_t>(CUBLAS_VER_MAJOR));
  EXPECT_STREQ(library.status_name(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
}

TEST(CublasLtLibrary, ALibraryThatCannotBeOpenedNamesTheFileAndTheFix) {
  try {
    load_cublaslt("libcublasLt.so.999");
    FAIL() << "a missing library opened";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cannot load cuBLASLt, which GEMMs on the GPU need: libcublasLt.so.999"),
              std::string::npos) << message;
    EXPECT_NE(message.find("or put its directory on LD_LIBRARY_PATH"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace dt::kernels::cuda
