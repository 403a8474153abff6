// ProcessGroupCommunicator (process_group_communicator.h): the wire protocol over c10d Works, and
// the helper threads that wait on them.
#include "process_group_communicator.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "cpattn/backend.h"
#include "cpattn/error.h"
#include "cpattn/memory.h"

namespace cpattn::torch_binding {

namespace {

using Clock = std::chrono::steady_clock;

// How long a cancelled transfer that is under way may take to finish before it is abandoned.
constexpr auto kCancelGrace = std::chrono::milliseconds(100);
// The helper threads' waits: cpattn's deadlines are the callers' (condition variables); gloo's
// own limit (which closes every connection of the group when it expires) is kept out of the way.
constexpr auto kHelperWait = std::chrono::hours(24 * 365);
constexpr size_t kHeaderBytes = 8;

// Scratch for a message the caller does not get (larger than its buffer, or its receive was
// cancelled), charged to process_memory().
class Scratch {
 public:
  Scratch() = default;
  explicit Scratch(size_t n) : data_(std::make_unique_for_overwrite<std::byte[]>(n)), bytes_(n) {
    process_memory().add_bytes(static_cast<int64_t>(bytes_));
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  Scratch& operator=(Scratch&& other) noexcept {
    release();
    data_ = std::move(other.data_);
    bytes_ = std::exchange(other.bytes_, 0);
    return *this;
  }
  ~Scratch() { release(); }

  std::byte* data() const { return data_.get(); }
  explicit operator bool() const { return data_ != nullptr; }
  void release() noexcept {
    if (!data_) return;
    process_memory().add_bytes(-static_cast<int64_t>(bytes_));
    data_.reset();
    bytes_ = 0;
  }

 private:
  std::unique_ptr<std::byte[]> data_;
  size_t bytes_ = 0;
};

at::Tensor bytes_tensor(std::byte* data, size_t n) {
  return at::from_blob(data, {static_cast<int64_t>(n)}, at::kByte);
}

// The Error of a transfer the transport failed, from its message.
Error transport_error(const std::string& rank, const std::string& what, const std::string& why) {
  ErrorCode code = ErrorCode::kCommunication;
  if (why.find("imed out") != std::string::npos || why.find("imeout") != std::string::npos) {
    code = ErrorCode::kTimeout;
  } else if (why.find("onnection closed") != std::string::npos ||
             why.find("onnection reset") != std::string::npos ||
             why.find("roken pipe") != std::string::npos) {
    code = ErrorCode::kPeerFailed;
  }
  return Error(code, detail::str_cat(rank, ": ", what, " failed: ", why));
}

}  // namespace

// One isend or irecv: its header and payload Works, waited on by a helper thread.
struct Transfer {
  enum class Phase { kPending, kDone, kFailed, kAbandoned };
  // What the helper thread is waiting for (kIdle: it is not waiting on this transfer).
  enum class Stage { kIdle, kHeader, kPayload };

  // Set when posted.
  bool is_send = false;
  bool local = false;  // to or from this process: matched here, not by gloo
  int pg_peer = 0;
  int channel = 0;
  std::byte* buffer = nullptr;  // the caller's
  size_t bytes = 0;             // send: the message's size; receive: the buffer's
  std::string rank;             // "rank R" (and its ProcessGroup rank in a sub-group)
  std::string peer;             // the same for the peer
  std::string tag;              // "7" or "collective"
  std::string what;             // "irecv from rank 1 (tag 7, 24-byte buffer)"
  std::array<std::byte, kHeaderBytes> header{};  // a send's size, or where a receive's arrives
  Scratch drain;                                 // a receive's message the caller does not get
  // Declared after the memory they use: released first.
  c10::intrusive_ptr<c10d::Work> header_work, payload_work;

  // Under Transport::mutex_.
  Phase phase = Phase::kPending;
  Stage stage = Stage::kIdle;
  bool cancelled = false;
  size_t message = 0;  // receive: the size its header announced
  std::optional<Error> error;
};

// The ProcessGroup and the helper threads, shared by a communicator, its sub-groups and their
// Requests. Transfers of one (direction, ProcessGroup peer, channel) form a queue that one helper
// drives front to back; a queue with transfers and no helper is `ready_`, and an idle helper (or
// a new one) takes it. Messages to this process itself never reach gloo (it has no connection to
// its own rank): sends and receives of a channel are matched here, in posting order, and copied.
class Transport {
 public:
  explicit Transport(c10::intrusive_ptr<c10d::ProcessGroup> group)
      : group_(std::move(group)), pg_rank_(group_->getRank()) {}
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;
  // Aborts what is still pending (a receive whose message never came) and joins the helpers.
  ~Transport();

  // Posts the ProcessGroup operations of `t` (filled in but for the Works) and queues it.
  // Throws Error(kCommunication) when the ProcessGroup refuses them, Error(kTimeout) once
  // close_connections() ran.
  void post(const std::shared_ptr<Transfer>& t);
  // The byte count, once `t` finished before `deadline`; throws its error, or Error(kTimeout).
  size_t wait(Transfer& t, Clock::time_point deadline, std::chrono::milliseconds timeout);
  bool test(Transfer& t);
  void cancel(Transfer& t) noexcept;
  // Closes every connection of the group, once, the way a gloo wait that times out does: the
  // peers' pending and later operations with this process fail at once instead of each waiting
  // for its own deadline, and so do this process's.
  void close_connections() noexcept;

  int unused_namespace() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return next_namespace_;
  }
  void use_namespace(int n) {
    const std::lock_guard<std::mutex> lock(mutex_);
    next_namespace_ = std::max(next_namespace_, n + 1);
  }

 private:
  using Key = std::tuple<bool, int, int>;  // (is_send, ProcessGroup peer, channel)
  struct Queue {
    Key key;
    std::deque<std::shared_ptr<Transfer>> items;
    bool served = false;  // a helper has it, or it is in ready_
  };
  struct LocalQueue {
    std::deque<std::shared_ptr<Transfer>> sends, recvs;
  };
  enum class Outcome { kDone, kAborted, kFailed };

  // A message to this process: matched with the first unmatched one of the other direction.
  void post_local(const std::shared_ptr<Transfer>& t);
  void serve();  // a helper thread
  // Takes the front transfer of a queue to its end: done, failed or abandoned (the lock held,
  // released while waiting on gloo).
  void drive(std::unique_lock<std::mutex>& lock, Transfer& t);
  // Waits for `work` with the lock released; *why is the transport's message on kFailed.
  Outcome await(std::unique_lock<std::mutex>& lock, Transfer& t, Transfer::Stage stage,
                const c10::intrusive_ptr<c10d::Work>& work, std::string* why);
  void finish(Transfer& t, Outcome outcome, const std::string& why);
  static void abort(Transfer& t) noexcept;
  static void release(Transfer& t) noexcept;  // aborts and drops the Works and the scratch

  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  int pg_rank_;
  std::mutex mutex_;
  std::condition_variable work_cv_;  // helpers wait for a ready queue
  std::condition_variable done_cv_;  // callers wait for transfers to finish
  std::map<Key, Queue> queues_;
  std::map<int, LocalQueue> local_;  // by channel
  std::deque<Queue*> ready_;
  std::vector<std::thread> helpers_;
  int idle_ = 0;  // helpers waiting for a ready queue
  bool stopping_ = false;
  bool closed_ = false;     // close_connections() ran
  int next_namespace_ = 1;  // the lowest sub-group namespace this process has not used
};

Transport::~Transport() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    for (auto& [key, q] : queues_) {
      for (const auto& t : q.items) abort(*t);  // a helper waiting on one returns
    }
    work_cv_.notify_all();
  }
  for (std::thread& h : helpers_) h.join();
  for (auto& [key, q] : queues_) {
    for (const auto& t : q.items) release(*t);
  }
}

void Transport::abort(Transfer& t) noexcept {
  for (const c10::intrusive_ptr<c10d::Work>* w : {&t.header_work, &t.payload_work}) {
    try {
      if (*w) (*w)->abort();
    } catch (...) {
    }
  }
}

void Transport::release(Transfer& t) noexcept {
  abort(t);
  // Dropping a Work releases gloo's buffer, so a late message can no longer reach the memory.
  t.header_work.reset();
  t.payload_work.reset();
  t.drain.release();
}

void Transport::post_local(const std::shared_ptr<Transfer>& t) {
  t->local = true;
  LocalQueue& q = local_[t->channel];
  std::deque<std::shared_ptr<Transfer>>& mine = t->is_send ? q.sends : q.recvs;
  std::deque<std::shared_ptr<Transfer>>& theirs = t->is_send ? q.recvs : q.sends;
  if (theirs.empty()) {
    mine.push_back(t);
    return;
  }
  const std::shared_ptr<Transfer> other = theirs.front();
  theirs.pop_front();
  if (q.sends.empty() && q.recvs.empty()) local_.erase(t->channel);
  Transfer& send = t->is_send ? *t : *other;
  Transfer& recv = t->is_send ? *other : *t;
  recv.message = send.bytes;
  if (recv.cancelled) {  // the message of a cancelled receive is discarded, as a remote one's
    recv.phase = Transfer::Phase::kAbandoned;
  } else if (send.bytes > recv.bytes) {
    recv.error =
        Error(ErrorCode::kCommunication,
              detail::str_cat(recv.rank, ": message from ", recv.peer, " (tag ", recv.tag, ") is ",
                              send.bytes, " bytes, larger than the receive buffer of ", recv.bytes,
                              " bytes"));
    recv.phase = Transfer::Phase::kFailed;
  } else {
    if (send.bytes > 0) std::memcpy(recv.buffer, send.buffer, send.bytes);
    recv.phase = Transfer::Phase::kDone;
  }
  send.phase = Transfer::Phase::kDone;
  done_cv_.notify_all();
}

void Transport::post(const std::shared_ptr<Transfer>& t) {
  const std::lock_guard<std::mutex> lock(mutex_);
  CPATTN_CHECK(!closed_, ErrorCode::kTimeout, t->rank, ": ", t->what,
               " could not be posted: a wait of this process timed out and closed the group's "
               "connections");
  if (t->pg_peer == pg_rank_) {
    post_local(t);
    return;
  }
  try {
    if (t->is_send) {
      for (size_t i = 0; i < kHeaderBytes; ++i) {
        t->header[i] = static_cast<std::byte>(static_cast<uint64_t>(t->bytes) >> (8 * i));
      }
      std::vector<at::Tensor> header{bytes_tensor(t->header.data(), kHeaderBytes)};
      t->header_work = group_->send(header, t->pg_peer, t->channel);
      if (t->bytes > 0) {
        std::vector<at::Tensor> payload{bytes_tensor(t->buffer, t->bytes)};
        t->payload_work = group_->send(payload, t->pg_peer, t->channel + kPayloadTag);
      }
    } else {
      std::vector<at::Tensor> header{bytes_tensor(t->header.data(), kHeaderBytes)};
      t->header_work = group_->recv(header, t->pg_peer, t->channel);
    }
  } catch (const std::exception& e) {
    release(*t);
    throw Error(ErrorCode::kCommunication,
                detail::str_cat(t->rank, ": ", t->what, " could not be posted: ", e.what()));
  }
  const Key key{t->is_send, t->pg_peer, t->channel};
  Queue& q = queues_.try_emplace(key, Queue{key, {}, false}).first->second;
  q.items.push_back(t);
  if (q.served) return;
  q.served = true;
  ready_.push_back(&q);
  if (static_cast<size_t>(idle_) >= ready_.size()) {
    work_cv_.notify_one();
    return;
  }
  try {
    helpers_.emplace_back([this] { serve(); });
  } catch (const std::system_error& e) {
    ready_.pop_back();
    q.served = false;
    q.items.pop_back();
    release(*t);
    throw Error(ErrorCode::kCommunication,
                detail::str_cat(t->rank, ": ", t->what,
                                " could not start the thread that waits on it: ", e.what()));
  }
}

void Transport::serve() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    ++idle_;
    work_cv_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
    --idle_;
    if (stopping_) return;
    Queue* q = ready_.front();
    ready_.pop_front();
    while (!q->items.empty()) {
      const std::shared_ptr<Transfer> t = q->items.front();
      drive(lock, *t);
      if (stopping_) return;  // the destructor releases what is left
      q->items.pop_front();
      done_cv_.notify_all();
    }
    q->served = false;
    queues_.erase(q->key);
  }
}

Transport::Outcome Transport::await(std::unique_lock<std::mutex>& lock, Transfer& t,
                                    Transfer::Stage stage,
                                    const c10::intrusive_ptr<c10d::Work>& work, std::string* why) {
  const c10::intrusive_ptr<c10d::Work> w = work;  // cancel() may drop the transfer's reference
  t.stage = stage;
  lock.unlock();
  Outcome outcome = Outcome::kAborted;
  try {
    outcome = w->wait(kHelperWait) ? Outcome::kDone : Outcome::kAborted;
  } catch (const std::exception& e) {
    *why = e.what();
    outcome = Outcome::kFailed;
  }
  lock.lock();
  t.stage = Transfer::Stage::kIdle;
  done_cv_.notify_all();  // a cancel() may wait for this helper to let go
  return outcome;
}

void Transport::finish(Transfer& t, Outcome outcome, const std::string& why) {
  switch (outcome) {
    case Outcome::kDone:  // a cancelled receive's message went to scratch
      t.phase = t.cancelled && !t.is_send ? Transfer::Phase::kAbandoned : Transfer::Phase::kDone;
      break;
    case Outcome::kAborted:  // by cancel()
      t.phase = Transfer::Phase::kAbandoned;
      break;
    case Outcome::kFailed:
      t.error = transport_error(t.rank, t.what, why);
      t.phase = Transfer::Phase::kFailed;
      break;
  }
  release(t);
}

void Transport::drive(std::unique_lock<std::mutex>& lock, Transfer& t) {
  if (t.phase != Transfer::Phase::kPending) return;  // abandoned before its turn
  std::string why;
  // A send's header completes once its receiver posted the header's receive.
  Outcome outcome = await(lock, t, Transfer::Stage::kHeader, t.header_work, &why);
  if (stopping_) return;
  if (t.is_send) {
    if (outcome == Outcome::kDone && t.payload_work) {
      outcome = await(lock, t, Transfer::Stage::kPayload, t.payload_work, &why);
      if (stopping_) return;
    }
    finish(t, outcome, why);
    return;
  }
  if (outcome != Outcome::kDone) {
    finish(t, outcome, why);
    return;
  }
  uint64_t n = 0;
  for (size_t i = 0; i < kHeaderBytes; ++i) n |= static_cast<uint64_t>(t.header[i]) << (8 * i);
  t.message = static_cast<size_t>(n);
  if (n == 0) {
    finish(t, Outcome::kDone, why);
    return;
  }
  // The payload's receive, of the message's own size: into the caller's buffer, or (too large,
  // or cancelled) into scratch, so that the next message of this queue finds its own receive.
  std::byte* into = t.buffer;
  try {
    if (t.cancelled || t.message > t.bytes) {
      t.drain = Scratch(t.message);
      into = t.drain.data();
    }
    std::vector<at::Tensor> payload{bytes_tensor(into, t.message)};
    t.payload_work = group_->recv(payload, t.pg_peer, t.channel + kPayloadTag);
  } catch (const std::bad_alloc&) {
    finish(t, Outcome::kFailed,
           detail::str_cat("no memory for the scratch of its ", t.message, "-byte message"));
    return;
  } catch (const std::exception& e) {
    finish(t, Outcome::kFailed, detail::str_cat("its payload could not be posted: ", e.what()));
    return;
  }
  outcome = await(lock, t, Transfer::Stage::kPayload, t.payload_work, &why);
  if (stopping_) return;
  if (outcome == Outcome::kDone && t.drain && !t.cancelled) {
    t.error = Error(
        ErrorCode::kCommunication,
        detail::str_cat(t.rank, ": message from ", t.peer, " (tag ", t.tag, ") is ", t.message,
                        " bytes, larger than the receive buffer of ", t.bytes, " bytes"));
    t.phase = Transfer::Phase::kFailed;
    release(t);
    return;
  }
  finish(t, outcome, why);
}

size_t Transport::wait(Transfer& t, Clock::time_point deadline, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait_until(lock, deadline, [&] { return t.phase != Transfer::Phase::kPending; });
  switch (t.phase) {
    case Transfer::Phase::kDone:
      return t.is_send ? t.bytes : t.message;
    case Transfer::Phase::kFailed:
      throw *t.error;
    case Transfer::Phase::kAbandoned:
      throw Error(ErrorCode::kCommunication,
                  detail::str_cat(t.rank, ": ", t.what, " was cancelled"));
    case Transfer::Phase::kPending:
      break;
  }
  lock.unlock();
  close_connections();
  throw Error(ErrorCode::kTimeout, detail::str_cat(t.rank, ": timed out after ",
                                                   std::chrono::duration<double>(timeout).count(),
                                                   " s waiting for ", t.what));
}

void Transport::close_connections() noexcept {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return;
    closed_ = true;
  }
  const int size = group_->getSize();
  if (size < 2) return;  // no connections
  // A receive nobody sends, waited on for 1 ms: gloo's timeout closes the connections.
  std::array<std::byte, 1> unused{};
  try {
    std::vector<at::Tensor> tensors{bytes_tensor(unused.data(), unused.size())};
    const c10::intrusive_ptr<c10d::Work> work =
        group_->recv(tensors, (pg_rank_ + 1) % size, kCloseChannel);
    work->wait(std::chrono::milliseconds(1));
  } catch (...) {  // the timeout, as intended
  }
}

bool Transport::test(Transfer& t) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (t.phase == Transfer::Phase::kPending) return false;
  if (t.phase == Transfer::Phase::kFailed) throw *t.error;
  return true;  // wait() returns the count, or says it was cancelled
}

void Transport::cancel(Transfer& t) noexcept {
  std::unique_lock<std::mutex> lock(mutex_);
  if (t.phase != Transfer::Phase::kPending) return;
  t.cancelled = true;
  if (t.local) {  // unmatched: a send is withdrawn; a receive waits to discard its message
    if (!t.is_send) return;
    auto it = local_.find(t.channel);
    std::deque<std::shared_ptr<Transfer>>& sends = it->second.sends;
    sends.erase(std::find_if(sends.begin(), sends.end(),
                             [&](const std::shared_ptr<Transfer>& s) { return s.get() == &t; }));
    if (sends.empty() && it->second.recvs.empty()) local_.erase(it);
    t.phase = Transfer::Phase::kAbandoned;
    return;
  }
  // A receive whose payload has no receive yet (or has one into scratch) does not use the
  // caller's buffer: its message, when it comes, is discarded.
  if (!t.is_send && (!t.payload_work || t.drain)) return;
  // Under way (a payload whose header came): it may finish.
  if (t.stage == Transfer::Stage::kPayload) {
    done_cv_.wait_for(lock, kCancelGrace, [&] { return t.phase != Transfer::Phase::kPending; });
    if (t.phase != Transfer::Phase::kPending) return;
  }
  if (t.stage == Transfer::Stage::kIdle) {  // not its helper's turn yet: the helper skips it
    release(t);
    t.phase = Transfer::Phase::kAbandoned;
    return;
  }
  abort(t);  // the helper's wait returns; it releases the Works
  done_cv_.wait(lock, [&] { return t.phase != Transfer::Phase::kPending || stopping_; });
}

namespace {

// A pending isend or irecv of a ProcessGroupCommunicator.
class PgRequest final : public detail::RequestImpl {
 public:
  PgRequest(std::shared_ptr<Transport> transport, std::shared_ptr<Transfer> transfer,
            std::chrono::milliseconds timeout)
      : transport_(std::move(transport)), transfer_(std::move(transfer)), timeout_(timeout) {}
  ~PgRequest() override { cancel(); }

  bool test() override { return transport_->test(*transfer_); }
  size_t wait(Clock::time_point deadline) override {
    return transport_->wait(*transfer_, deadline, timeout_);
  }
  void cancel() noexcept override { transport_->cancel(*transfer_); }

 private:
  std::shared_ptr<Transport> transport_;
  std::shared_ptr<Transfer> transfer_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

ProcessGroupCommunicator::ProcessGroupCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                   std::chrono::milliseconds timeout) {
  CPATTN_CHECK(group, ErrorCode::kInvalidArgument, "ProcessGroupCommunicator: no process group");
  rank_ = group->getRank();
  size_ = group->getSize();
  members_.resize(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) members_[static_cast<size_t>(r)] = r;
  transport_ = std::make_shared<Transport>(std::move(group));
  set_timeout(timeout);
}

ProcessGroupCommunicator::ProcessGroupCommunicator(std::shared_ptr<Transport> transport,
                                                   std::chrono::milliseconds timeout,
                                                   std::vector<int> members, int rank,
                                                   int tag_namespace)
    : transport_(std::move(transport)),
      rank_(rank),
      size_(static_cast<int>(members.size())),
      members_(std::move(members)),
      tag_namespace_(tag_namespace) {
  set_timeout(timeout);
}

ProcessGroupCommunicator::~ProcessGroupCommunicator() = default;

std::string ProcessGroupCommunicator::label(int rank) const {
  return backend::rank_label(
      rank, tag_namespace_ == 0 ? std::nullopt : std::optional(members_[static_cast<size_t>(rank)]),
      "process group");
}

int ProcessGroupCommunicator::max_tag() const {
  return tag_namespace_ == 0 ? kCollectiveTag : kSubGroupTags / 2;
}

int ProcessGroupCommunicator::channel(int tag) const {
  const int t = tag == kCollective ? max_tag() : tag;
  return tag_namespace_ == 0 ? t : kCollectiveTag + tag_namespace_ * kSubGroupTags + t;
}

std::unique_ptr<Communicator> ProcessGroupCommunicator::do_split(int color, int key) {
  const backend::SplitGroup sub = backend::plan_split(*this, color, key);
  // Every rank offers the lowest namespace it has not used; the sub-group takes its members'
  // largest offer, above every namespace any of its processes uses.
  std::vector<int64_t> offer(static_cast<size_t>(size_), transport_->unused_namespace());
  std::vector<int64_t> offers(offer.size());
  all_to_all(std::span<const int64_t>(offer), std::span<int64_t>(offers));
  int64_t tag_namespace = 0;
  for (const int m : sub.members) {
    tag_namespace = std::max(tag_namespace, offers[static_cast<size_t>(m)]);
  }
  CPATTN_CHECK(tag_namespace < kSubGroupNamespaces, ErrorCode::kInvalidArgument,
               "split: a ProcessGroup has room for ", kSubGroupNamespaces - 1,
               " sub-group namespaces, and this sub-group would need namespace ", tag_namespace,
               " (each split takes one above every namespace its members used)");
  transport_->use_namespace(static_cast<int>(tag_namespace));
  std::vector<int> members;
  for (const int m : sub.members) members.push_back(members_[static_cast<size_t>(m)]);
  return std::unique_ptr<ProcessGroupCommunicator>(new ProcessGroupCommunicator(
      transport_, timeout(), std::move(members), sub.rank, static_cast<int>(tag_namespace)));
}

Request ProcessGroupCommunicator::post(bool is_send, std::byte* data, size_t bytes, int peer,
                                       int tag) {
  CPATTN_CHECK(peer >= 0 && peer < size_, ErrorCode::kInvalidArgument, label(rank_), ": ",
               is_send ? "isend destination" : "irecv source", " must be in [0, ", size_, "), got ",
               peer);
  auto t = std::make_shared<Transfer>();
  t->is_send = is_send;
  t->pg_peer = members_[static_cast<size_t>(peer)];
  t->channel = channel(tag);
  t->buffer = data;
  t->bytes = bytes;
  t->rank = label(rank_);
  t->peer = label(peer);
  t->tag = tag == kCollective ? std::string("collective") : std::to_string(tag);
  t->what = detail::str_cat(is_send ? "isend to " : "irecv from ", t->peer, " (tag ", t->tag, ", ",
                            bytes, is_send ? " bytes)" : "-byte buffer)");
  transport_->post(t);
  return Request(std::make_unique<PgRequest>(transport_, std::move(t), timeout_), timeout_);
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

backend::CollectiveChannel ProcessGroupCommunicator::collective_channel() {
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
  backend::allreduce_sum(collective_channel(), data);
}
void ProcessGroupCommunicator::do_allreduce_sum(std::span<double> data) {
  backend::allreduce_sum(collective_channel(), data);
}
void ProcessGroupCommunicator::do_all_to_all(std::span<const std::byte> send,
                                             std::span<std::byte> recv) {
  backend::all_to_all(collective_channel(), send, recv);
}
void ProcessGroupCommunicator::do_barrier() { backend::barrier(collective_channel()); }
MemoryCounter& ProcessGroupCommunicator::do_memory() { return process_memory(); }

}  // namespace cpattn::torch_binding
