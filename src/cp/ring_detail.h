// Private pieces of the ring forward and backward: message tags, the
// channel that times and counts messages, the packed k/v block and the k/v relay both passes use.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "cp/workspace_lease.h"
#include "cpattn/detail/cp.h"
#include "cpattn/kernel.h"
#include "cpattn/layout.h"
#include "cpattn/mask.h"
#include "cpattn/stopwatch.h"

namespace cpattn::detail {

/// Message tags: one kind per stream, the step in the low bits (readable in timeout messages:
/// "tag 8194" = k/v of the backward, step 2). Every CP strategy's streams are listed here, so no
/// two can share a tag.
enum class TagStream {
  kForwardKv = 1,     ///< ring: k/v blocks of the forward
  kBackwardKv = 2,    ///< ring: k/v blocks of the backward
  kBackwardGrad = 3,  ///< ring: dk/dv accumulators from rank to rank
  kBackwardHome = 4,  ///< ring: a finished dk/dv accumulator (or a direct block's share) home
  /// allgather, ulysses, hybrid: sequence side -> head side (allgather: k/v of every rank);
  /// phase 0 forward, 1 backward
  kHeadsIn = 5,
  /// head side -> sequence side (allgather: the reduce-scatter of dk/dv)
  kHeadsOut = 6,
};
/// The largest tag is 6 * 4096 + 4095 = 28671, below MPI's guaranteed MPI_TAG_UB of 32767.
inline int stream_tag(TagStream stream, int step) {
  return static_cast<int>(stream) * 4096 + step % 4096;
}

/// The ring's view of its Communicator: float messages, received sizes checked, and every call's
/// time and traffic added to CpStats (when given).
class CpChannel {
 public:
  CpChannel(Communicator& comm, CpStats* stats) : comm_(comm), stats_(stats) {}
  Request send(std::span<const float> data, int dest, int tag);
  Request recv(std::span<float> data, int src, int tag);
  /// Waits for a receive and checks that exactly `floats` floats arrived (Error(kCommunication)).
  void wait_recv(Request& r, int64_t floats, const char* what);
  /// Waits for a request if one is pending (sends; receives already checked).
  void wait_if_pending(Request& r);
  MemoryCounter& memory() { return comm_.memory(); }
  CpStats* stats() const { return stats_; }

 private:
  double* comm_seconds() const { return stats_ ? &stats_->comm_seconds : nullptr; }
  Communicator& comm_;
  CpStats* stats_;
};

/// Times a whole ring call: on destruction adds (elapsed - kernel - comm time of this call) to
/// stats->other_seconds.
class CallTimer {
 public:
  explicit CallTimer(CpStats* stats);
  ~CallTimer();
  CallTimer(const CallTimer&) = delete;
  CallTimer& operator=(const CallTimer&) = delete;

 private:
  CpStats* stats_;
  double kernel0_ = 0, comm0_ = 0;
  Stopwatch watch_;
};

/// A travelling k/v block packed in one buffer: k [B, len, Hkv, Dqk] then v [B, len, Hkv, Dv],
/// both dense BSHD, in `dtype` (the call's input dtype: k/v travel exactly as given; 16-bit
/// elements sit two to a 4-byte word and the k part is rounded up to whole words). The buffer
/// holds max_block tokens; a block of `len` tokens uses the prefix. The backward's dk/dv
/// accumulators use the same layout in fp32 (they are sums, rounded once at home).
struct PackedKv {
  int64_t B, Hkv, Dk, Dv;
  DType dtype = DType::kF32;
  /// 4-byte words of a block of len tokens (the unit of the ring's buffers and messages).
  int64_t floats(int64_t len) const { return k_words(len) + words(B * len * Hkv * Dv); }
  /// The k and v parts of the packed block at `base` (4-byte words), as views of `dtype`.
  View k(float* base, int64_t len) const {
    return {reinterpret_cast<std::byte*>(base), k_shape(len), k_strides(len), dtype};
  }
  View v(float* base, int64_t len) const {
    return {reinterpret_cast<std::byte*>(base + k_words(len)), v_shape(len), v_strides(len), dtype};
  }
  ConstView k(const float* base, int64_t len) const {
    return {reinterpret_cast<const std::byte*>(base), k_shape(len), k_strides(len), dtype};
  }
  ConstView v(const float* base, int64_t len) const {
    return {reinterpret_cast<const std::byte*>(base + k_words(len)), v_shape(len), v_strides(len),
            dtype};
  }

 private:
  int64_t words(int64_t elements) const {
    return dtype == DType::kF32 ? elements : (elements + 1) / 2;
  }
  int64_t k_words(int64_t len) const { return words(B * len * Hkv * Dk); }
  std::array<int64_t, 4> k_shape(int64_t len) const { return {B, len, Hkv, Dk}; }
  std::array<int64_t, 4> v_shape(int64_t len) const { return {B, len, Hkv, Dv}; }
  std::array<int64_t, 4> k_strides(int64_t len) const {
    return dense_strides(k_shape(len), MemoryLayout::kBSHD);
  }
  std::array<int64_t, 4> v_strides(int64_t len) const {
    return dense_strides(v_shape(len), MemoryLayout::kBSHD);
  }
};

/// The positions and document ids of every rank's block of one sequence: the ring's view of a
/// SequenceSharding (block r = rank r's shard), or of the row blocks of the hybrid strategy
/// (block r = the union of a row's shards). Every rank holds the same table.
struct BlockTable {
  std::vector<std::vector<int64_t>> pos;  ///< pos[r]: global positions of block r, in its order
  std::vector<std::vector<int64_t>> doc;  ///< doc[r]: document ids (all empty: one document)
  int size() const { return static_cast<int>(pos.size()); }
  int64_t length(int r) const { return static_cast<int64_t>(pos[static_cast<size_t>(r)].size()); }
  int64_t max_length() const;
  /// Block r = rank r's shard of `seq` (local_positions / local_docs).
  static BlockTable of(const SequenceSharding& seq);
};

/// A block's tokens as the ring's block skip classifies them: the range of the whole block and
/// its runs, the stretches of consecutive positions in local order (pos[i + 1] == pos[i] + 1).
/// A contiguous shard is one run and a zigzag shard two, so a mask that hides the gap between
/// them (documents, mask slices) is seen; a block of more than kMaxRuns runs (striped shards,
/// arbitrary positions) is cut instead into kMaxRuns groups of consecutive local tokens of
/// (nearly) equal counts (chunk_range), each with its position and document range.
struct BlockRuns {
  /// The most ranges a block is cut into: the skip classifies at most kMaxRuns^2 pairs of ranges
  /// per (query block, key block), and stops at the first that is not hidden.
  static constexpr int64_t kMaxRuns = 8;
  BlockRange whole;
  std::vector<BlockRange> runs;  ///< empty for an empty block
  static BlockRuns of(std::span<const int64_t> pos, std::span<const int64_t> doc);
};

/// The ring's use of the mask rule: whether a k/v block is hidden from every query of a block.
/// Hidden iff MaskRule::classify of the two whole blocks' ranges is kHidden, or it is kPartial
/// and every (query run, key run) pair of their BlockRuns is kHidden. MaskRule::classify never
/// calls a pair hidden that holds a visible element, and every token lies in one run, so a block
/// called hidden holds no visible pair (docs/design.md section 5.5).
class BlockSkip {
 public:
  BlockSkip(const AttentionParams& params, std::span<const int64_t> q_pos,
            std::span<const int64_t> q_doc);
  bool hidden(const BlockRuns& k) const;
  bool hidden(std::span<const int64_t> k_pos, std::span<const int64_t> k_doc) const {
    return hidden(BlockRuns::of(k_pos, k_doc));
  }

 private:
  MaskRule rule_;
  BlockRuns q_;
  /// slices_meeting of each query run (empty without slices): classify reads only those.
  std::vector<std::vector<uint32_t>> q_slices_;
};

/// Who needs which k/v block and how it gets there (the document-aware routing,
/// CpOptions::document_aware). Rank r needs block b unless BlockSkip hides it from r's queries.
/// A block is routed one of two ways:
///  - relayed: it visits ranks b+1, b+2, ... (mod P) at steps 1, 2, ...; reach(b) is the step of
///    the last rank that needs it (0: none but its home), or P - 1 for the plain ring. Ranks up
///    to reach(b) relay it (also those that do not need it); its dk/dv accumulator follows the
///    same ranks, each adding its share, and goes from the last one straight home.
///  - direct (document-aware, 1 to kMaxDirect ranks besides its home need it, and some rank up to
///    reach(b) does not): its home sends it straight to each rank that needs it, each of them
///    returns its dk/dv share straight home, and the home adds the shares in ring order (the
///    relayed accumulator's order).
/// Both give the same sums term by term (the kernel adds a whole share to an accumulator once per
/// element), so results are bitwise the plain ring's. A pure function of the tables and the
/// parameters: every rank computes the same plan, so every send has its matching receive.
class RelayPlan {
 public:
  /// The most ranks besides its home a direct block may have: its home holds one dk/dv share
  /// buffer per such rank, so this bounds the routing's extra memory.
  static constexpr int kMaxDirect = 2;
  RelayPlan(const AttentionParams& params, const BlockTable& q, const BlockTable& kv,
            bool document_aware);
  /// Rank r computes block b (r == b included: its own block may be hidden too).
  bool needs(int rank, int block) const {
    return needs_[static_cast<size_t>(rank) * static_cast<size_t>(world_) +
                  static_cast<size_t>(block)];
  }
  /// The last step at which block b is at a rank that needs it (0: only its home, or none), or
  /// P - 1 for the plain ring.
  int reach(int block) const { return reach_[static_cast<size_t>(block)]; }
  /// Block b goes straight from its home to the ranks that need it.
  bool direct(int block) const { return !direct_steps(block).empty(); }
  /// The steps s (ascending: ring order) at which rank (b + s) mod P needs direct block b; empty
  /// for a relayed block.
  const std::vector<int>& direct_steps(int block) const {
    return direct_steps_[static_cast<size_t>(block)];
  }
  /// Rank r holds block (r - step) mod P at `step` (it receives it, relays it or computes it).
  bool on_path(int rank, int step) const;
  /// The rank block (r - step) mod P arrives from at `step` > 0: its home when direct, else the
  /// rank before r.
  int source(int rank, int step) const;
  int world() const { return world_; }

 private:
  int world_;
  std::vector<char> needs_;  // [rank][block]
  std::vector<int> reach_;
  std::vector<std::vector<int>> direct_steps_;
};

/// The k/v double buffer of a ring pass: at step s the block of rank (r - s) mod P is current in
/// one buffer and relayed on while the next block arrives in the other, as the RelayPlan says
/// (from the rank before, or from its home when direct). Starts with this rank's own k/v packed
/// in (with one rank nothing travels: its own views are the block and nothing is copied); a
/// direct own block is packed into a buffer of its own, kept for the whole pass, and sent to the
/// ranks that need it right away. One object per pass (forward, backward), each on its own
/// message stream; a message for step s carries tag stream_tag(stream, s - 1) whatever its source.
class KvRelay {
 public:
  /// The block buffers come from `buffers` (kRelay0, kRelay1, kOwnKv), which must outlive the
  /// relay.
  KvRelay(CpChannel& channel, WorkspaceLease& buffers, const CpDims& d, const BlockTable& kv,
          const RelayPlan& plan, TagStream stream, ConstView k, ConstView v);
  /// Makes step `s`'s block current: waits for it to arrive (s > 0, when this rank is on its
  /// path), relays it if a later rank needs it, and posts the receive of the next block if this
  /// rank is on that block's path. Call for s = 0, 1, ..., P - 1 in order.
  void advance(const RingStep& step, int s);
  /// The current block's k and v ([B, len, Hkv, D] dense views) and its token count; only valid
  /// when this rank is on the current block's path.
  ConstView k() const { return alone() ? own_k_ : pk_.k(current_, len_); }
  ConstView v() const { return alone() ? own_v_ : pk_.v(current_, len_); }
  int64_t length() const { return len_; }
  /// Waits for the sends still in flight (the buffers may be freed afterwards).
  void finish();

 private:
  bool alone() const { return world_ == 1; }
  CpChannel& channel_;
  const BlockTable& kv_;
  const RelayPlan& plan_;
  TagStream stream_;
  int rank_, world_;
  ConstView own_k_, own_v_;
  PackedKv pk_;
  std::array<std::span<float>, 2> buf_;
  std::span<float> own_;  // the packed own block: buf_[0], or its own buffer when direct
  std::array<Request, 2> sends_;
  std::vector<Request> direct_sends_;
  Request recv_;
  const float* current_ = nullptr;
  int64_t len_ = 0;
};

/// D_i = <dout_i, out_i> in fp32, [B, H, S] (FlashAttention-2 backward, Alg. 2 line 4), for
/// dout/out [B, S, H, Dv] (any strides), charged to `mem`: attention_kernel_delta, the sums the
/// kernel itself would form.
Tensor row_dot(ConstView dout, ConstView out, const KernelOptions& kernel, MemoryCounter* mem);

/// The sinks' gradient of a CP call, AttentionGradients::dsink (fp32 [Hq], Hq the whole call's
/// query heads), from this rank's `partial` (fp32 [Hq]: the sum over this rank's rows, from the
/// BackwardOptions::dsink of exactly one of its kernel calls, 0 for heads it holds no rows of):
/// with options.reduce_dsink the partials of every rank of `comm` summed in rank order by one
/// Communicator::allreduce_sum in double, rounded to fp32 once, so every rank returns the same
/// bits (backend.h); without it this rank's partial as it is. Empty, and no message, when
/// `partial` is empty (the call has no sinks). Collective over comm when it reduces; the bytes
/// are not counted in CpStats (a collective, not a ring message).
Tensor reduce_dsink(Communicator& comm, const CpOptions& options, std::span<const float> partial,
                    MemoryCounter* mem);

/// A zeroed partial sink gradient of a call (fp32 [Hq]; empty without sinks), charged to `mem`.
Tensor dsink_partial(const CpCall& call, MemoryCounter* mem);

/// The KernelOptions of every kernel call of a CP strategy (the ring's blocks included):
/// options.num_threads, options.isa resolved (resolve_isa, once per call), and the cooperative
/// cancellation and progress between work items: the caller's stop request (throw_if_set of
/// options.stop_requested), Communicator::throw_if_group_failed, then Communicator::progress, so
/// posted transfers move while the kernel runs.
KernelOptions kernel_options(Communicator& comm, const CpOptions& options);

/// Throws Error(kInterrupted) "stopped by request" when `stop` is non-null and true: the one check
/// of CpOptions::stop_requested.
void throw_if_set(const std::atomic<bool>* stop);

/// Sets every element of `v` to 0 (any strides, any dtype).
void zero_view(View v);

}  // namespace cpattn::detail
