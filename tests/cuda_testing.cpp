#include "tests/cuda_testing.h"

namespace dt::testing {

OwnedTensor copy_to(const Tensor& t, Device device) {
  Buffer buffer(t.bytes(), MemTag::workspace, device, /*zero=*/false);
  copy_bytes(buffer.data(), device, t.data, t.device, t.bytes());
  Tensor view = buffer.view(t.dtype, t.shape);
  return {std::move(buffer), view};
}

}  // namespace dt::testing
