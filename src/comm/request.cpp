// Request: the backend-independent part of a pending isend/irecv (deadline, idempotent wait,
// cancel-on-unwind).
#include <exception>

#include "cpattn/communicator.h"
#include "cpattn/error.h"

namespace cpattn {

namespace {
// Finishes a Request that is being dropped: waits unless the stack is unwinding or a wait
// already failed, in which case the peer may never come and the operation is cancelled.
void finish_dropped(detail::RequestImpl& impl, std::chrono::milliseconds timeout,
                    bool failed) noexcept {
  if (failed || std::uncaught_exceptions() > 0) {
    impl.cancel();
    return;
  }
  try {
    impl.wait(std::chrono::steady_clock::now() + timeout);
  } catch (...) {
    // Reported by whichever rank failed; the buffer must still be released.
    impl.cancel();
  }
}
}  // namespace

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    if (impl_ && !done_) finish_dropped(*impl_, timeout_, failed_);
    impl_ = std::move(other.impl_);
    timeout_ = other.timeout_;
    bytes_ = other.bytes_;
    done_ = other.done_;
    failed_ = other.failed_;
  }
  return *this;
}

Request::~Request() {
  if (impl_ && !done_) finish_dropped(*impl_, timeout_, failed_);
}

size_t Request::wait() {
  CPATTN_CHECK(impl_ != nullptr, ErrorCode::kInvalidArgument,
               "Request::wait: the request is empty (default-constructed or moved from)");
  if (done_) return bytes_;
  try {
    bytes_ = impl_->wait(std::chrono::steady_clock::now() + timeout_);
  } catch (...) {
    failed_ = true;
    throw;
  }
  done_ = true;
  return bytes_;
}

bool Request::test() {
  CPATTN_CHECK(impl_ != nullptr, ErrorCode::kInvalidArgument,
               "Request::test: the request is empty (default-constructed or moved from)");
  if (done_) return true;
  bool complete = false;
  try {
    complete = impl_->test();
    // A completed operation returns its byte count without blocking.
    if (complete) bytes_ = impl_->wait(std::chrono::steady_clock::now());
  } catch (...) {
    failed_ = true;
    throw;
  }
  done_ = complete;
  return complete;
}

}  // namespace cpattn
