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

// Propagation, inside a function that returns any Result: the failed Result's error is returned
// as it is (to add context, write the `if` and the Error by hand).
//
//   TOPOSCHED_RETURN_IF_ERROR(WriteFile(path));          // a Status, or any Result
//   TOPOSCHED_ASSIGN_OR_RETURN(auto shape, NodeShape::Make(type));   // shape is the value
#define TOPOSCHED_RETURN_IF_ERROR(expr)                             \
  do {                                                              \
    if (auto toposched_result_ = (expr); !toposched_result_.ok()) { \
      return ::toposched::Error{toposched_result_.error()};         \
    }                                                               \
  } while (false)

#define TOPOSCHED_CONCAT_INNER_(a, b) a##b
#define TOPOSCHED_CONCAT_(a, b) TOPOSCHED_CONCAT_INNER_(a, b)
#define TOPOSCHED_ASSIGN_OR_RETURN(lhs, expr) \
  TOPOSCHED_ASSIGN_OR_RETURN_IMPL_(TOPOSCHED_CONCAT_(toposched_result_, __LINE__), lhs, expr)
#define TOPOSCHED_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                     \
  if (!tmp.ok()) return ::toposched::Error{tmp.error()}; \
  lhs = std::move(tmp).value()

#endif  // TOPOSCHED_BASE_RESULT_H_
