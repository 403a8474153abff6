// ThreadCommunicator and run_ranks: in-process ranks over a ThreadGroup.
#include "cpattn/thread_communicator.h"

#include <exception>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "comm/thread_group.h"
#include "cpattn/backend.h"
#include "cpattn/error.h"

namespace cpattn {

namespace detail {
namespace {

// Internal tag of the collectives: user tags are >= 0, so they never match it.
constexpr int kCollectiveTag = -1;

class ThreadRequest final : public RequestImpl {
 public:
  ThreadRequest(ThreadGroup& group, const ThreadOp& op) : group_(group), op_(op) {}
  ~ThreadRequest() override { cancel(); }
  ThreadOp& op() { return op_; }

  bool test() override { return group_.test(op_); }
  size_t wait(std::chrono::steady_clock::time_point deadline) override {
    return group_.wait(op_, deadline);
  }
  void cancel() noexcept override { group_.cancel(op_); }

 private:
  ThreadGroup& group_;
  ThreadOp op_;  // queued by address: this object never moves (held by unique_ptr)
};

std::string what_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace
}  // namespace detail

ThreadCommunicator::ThreadCommunicator(detail::ThreadGroup& group, int rank)
    : group_(group), rank_(rank), memory_(MemoryCounter::create(&process_memory())) {}

ThreadCommunicator::ThreadCommunicator(detail::ThreadGroup& group, uint64_t context,
                                       std::vector<int> members, int rank,
                                       std::shared_ptr<MemoryCounter> memory)
    : group_(group),
      context_(context),
      members_(std::move(members)),
      rank_(rank),
      memory_(std::move(memory)) {}

// Tensors and ForwardResults charged to this rank may outlive it (kept after run_ranks returns):
// they share ownership of memory_, so it is freed with the last of them.
ThreadCommunicator::~ThreadCommunicator() {
  if (context_ != 0) group_.release_context(context_);
}

int ThreadCommunicator::do_size() const {
  return members_.empty() ? group_.size() : static_cast<int>(members_.size());
}

int ThreadCommunicator::group_rank(int rank) const {
  return members_.empty() ? rank : members_[static_cast<size_t>(rank)];
}

std::string ThreadCommunicator::label(int rank) const {
  return backend::rank_label(rank, context_ != 0 ? std::optional(group_rank(rank)) : std::nullopt);
}

std::unique_ptr<Communicator> ThreadCommunicator::do_split(int color, int key) {
  const backend::SplitGroup sub = backend::plan_split(*this, color, key);
  // Every member asks for (this context, this split's number, color): one new context.
  const uint64_t context = group_.acquire_context(context_, splits_++, color);
  std::vector<int> members;
  members.reserve(sub.members.size());
  for (int r : sub.members) members.push_back(group_rank(r));
  auto comm = std::unique_ptr<ThreadCommunicator>(
      new ThreadCommunicator(group_, context, std::move(members), sub.rank, memory_));
  comm->set_timeout(timeout_);
  return comm;
}

Request ThreadCommunicator::post(bool is_send, const std::byte* message, std::byte* buffer,
                                 size_t bytes, int peer, int tag) {
  CPATTN_CHECK(peer >= 0 && peer < size(), ErrorCode::kInvalidArgument, label(rank_), ": ",
               is_send ? "isend destination" : "irecv source", " must be in [0, ", size(),
               "), got ", peer);
  detail::ThreadOp op;
  op.is_send = is_send;
  op.context = context_;
  op.owner = group_rank(rank_);
  op.peer = group_rank(peer);
  op.owner_label = rank_;
  op.peer_label = peer;
  op.tag = tag;
  op.message = message;
  op.buffer = buffer;
  op.bytes = bytes;
  op.timeout = timeout_;
  auto impl = std::make_unique<detail::ThreadRequest>(group_, op);
  group_.post(impl->op());
  return Request(std::move(impl), timeout_);
}

Request ThreadCommunicator::do_isend(std::span<const std::byte> data, int dest, int tag) {
  CPATTN_CHECK(tag >= 0, ErrorCode::kInvalidArgument, "isend: tag must be >= 0, got ", tag);
  return post(true, data.data(), nullptr, data.size(), dest, tag);
}

Request ThreadCommunicator::do_irecv(std::span<std::byte> data, int src, int tag) {
  CPATTN_CHECK(tag >= 0, ErrorCode::kInvalidArgument, "irecv: tag must be >= 0, got ", tag);
  return post(false, nullptr, data.data(), data.size(), src, tag);
}

backend::CollectiveChannel ThreadCommunicator::channel() {
  backend::CollectiveChannel ch;
  ch.rank = rank_;
  ch.size = size();
  ch.memory = memory_.get();
  ch.send = [this](std::span<const std::byte> data, int dest) {
    return post(true, data.data(), nullptr, data.size(), dest, detail::kCollectiveTag);
  };
  ch.recv = [this](std::span<std::byte> data, int src) {
    return post(false, nullptr, data.data(), data.size(), src, detail::kCollectiveTag);
  };
  return ch;
}

void ThreadCommunicator::do_allreduce_sum(std::span<float> data) {
  backend::allreduce_sum(channel(), data);
}

void ThreadCommunicator::do_allreduce_sum(std::span<double> data) {
  backend::allreduce_sum(channel(), data);
}

void ThreadCommunicator::do_all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) {
  backend::all_to_all(channel(), send, recv);
}

void ThreadCommunicator::do_barrier() { backend::barrier(channel()); }

void ThreadCommunicator::do_throw_if_group_failed() const {
  group_.throw_if_failed(label(rank_), context_ != 0);
}

std::unique_ptr<Communicator> SingleRankCommunicator::do_split(int color, int key) {
  rank_->set_timeout(timeout_);
  return rank_->split(color, key);
}

SingleRankCommunicator::SingleRankCommunicator()
    : group_(std::make_unique<detail::ThreadGroup>(1)),
      rank_(std::make_unique<ThreadCommunicator>(*group_, 0)) {}

SingleRankCommunicator::~SingleRankCommunicator() = default;

Request SingleRankCommunicator::do_isend(std::span<const std::byte> data, int dest, int tag) {
  rank_->set_timeout(timeout_);
  return rank_->isend(data, dest, tag);
}
Request SingleRankCommunicator::do_irecv(std::span<std::byte> data, int src, int tag) {
  rank_->set_timeout(timeout_);
  return rank_->irecv(data, src, tag);
}
void SingleRankCommunicator::do_allreduce_sum(std::span<float> data) { rank_->allreduce_sum(data); }
void SingleRankCommunicator::do_allreduce_sum(std::span<double> data) {
  rank_->allreduce_sum(data);
}
void SingleRankCommunicator::do_all_to_all(std::span<const std::byte> send,
                                           std::span<std::byte> recv) {
  rank_->all_to_all(send, recv);
}
void SingleRankCommunicator::do_barrier() { rank_->barrier(); }
MemoryCounter& SingleRankCommunicator::do_memory() { return rank_->memory(); }

void run_ranks(int size, const std::function<void(Communicator&)>& fn,
               const RunRanksOptions& options) {
  CPATTN_CHECK(size >= 1, ErrorCode::kInvalidArgument, "run_ranks: size must be >= 1, got ", size);
  detail::ThreadGroup group(size);
  std::vector<std::unique_ptr<ThreadCommunicator>> comms;
  comms.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    comms.push_back(std::make_unique<ThreadCommunicator>(group, r));
    comms.back()->set_timeout(options.timeout);
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  auto body = [&](int r) {
    try {
      fn(*comms[static_cast<size_t>(r)]);
      group.exited(r);
    } catch (...) {
      errors[static_cast<size_t>(r)] = std::current_exception();
      group.fail(r, detail::what_of(errors[static_cast<size_t>(r)]));
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(size));
  try {
    for (int r = 0; r < size; ++r) threads.emplace_back(body, r);
  } catch (const std::system_error& e) {
    // Could not start every rank: every rank not started fails now, so the started ones, which
    // would wait for any of them until the deadline, stop at once.
    const int started = static_cast<int>(threads.size());
    const std::string why = detail::str_cat(
        "the thread of rank ", started, " of ", size, " could not be started: ", e.what(),
        " (the process's thread or memory limits, ulimit -u / -v, allow fewer ranks)");
    for (int r = started; r < size; ++r) group.fail(r, why);
    for (std::thread& t : threads) t.join();
    throw Error(ErrorCode::kResourceExhausted, "run_ranks: " + why);
  }
  for (std::thread& t : threads) t.join();
  const int failed = group.failed_rank();
  if (failed >= 0) std::rethrow_exception(errors[static_cast<size_t>(failed)]);
}

}  // namespace cpattn
