// A shared library opened at run time (dlopen) and its functions looked up by name: for the
// libraries a process loads only when it uses them (cuBLASLt for GEMMs on a GPU, libcurl for
// experiment tracking), so that a process that does not pays nothing for them. The handle is
// never closed: the functions stay valid for the process's life.
#pragma once

#include <string>
#include <type_traits>

namespace dt {

class SharedLibrary {
 public:
  // Opens `file` as the dynamic loader finds it; throws dt::Error "cannot load <what>: <the
  // loader's reason>; <fix>".
  SharedLibrary(std::string file, const std::string& what, const std::string& fix);

  // Sets `function` to the library's `symbol`; throws dt::Error "<file> has no <symbol>:
  // <mismatch>" when it has none.
  template <typename Function>
  void resolve(Function& function, const char* symbol, const std::string& mismatch) const {
    function = reinterpret_cast<Function>(address_of(symbol, mismatch));
  }

 private:
  void* address_of(const char* symbol, const std::string& mismatch) const;
  const std::string file_;
  void* handle_;
};

}  // namespace dt
