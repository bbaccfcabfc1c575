#include "core/shared_library.h"

#include <dlfcn.h>

#include "core/error.h"

namespace dt {

SharedLibrary::SharedLibrary(std::string file, const std::string& what, const std::string& fix)
    : file_(std::move(file)), handle_(dlopen(file_.c_str(), RTLD_NOW | RTLD_LOCAL)) {
  if (handle_ == nullptr) throw Error(str("cannot load ", what, ": ", dlerror(), "; ", fix));
}

void* SharedLibrary::address_of(const char* symbol, const std::string& mismatch) const {
  void* address = dlsym(handle_, symbol);
  if (address == nullptr) throw Error(str(file_, " has no ", symbol, ": ", mismatch));
  return address;
}

}  // namespace dt
