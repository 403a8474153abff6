// Names of cpattn error codes.
#include "cpattn/error.h"

namespace cpattn {

const char* error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kShapeMismatch:
      return "shape_mismatch";
    case ErrorCode::kStateMismatch:
      return "state_mismatch";
    case ErrorCode::kRecomputeDiverged:
      return "recompute_diverged";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kPeerFailed:
      return "peer_failed";
    case ErrorCode::kCommunication:
      return "communication";
    case ErrorCode::kIo:
      return "io";
    case ErrorCode::kInternal:
      return "internal";
    case ErrorCode::kRankDisagreement:
      return "rank_disagreement";
    case ErrorCode::kResourceExhausted:
      return "resource_exhausted";
    case ErrorCode::kNumeric:
      return "numeric";
    case ErrorCode::kInterrupted:
      return "interrupted";
  }
  return "unknown";
}

}  // namespace cpattn
