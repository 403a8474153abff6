// ProcessGroupCommunicator (process_group_communicator.h): Requests over c10d Work objects.
#include "process_group_communicator.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cpattn/backend.h"
#include "cpattn/error.h"

namespace cpattn::torch_binding {

namespace {

// One posted send or receive. Zero-byte messages (barrier signals) travel as one byte, since a
// ProcessGroup cannot send an empty tensor; the caller still sees 0 bytes.
class WorkRequest final : public detail::RequestImpl {
 public:
  WorkRequest(c10::intrusive_ptr<c10d::Work> work, std::unique_ptr<std::byte[]> placeholder,
              std::string what, size_t bytes, std::chrono::milliseconds timeout, std::string rank)
      : work_(std::move(work)),
        placeholder_(std::move(placeholder)),
        what_(std::move(what)),
        bytes_(bytes),
        timeout_(timeout),
        rank_(std::move(rank)) {}
  ~WorkRequest() override { cancel(); }

  bool test() override {
    if (!work_->isCompleted()) return false;
    wait(std::chrono::steady_clock::now());
    return true;
  }

  size_t wait(std::chrono::steady_clock::time_point deadline) override {
    const auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   deadline - std::chrono::steady_clock::now()),
                               std::chrono::milliseconds(1));
    bool completed = false;
    try {
      completed = work_->wait(left);
    } catch (const std::exception& e) {
      fail(e.what());
    }
    if (!completed) fail("the operation was aborted");
    done_ = true;
    return bytes_;
  }

  void cancel() noexcept override {
    if (done_ || !work_) return;
    // A pending gloo operation is withdrawn by abort(); dropping the Work afterwards releases the
    // transport's buffer, so a late message can no longer be written into the caller's memory.
    try {
      if (!work_->isCompleted()) work_->abort();
    } catch (...) {
    }
    work_.reset();
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    const double seconds = std::chrono::duration<double>(timeout_).count();
    if (why.find("imed out") != std::string::npos || why.find("imeout") != std::string::npos) {
      throw Error(ErrorCode::kTimeout, detail::str_cat(rank_, ": timed out after ", seconds,
                                                       " s waiting for ", what_, ": ", why));
    }
    const bool peer_gone = why.find("onnection closed") != std::string::npos ||
                           why.find("onnection reset") != std::string::npos ||
                           why.find("roken pipe") != std::string::npos;
    throw Error(peer_gone ? ErrorCode::kPeerFailed : ErrorCode::kCommunication,
                detail::str_cat(rank_, ": ", what_, " failed: ", why));
  }

  c10::intrusive_ptr<c10d::Work> work_;
  std::unique_ptr<std::byte[]> placeholder_;
  std::string what_;
  size_t bytes_;
  std::chrono::milliseconds timeout_;
  std::string rank_;  // "rank R" (and its ProcessGroup rank in a sub-group)
  bool done_ = false;
};

}  // namespace

ProcessGroupCommunicator::ProcessGroupCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                   std::chrono::milliseconds timeout)
    : group_(std::move(group)) {
  CPATTN_CHECK(group_, ErrorCode::kInvalidArgument, "ProcessGroupCommunicator: no process group");
  rank_ = group_->getRank();
  size_ = group_->getSize();
  members_.resize(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) members_[static_cast<size_t>(r)] = r;
  set_timeout(timeout);
}

ProcessGroupCommunicator::ProcessGroupCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                   std::chrono::milliseconds timeout,
                                                   std::vector<int> members, int rank,
                                                   int tag_namespace)
    : group_(std::move(group)),
      rank_(rank),
      size_(static_cast<int>(members.size())),
      members_(std::move(members)),
      tag_namespace_(tag_namespace) {
  set_timeout(timeout);
}

std::string ProcessGroupCommunicator::label(int rank) const {
  if (tag_namespace_ == 0) return detail::str_cat("rank ", rank);
  return detail::str_cat("rank ", rank, " of a sub-group (process group rank ",
                         members_[static_cast<size_t>(rank)], ")");
}

int ProcessGroupCommunicator::max_tag() const {
  return tag_namespace_ == 0 ? kCollectiveTag : kSubGroupTags / 2;
}

int ProcessGroupCommunicator::wire_tag(int tag) const {
  const int t = tag == kCollective ? max_tag() : tag;
  return tag_namespace_ == 0 ? t : kCollectiveTag + tag_namespace_ * kSubGroupTags + t;
}

std::unique_ptr<Communicator> ProcessGroupCommunicator::do_split(int color, int key) {
  CPATTN_CHECK(tag_namespace_ == 0, ErrorCode::kInvalidArgument,
               "split: a sub-group of a ProcessGroup cannot be split again");
  const backend::SplitGroup sub = backend::plan_split(*this, color, key);
  const int tag_namespace =
      1 + splits_++ * size_ + *std::min_element(sub.members.begin(), sub.members.end());
  CPATTN_CHECK(tag_namespace < kSubGroupNamespaces, ErrorCode::kInvalidArgument,
               "split: a ProcessGroup of ", size_, " ranks has room for ",
               (kSubGroupNamespaces - 1) / size_, " splits, this is split ", splits_);
  std::vector<int> members;
  for (const int m : sub.members) members.push_back(members_[static_cast<size_t>(m)]);
  auto comm = std::unique_ptr<ProcessGroupCommunicator>(
      new ProcessGroupCommunicator(group_, timeout(), std::move(members), sub.rank, tag_namespace));
  return comm;
}

Request ProcessGroupCommunicator::post(bool is_send, std::byte* data, size_t bytes, int peer,
                                       int tag) {
  CPATTN_CHECK(peer >= 0 && peer < size_, ErrorCode::kInvalidArgument, label(rank_), ": ",
               is_send ? "isend destination" : "irecv source", " must be in [0, ", size_, "), got ",
               peer);
  std::unique_ptr<std::byte[]> placeholder;
  std::byte* buffer = data;
  int64_t length = static_cast<int64_t>(bytes);
  if (bytes == 0) {
    placeholder = std::make_unique<std::byte[]>(1);
    buffer = placeholder.get();
    length = 1;
  }
  std::vector<at::Tensor> tensors{at::from_blob(buffer, {length}, at::kByte)};
  const std::string what =
      detail::str_cat(is_send ? "isend to " : "irecv from ", label(peer), " (tag ",
                      tag == kCollective ? std::string("collective") : std::to_string(tag), ", ",
                      bytes, is_send ? " bytes)" : "-byte buffer)");
  const int pg_peer = members_[static_cast<size_t>(peer)];
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = is_send ? group_->send(tensors, pg_peer, wire_tag(tag))
                   : group_->recv(tensors, pg_peer, wire_tag(tag));
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kCommunication,
                detail::str_cat(label(rank_), ": ", what, " could not be posted: ", e.what()));
  }
  return Request(std::make_unique<WorkRequest>(std::move(work), std::move(placeholder), what, bytes,
                                               timeout_, label(rank_)),
                 timeout_);
}

Request ProcessGroupCommunicator::do_isend(std::span<const std::byte> data, int dest, int tag) {
  CPATTN_CHECK(tag >= 0 && tag < max_tag(), ErrorCode::kInvalidArgument,
               "isend: tag must be in [0, ", max_tag(), "), got ", tag);
  // The ProcessGroup only reads a send's buffer.
  return post(true, const_cast<std::byte*>(data.data()), data.size(), dest, tag);
}

Request ProcessGroupCommunicator::do_irecv(std::span<std::byte> data, int src, int tag) {
  CPATTN_CHECK(tag >= 0 && tag < max_tag(), ErrorCode::kInvalidArgument,
               "irecv: tag must be in [0, ", max_tag(), "), got ", tag);
  return post(false, data.data(), data.size(), src, tag);
}

backend::CollectiveChannel ProcessGroupCommunicator::channel() {
  backend::CollectiveChannel ch;
  ch.rank = rank_;
  ch.size = size_;
  ch.memory = &process_memory();
  ch.send = [this](std::span<const std::byte> data, int dest) {
    return post(true, const_cast<std::byte*>(data.data()), data.size(), dest, kCollective);
  };
  ch.recv = [this](std::span<std::byte> data, int src) {
    return post(false, data.data(), data.size(), src, kCollective);
  };
  return ch;
}

void ProcessGroupCommunicator::do_allreduce_sum(std::span<float> data) {
  backend::allreduce_sum(channel(), data);
}
void ProcessGroupCommunicator::do_allreduce_sum(std::span<double> data) {
  backend::allreduce_sum(channel(), data);
}
void ProcessGroupCommunicator::do_all_to_all(std::span<const std::byte> send,
                                             std::span<std::byte> recv) {
  backend::all_to_all(channel(), send, recv);
}
void ProcessGroupCommunicator::do_barrier() { backend::barrier(channel()); }
MemoryCounter& ProcessGroupCommunicator::do_memory() { return process_memory(); }

}  // namespace cpattn::torch_binding
