#include "comm/nccl.h"

#include "core/device.h"

namespace dt {

std::string nccl_version() {
#ifdef DTRAIN_WITH_CUDA
  return cuda::nccl_version();
#else
  return "none: this build has no CUDA backend";
#endif
}

std::unique_ptr<Communicator> nccl_world(Communicator& bootstrap) {
  require_device(Device::cuda);
#ifdef DTRAIN_WITH_CUDA
  return cuda::nccl_world(bootstrap);
#else
  (void)bootstrap;
  throw Error("the NCCL backend needs a build with the CUDA backend");
#endif
}

}  // namespace dt
