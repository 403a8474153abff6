// Validation, channel, timing, k/v relay and block-skip helpers of the ring (ring_detail.h).
#include "cp/ring_detail.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "cpattn/error.h"

namespace cpattn::detail {

CpCall validate_cp_call(Communicator& comm, ConstView q, ConstView k, ConstView v,
                        const SequenceSharding& q_sharding, const SequenceSharding& kv_sharding,
                        const AttentionParams& params, RngState rng, const CpOptions& options) {
  q_sharding.validate();
  kv_sharding.validate();
  CpDims d{attention_dims(q, k, v)};
  d.world = comm.size();
  d.rank = comm.rank();
  for (const auto& [seq, name] : {std::pair{&q_sharding, "the q SequenceSharding"},
                                  std::pair{&kv_sharding, "the kv SequenceSharding"}}) {
    CPATTN_CHECK(seq->cp_size == d.world && seq->cp_rank == d.rank, ErrorCode::kInvalidArgument,
                 name, " is for cp_rank ", seq->cp_rank, " of ", seq->cp_size,
                 " but the communicator is rank ", d.rank, " of ", d.world);
  }
  check_documents_together(q_sharding.docs.size(), kv_sharding.docs.size(), q_sharding.seq_len,
                           kv_sharding.seq_len, "the q and kv SequenceShardings");
  CPATTN_CHECK(options.num_threads >= 1, ErrorCode::kInvalidArgument,
               "CpOptions.num_threads: expected >= 1, got ", options.num_threads);

  // The local lengths are the shardings': check_view holds q and k to them.
  d.Sq = q_sharding.local_length();
  d.Sk = kv_sharding.local_length();
  check_view(q, "q", "[B, Sq_local, Hq, Dqk]", {d.B, d.Sq, d.Hq, d.Dqk});
  check_view(k, "k", "[B, Sk_local, Hkv, Dqk]", {d.B, d.Sk, d.Hkv, d.Dqk});
  check_view(v, "v", "[B, Sk_local, Hkv, Dv]", {d.B, d.Sk, d.Hkv, d.Dv});
  CPATTN_CHECK(k.dtype == q.dtype && v.dtype == q.dtype, ErrorCode::kInvalidArgument,
               "q, k and v must have one dtype, got q ", dtype_name(q.dtype), ", k ",
               dtype_name(k.dtype), ", v ", dtype_name(v.dtype));
  CPATTN_CHECK(d.Hkv >= 1 && d.Hq % d.Hkv == 0, ErrorCode::kShapeMismatch,
               "Hq must be a multiple of Hkv >= 1, got Hq ", d.Hq, ", Hkv ", d.Hkv);
  CPATTN_CHECK(d.Dqk >= 1 && d.Dv >= 1, ErrorCode::kShapeMismatch,
               "head dims must be >= 1, got Dqk ", d.Dqk, ", Dv ", d.Dv);
  // Checked here although the kernel checks them too: a rank whose blocks are all masked never
  // calls the kernel, and every rank must reject a bad call alike, before any message.
  resolve_params(params, d.Dqk, d.Hq);
  resolve_isa(options.isa);  // an ISA this CPU lacks fails on every rank before any message
  for (int r = 0; r < d.world; ++r) {
    d.max_block = std::max(d.max_block, kv_sharding.local_length(r));
  }
  check_strategy(options.strategy, d.world, d.Hq, d.Hkv);
  check_strategy_dtype(options.strategy, q.dtype);
  return {comm, q, k, v, q_sharding, kv_sharding, params, rng, options, d};
}

Request CpChannel::send(std::span<const float> data, int dest, int tag) {
  const ScopedSeconds t(comm_seconds());
  if (stats_ != nullptr) {
    ++stats_->messages_sent;
    stats_->bytes_sent += static_cast<int64_t>(data.size_bytes());
  }
  return comm_.isend(data, dest, tag);
}

Request CpChannel::recv(std::span<float> data, int src, int tag) {
  const ScopedSeconds t(comm_seconds());
  return comm_.irecv(data, src, tag);
}

void CpChannel::wait_recv(Request& r, int64_t floats, const char* what) {
  size_t got = 0;
  {
    const ScopedSeconds t(comm_seconds());
    got = r.wait();
  }
  CPATTN_CHECK_EQ(got, static_cast<size_t>(floats) * sizeof(float), ErrorCode::kCommunication,
                  what);
}

void CpChannel::wait_if_pending(Request& r) {
  if (!r.valid()) return;
  const ScopedSeconds t(comm_seconds());
  r.wait();
}

CallTimer::CallTimer(CpStats* stats) : stats_(stats) {
  if (stats_ == nullptr) return;
  kernel0_ = stats_->kernel_seconds;
  comm0_ = stats_->comm_seconds;
}

CallTimer::~CallTimer() {
  if (stats_ == nullptr) return;
  stats_->other_seconds +=
      watch_.seconds() - (stats_->kernel_seconds - kernel0_) - (stats_->comm_seconds - comm0_);
}

int64_t BlockTable::max_length() const {
  int64_t m = 0;
  for (int r = 0; r < size(); ++r) m = std::max(m, length(r));
  return m;
}

BlockTable BlockTable::of(const SequenceSharding& seq) {
  BlockTable t;
  for (int r = 0; r < seq.cp_size; ++r) {
    t.pos.push_back(seq.local_positions(r));
    t.doc.push_back(seq.local_docs(r));
  }
  return t;
}

BlockRuns BlockRuns::of(std::span<const int64_t> pos, std::span<const int64_t> doc) {
  BlockRuns b;
  b.whole = block_range(pos, doc);
  const auto range = [&](size_t begin, size_t end) {
    return block_range(pos.subspan(begin, end - begin),
                       doc.empty() ? doc : doc.subspan(begin, end - begin));
  };
  std::vector<size_t> starts;
  for (size_t i = 0; i < pos.size(); ++i) {
    if (i == 0 || pos[i] != pos[i - 1] + 1) starts.push_back(i);
  }
  const auto n = static_cast<int64_t>(pos.size());
  if (static_cast<int64_t>(starts.size()) <= kMaxRuns) {
    for (size_t r = 0; r < starts.size(); ++r) {
      b.runs.push_back(range(starts[r], r + 1 < starts.size() ? starts[r + 1] : pos.size()));
    }
    return b;
  }
  for (int64_t g = 0; g < kMaxRuns; ++g) {
    const TokenRange t = chunk_range(n, kMaxRuns, g);
    b.runs.push_back(range(static_cast<size_t>(t.begin), static_cast<size_t>(t.end)));
  }
  return b;
}

BlockSkip::BlockSkip(const AttentionParams& params, std::span<const int64_t> q_pos,
                     std::span<const int64_t> q_doc)
    : rule_(params, !q_doc.empty()), q_(BlockRuns::of(q_pos, q_doc)) {
  if (!rule_.has_slices()) return;
  for (const BlockRange& run : q_.runs) q_slices_.push_back(rule_.slices_meeting(run));
}

bool BlockSkip::hidden(const BlockRuns& k) const {
  const BlockVisibility whole = rule_.classify(q_.whole, k.whole);
  if (whole != BlockVisibility::kPartial) return whole == BlockVisibility::kHidden;
  for (size_t i = 0; i < q_.runs.size(); ++i) {
    for (const BlockRange& k_run : k.runs) {
      const BlockVisibility v = q_slices_.empty() ? rule_.classify(q_.runs[i], k_run)
                                                  : rule_.classify(q_.runs[i], k_run, q_slices_[i]);
      if (v != BlockVisibility::kHidden) return false;
    }
  }
  return true;
}

RelayPlan::RelayPlan(const AttentionParams& params, const BlockTable& q, const BlockTable& kv,
                     bool document_aware)
    : world_(q.size()),
      needs_(static_cast<size_t>(world_) * static_cast<size_t>(world_)),
      reach_(static_cast<size_t>(world_), 0),
      direct_steps_(static_cast<size_t>(world_)) {
  std::vector<BlockRuns> kv_runs;
  for (int b = 0; b < world_; ++b) {
    kv_runs.push_back(
        BlockRuns::of(kv.pos[static_cast<size_t>(b)], kv.doc[static_cast<size_t>(b)]));
  }
  for (int r = 0; r < world_; ++r) {
    const BlockSkip skip(params, q.pos[static_cast<size_t>(r)], q.doc[static_cast<size_t>(r)]);
    for (int b = 0; b < world_; ++b) {
      needs_[static_cast<size_t>(r) * static_cast<size_t>(world_) + static_cast<size_t>(b)] =
          skip.hidden(kv_runs[static_cast<size_t>(b)]) ? 0 : 1;
    }
  }
  for (int b = 0; b < world_; ++b) {
    int& reach = reach_[static_cast<size_t>(b)];
    if (!document_aware) {
      reach = world_ - 1;
      continue;
    }
    std::vector<int> steps;
    for (int s = 1; s < world_; ++s) {
      if (needs((b + s) % world_, b)) steps.push_back(s);
    }
    if (!steps.empty()) reach = steps.back();
    // Direct when the relay would pass through ranks that do not need the block: then it sends
    // 3 n blocks for n needing ranks instead of the relay's 3 reach + 1. When every rank up to
    // the reach needs it the relay, one block short of that, is kept for its smaller buffers.
    const int n = static_cast<int>(steps.size());
    if (n <= kMaxDirect && n < reach) {
      direct_steps_[static_cast<size_t>(b)] = std::move(steps);
    }
  }
}

bool RelayPlan::on_path(int rank, int step) const {
  const int block = ((rank - step) % world_ + world_) % world_;
  if (direct(block)) return step == 0 || needs(rank, block);
  return step <= reach(block);
}

int RelayPlan::source(int rank, int step) const {
  const int block = ((rank - step) % world_ + world_) % world_;
  return direct(block) ? block : (rank - 1 + world_) % world_;
}

KvRelay::KvRelay(CpChannel& channel, WorkspaceLease& buffers, const CpDims& d, const BlockTable& kv,
                 const RelayPlan& plan, TagStream stream, ConstView k, ConstView v)
    : channel_(channel),
      kv_(kv),
      plan_(plan),
      stream_(stream),
      rank_(d.rank),
      world_(d.world),
      own_k_(k),
      own_v_(v),
      pk_{d.B, d.Hkv, d.Dqk, d.Dv, k.dtype},
      // Both buffers hold the largest block of the group; with one rank nothing travels.
      buf_{buffers.get(WorkspaceBuffer::kRelay0, d.world > 1 ? pk_.floats(d.max_block) : 0),
           buffers.get(WorkspaceBuffer::kRelay1, d.world > 1 ? pk_.floats(d.max_block) : 0)},
      len_(d.Sk) {
  if (alone()) return;
  const bool direct = plan_.direct(rank_);
  own_ = direct ? buffers.get(WorkspaceBuffer::kOwnKv, pk_.floats(d.Sk)) : buf_[0];
  copy_view(k, pk_.k(own_.data(), len_));
  copy_view(v, pk_.v(own_.data(), len_));
  current_ = own_.data();
  if (!direct) return;
  const std::span<const float> block =
      std::span<const float>(own_).first(static_cast<size_t>(pk_.floats(len_)));
  for (const int s : plan_.direct_steps(rank_)) {
    direct_sends_.push_back(channel_.send(block, (rank_ + s) % world_, stream_tag(stream_, s - 1)));
  }
}

void KvRelay::advance(const RingStep& step, int s) {
  const int cur = s % 2;
  len_ = kv_.length(step.kv_block);
  if (alone()) return;
  current_ = s == 0 ? own_.data() : buf_[static_cast<size_t>(cur)].data();
  // Off the block's path (nobody from here on needs it) nothing arrives, nothing is relayed; the
  // next block may still come.
  const bool here = plan_.on_path(rank_, s);
  const size_t floats = static_cast<size_t>(pk_.floats(len_));
  if (here && s > 0) channel_.wait_recv(recv_, pk_.floats(len_), "ring: bytes of the k/v block");
  if (step.kv_send_to < 0) return;
  const int tag = stream_tag(stream_, s);
  // The buffer about to receive block s + 1 was relayed at step s - 1: that send must be done.
  const size_t other = static_cast<size_t>(1 - cur);
  channel_.wait_if_pending(sends_[other]);
  if (here && !plan_.direct(step.kv_block) && s < plan_.reach(step.kv_block)) {
    sends_[static_cast<size_t>(cur)] =
        channel_.send(std::span<const float>(current_, floats), step.kv_send_to, tag);
  }
  if (plan_.on_path(rank_, s + 1)) {
    const int64_t next = pk_.floats(kv_.length(step.next_kv_block));
    recv_ = channel_.recv(buf_[other].first(static_cast<size_t>(next)), plan_.source(rank_, s + 1),
                          tag);
  }
}

void KvRelay::finish() {
  for (Request& r : sends_) channel_.wait_if_pending(r);
  for (Request& r : direct_sends_) channel_.wait_if_pending(r);
}

void check_backward_state(const CpCall& call, const BackwardState& state) {
  const CpDims& d = call.d;
  const ConstView q = call.q, dout = state.dout, out = state.out;
  const std::span<const float> lse = state.lse;
  check_view(dout, "dout", "[B, Sq_local, Hq, Dv]", {d.B, d.Sq, d.Hq, d.Dv});
  check_view(out, "out", "[B, Sq_local, Hq, Dv]", {d.B, d.Sq, d.Hq, d.Dv});
  CPATTN_CHECK_EQ(static_cast<int64_t>(lse.size()), d.B * d.Hq * d.Sq, ErrorCode::kShapeMismatch,
                  "lse length (B * Hq * Sq_local)");
  CPATTN_CHECK(dout.dtype == q.dtype, ErrorCode::kInvalidArgument, "dout must have q's dtype ",
               dtype_name(q.dtype), ", got ", dtype_name(dout.dtype));
  CPATTN_CHECK(out.dtype == q.dtype || out.dtype == DType::kF32, ErrorCode::kInvalidArgument,
               "out must be ", dtype_name(q.dtype), " (q's dtype) or fp32, got ",
               dtype_name(out.dtype));
}

Tensor row_dot(ConstView dout, ConstView out, const KernelOptions& kernel, MemoryCounter* mem) {
  Tensor delta({out.shape[0], out.shape[2], out.shape[1]}, mem);
  attention_kernel_delta(dout, out, delta.span(), kernel);
  return delta;
}

Tensor reduce_dsink(Communicator& comm, const CpOptions& options, std::span<const float> partial,
                    MemoryCounter* mem) {
  Tensor dsink({static_cast<int64_t>(partial.size())}, mem);
  if (partial.empty()) return dsink;
  if (!options.reduce_dsink) {
    std::copy(partial.begin(), partial.end(), dsink.data());
    return dsink;
  }
  std::vector<double> sum(partial.begin(), partial.end());
  comm.allreduce_sum(std::span<double>(sum));
  for (size_t h = 0; h < sum.size(); ++h) dsink.data()[h] = static_cast<float>(sum[h]);
  return dsink;
}

Tensor dsink_partial(const CpCall& call, MemoryCounter* mem) {
  // Tensor memory starts zeroed.
  return Tensor({call.params.sink.empty() ? 0 : call.d.Hq}, mem);
}

// The one check of a stop request (CpOptions::stop_requested).
void throw_if_set(const std::atomic<bool>* stop) {
  CPATTN_CHECK(stop == nullptr || !stop->load(std::memory_order_relaxed), ErrorCode::kInterrupted,
               "stopped by request");
}

KernelOptions kernel_options(Communicator& comm, const CpOptions& options) {
  KernelOptions k;
  k.num_threads = options.num_threads;
  k.interruption_point = [&comm, stop = options.stop_requested] {
    throw_if_set(stop);
    comm.throw_if_group_failed();
    comm.progress();
  };
  k.isa = resolve_isa(options.isa);
  return k;
}

void zero_view(View v) {
  // +0.0 is the all-zero bit pattern in fp32, bf16 and fp16: rows are cleared bytewise.
  const int64_t size = dtype_size(v.dtype), dim = v.shape[3];
  if (dim == 0) return;
  for (int64_t b = 0; b < v.shape[0]; ++b)
    for (int64_t s = 0; s < v.shape[1]; ++s)
      for (int64_t h = 0; h < v.shape[2]; ++h) {
        std::byte* row = v.data + v.offset(b, s, h, 0) * size;
        if (v.stride[3] == 1) {
          std::memset(row, 0, static_cast<size_t>(dim * size));
          continue;
        }
        for (int64_t d = 0; d < dim; ++d) {
          std::memset(row + d * v.stride[3] * size, 0, static_cast<size_t>(size));
        }
      }
}

}  // namespace cpattn::detail

namespace cpattn {

void throw_if_stop_requested(const CpOptions& options) {
  detail::throw_if_set(options.stop_requested);
}

}  // namespace cpattn
