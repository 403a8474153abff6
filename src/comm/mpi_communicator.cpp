// MpiCommunicator: user messages on one duplicated communicator, the shared point-to-point
// collectives on another; requests are MpiRequest (mpi_request.h).
#include "cpattn/mpi_communicator.h"

#include <climits>
#include <memory>
#include <string>

#include "comm/mpi_request.h"
#include "comm/mpi_state.h"
#include "cpattn/backend.h"
#include "cpattn/error.h"

namespace cpattn {

MpiCommunicator::MpiCommunicator(MPI_Comm comm, const MpiOptions& options)
    : state_(std::make_shared<detail::MpiState>()) {
  CPATTN_CHECK(detail::mpi_active(), ErrorCode::kInvalidArgument,
               "MpiCommunicator: MPI is not initialised (create an MpiSession first)");
  CPATTN_CHECK(options.chunk_bytes >= 1 && options.chunk_bytes <= size_t{INT_MAX},
               ErrorCode::kInvalidArgument,
               "MpiOptions::chunk_bytes must be in [1, 2^31 - 1], got ", options.chunk_bytes);
  detail::MpiState& s = *state_;
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  s.thread_level = provided;
  s.serialize = provided < MPI_THREAD_MULTIPLE;
  s.chunk_bytes = options.chunk_bytes;
  detail::check_mpi(MPI_Comm_rank(comm, &s.rank), "this process", "MPI_Comm_rank");
  detail::check_mpi(MPI_Comm_size(comm, &s.size), s.label(s.rank), "MPI_Comm_size");
  detail::check_mpi(MPI_Comm_dup(comm, &s.p2p), s.label(s.rank), "MPI_Comm_dup");
  detail::check_mpi(MPI_Comm_dup(comm, &s.coll), s.label(s.rank), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(s.p2p, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(s.coll, MPI_ERRORS_RETURN);
  int* tag_ub = nullptr;
  int found = 0;
  // MPI_TAG_UB is an attribute of MPI_COMM_WORLD that holds for every communicator (a split one
  // carries no copy of it).
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found);
  if (found != 0 && tag_ub != nullptr) s.tag_ub = *tag_ub;
}

MpiCommunicator::~MpiCommunicator() = default;

int MpiCommunicator::do_rank() const { return state_->rank; }
int MpiCommunicator::do_size() const { return state_->size; }
MemoryCounter& MpiCommunicator::do_memory() { return process_memory(); }

namespace {
void check_peer_and_tag(const detail::MpiState& s, const char* op, int peer, int tag) {
  CPATTN_CHECK(peer >= 0 && peer < s.size, ErrorCode::kInvalidArgument, s.label(s.rank), ": ", op,
               " peer must be in [0, ", s.size, "), got ", peer);
  CPATTN_CHECK(tag >= 0 && tag <= s.tag_ub, ErrorCode::kInvalidArgument, op,
               ": tag must be in [0, ", s.tag_ub, "], got ", tag);
}
}  // namespace

Request MpiCommunicator::do_isend(std::span<const std::byte> data, int dest, int tag) {
  check_peer_and_tag(*state_, "isend", dest, tag);
  return Request(
      std::make_unique<detail::MpiRequest>(
          state_, detail::MpiRequest::Spec{state_->p2p, true, data.data(), nullptr, data.size(),
                                           dest, tag, std::to_string(tag), timeout_}),
      timeout_);
}

Request MpiCommunicator::do_irecv(std::span<std::byte> data, int src, int tag) {
  check_peer_and_tag(*state_, "irecv", src, tag);
  return Request(
      std::make_unique<detail::MpiRequest>(
          state_, detail::MpiRequest::Spec{state_->p2p, false, nullptr, data.data(), data.size(),
                                           src, tag, std::to_string(tag), timeout_}),
      timeout_);
}

backend::CollectiveChannel MpiCommunicator::channel() {
  backend::CollectiveChannel ch;
  ch.rank = state_->rank;
  ch.size = state_->size;
  ch.memory = &process_memory();
  ch.send = [this](std::span<const std::byte> data, int dest) {
    return Request(
        std::make_unique<detail::MpiRequest>(
            state_, detail::MpiRequest::Spec{state_->coll, true, data.data(), nullptr, data.size(),
                                             dest, 0, "collective", timeout_}),
        timeout_);
  };
  ch.recv = [this](std::span<std::byte> data, int src) {
    return Request(
        std::make_unique<detail::MpiRequest>(
            state_, detail::MpiRequest::Spec{state_->coll, false, nullptr, data.data(), data.size(),
                                             src, 0, "collective", timeout_}),
        timeout_);
  };
  return ch;
}

void MpiCommunicator::do_allreduce_sum(std::span<float> data) {
  backend::allreduce_sum(channel(), data);
}

void MpiCommunicator::do_allreduce_sum(std::span<double> data) {
  backend::allreduce_sum(channel(), data);
}

void MpiCommunicator::do_all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) {
  backend::all_to_all(channel(), send, recv);
}

void MpiCommunicator::do_barrier() { backend::barrier(channel()); }

void MpiCommunicator::do_progress() noexcept {
  if (!detail::mpi_active()) return;
  if (state_->thread_level < MPI_THREAD_SERIALIZED) {
    int main = 0;
    MPI_Is_thread_main(&main);
    if (main == 0) return;
  }
  detail::MpiLock lock = state_->try_lock();
  if (lock.owns()) detail::MpiRequest::progress_all(*state_);
}

std::unique_ptr<Communicator> MpiCommunicator::do_split(int color, int key) {
  const backend::SplitGroup sub = backend::plan_split(*this, color, key);
  MPI_Comm part = MPI_COMM_NULL;
  {
    detail::MpiLock lock = state_->lock();
    detail::check_mpi(MPI_Comm_split(state_->coll, color, key, &part), state_->label(state_->rank),
                      "MPI_Comm_split");
  }
  MpiOptions options;
  options.chunk_bytes = state_->chunk_bytes;
  std::unique_ptr<MpiCommunicator> comm;
  try {
    comm = std::make_unique<MpiCommunicator>(part, options);
  } catch (...) {
    MPI_Comm_free(&part);
    throw;
  }
  MPI_Comm_free(&part);  // the new communicator holds its own duplicates
  CPATTN_CHECK(comm->rank() == sub.rank && comm->size() == static_cast<int>(sub.members.size()),
               ErrorCode::kInternal, "MPI_Comm_split made rank ", comm->rank(), " of ",
               comm->size(), ", expected rank ", sub.rank, " of ", sub.members.size());
  // Errors of the sub-group name each rank's rank in the communicator the splits started from.
  for (const int m : sub.members) {
    comm->state_->group_ranks.push_back(
        state_->group_ranks.empty() ? m : state_->group_ranks[static_cast<size_t>(m)]);
  }
  comm->set_timeout(timeout_);
  return comm;
}

}  // namespace cpattn
