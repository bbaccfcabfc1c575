#include "tests/testing.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace dt::testing {

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  path_ = std::filesystem::temp_directory_path() /
          str("dtrain_test_", ::getpid(), "_", counter.fetch_add(1));
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

int run_reference_script(const std::string& script, const std::string& args) {
  const std::string command =
      str("/usr/bin/python3 ", DTRAIN_SOURCE_DIR, "/tests/reference/", script, " ", args, " 2>&1");
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

CommandResult run_dtrain(const std::string& args) {
  const std::string command = str(DTRAIN_BINARY_DIR, "/dtrain ", args, " 2>&1");
  CommandResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  DT_CHECK(pipe != nullptr, "popen failed for ", command);
  char chunk[4096];
  while (const size_t n = std::fread(chunk, 1, sizeof chunk, pipe)) result.output.append(chunk, n);
  const int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

double normalized_max_error(const Tensor& actual, const Tensor& expected, double floor) {
  DT_CHECK(actual.numel() == expected.numel() && actual.dtype == DType::f32 && expected.dtype == DType::f32,
           actual.describe(), " vs ", expected.describe());
  const float* a = actual.ptr<float>();
  const float* b = expected.ptr<float>();
  double max_diff = 0, scale = floor;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    max_diff = std::isnan(d) ? INFINITY : std::max(max_diff, d);
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return max_diff / scale;
}

}  // namespace dt::testing
