// Errors a person can act on.
//
// dt::Error is the one user-facing error type. Its message says what failed, with the values,
// and what to do; callers that add meaning on the way up prepend context ("while loading
// checkpoint X: tensor Y: ..."). It is caught once, in main, printed, and the exit status is
// non-zero.
//
// DT_CHECK is for internal invariants: always on (never assert, which vanishes under NDEBUG),
// it evaluates its condition once and reports the statement, function and file:line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dt {

// Concatenates any streamable values into a string: str("n_head = ", 12).
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

class Error : public std::exception {
 public:
  explicit Error(std::string message) : message_(std::move(message)) { rebuild(); }

  // Prepends a level of context: e.what() becomes "<context>: <previous what()>".
  Error& add_context(std::string_view context);

  const char* what() const noexcept override { return what_.c_str(); }
  // The innermost message, without context.
  const std::string& message() const { return message_; }
  const std::vector<std::string>& context() const { return context_; }

 private:
  void rebuild();
  std::string message_;
  std::vector<std::string> context_;  // outermost first
  std::string what_;
};

// An error every rank of a job meets alike, before they communicate: a run configuration or its
// inputs that are wrong. Under a launcher only the first rank prints it (cli/main.cpp).
class ConfigError : public Error {
 public:
  using Error::Error;
};

// Runs f(); if it throws dt::Error, adds `context` and rethrows.
template <typename F>
decltype(auto) with_context(std::string_view context, F&& f) {
  try {
    return f();
  } catch (Error& e) {
    e.add_context(context);
    throw;
  }
}

[[noreturn]] void check_failed(const char* statement, const std::string& detail, const char* function,
                               const char* file, int line);

}  // namespace dt

#define DT_CHECK(condition, ...)                                                              \
  do {                                                                                        \
    if (!(condition)) [[unlikely]]                                                            \
      ::dt::check_failed(#condition, ::dt::str("" __VA_OPT__(, ) __VA_ARGS__), __func__, __FILE__, \
                         __LINE__);                                                           \
  } while (0)
