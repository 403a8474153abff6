// timeout_of_seconds: a user's deadline setting in seconds, checked once for every front end.
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

}  // namespace cpattn
