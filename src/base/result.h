// Result<T>: a value or an error message, for failures caused by input (a user's flags, a catalog
// file, a trace row). Bugs are not reported this way; they fail loudly.
#ifndef TOPOSCHED_BASE_RESULT_H_
#define TOPOSCHED_BASE_RESULT_H_

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace toposched {

struct Error {
  std::string message;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(v_); }
  // REQUIRES: ok().
  const T& value() const& {
    assert(ok());
    return std::get<T>(v_);
  }
  T& value() & {
    assert(ok());
    return std::get<T>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<T>(std::move(v_));
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }
  // REQUIRES: !ok().
  const std::string& error() const {
    assert(!ok());
    return std::get<Error>(v_).message;
  }

 private:
  std::variant<T, Error> v_;
};

// For operations that return nothing but can fail.
struct Ok {};
using Status = Result<Ok>;
inline Status OkStatus() { return Ok{}; }

}  // namespace toposched

#endif  // TOPOSCHED_BASE_RESULT_H_
