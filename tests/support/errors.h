// Capturing the cpattn::Error a call throws, for tests that check its code and message.
#pragma once

#include <gtest/gtest.h>

#include <functional>

#include "cpattn/error.h"

namespace cpattn::testing {

/// The cpattn::Error that fn() throws. When it throws none, records a test failure and returns
/// Error(kInternal, "no cpattn::Error was thrown"); other exceptions propagate.
inline Error error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a cpattn::Error";
  return Error(ErrorCode::kInternal, "no cpattn::Error was thrown");
}

}  // namespace cpattn::testing
