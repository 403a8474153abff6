// The deadline rule: timeout_of_seconds (a user's setting in seconds, checked once for every
// front end) and Communicator::set_timeout (the deadline itself).
#include <cmath>
#include <cstdint>

#include "cpattn/communicator.h"
#include "cpattn/error.h"

namespace cpattn {

std::chrono::milliseconds timeout_of_seconds(double seconds, std::string_view name) {
  CPATTN_CHECK(
      std::isfinite(seconds) && seconds >= kMinTimeoutSeconds && seconds <= kMaxTimeoutSeconds,
      ErrorCode::kInvalidArgument, name, " must be in [", kMinTimeoutSeconds, ", ",
      kMaxTimeoutSeconds, "] seconds (every wait on another rank has a deadline), got ", seconds);
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000.0)));
}

void Communicator::set_timeout(std::chrono::milliseconds timeout) {
  constexpr auto kMaxMs = static_cast<int64_t>(kMaxTimeoutSeconds * 1000.0);
  CPATTN_CHECK(timeout.count() >= 1 && timeout.count() <= kMaxMs, ErrorCode::kInvalidArgument,
               "set_timeout: a deadline must be in [1, ", kMaxMs,
               "] ms (every wait on another rank has one), got ", timeout.count(), " ms");
  timeout_ = timeout;
}

}  // namespace cpattn
