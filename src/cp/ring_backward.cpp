// Ring backward: dq accumulates locally; each relayed block's dk/dv accumulator follows its k/v
// around the ring, every rank on the block's path adding its share in a fixed order, and goes
// home from the last rank that needs the block; a direct block's shares come straight home and
// are added there in the same order.
#include <algorithm>
#include <array>
#include <optional>
#include <utility>

#include "cp/ring_core.h"
#include "cpattn/detail/cp.h"
#include "cpattn/error.h"

namespace cpattn {

namespace {

std::span<const float> first(std::span<const float> buffer, int64_t n) {
  return buffer.first(static_cast<size_t>(n));
}

}  // namespace

namespace detail {

namespace {

// One rank's ring backward (ring_backward below), in the steps it takes: the buffers and
// receives of the pass (constructor, post_home_receives), the P ring steps (step), and this
// rank's own block and dq (finish). Members are declared in the order they must be destroyed in
// reverse: the lease before every Request on its buffers.
//
// Buffers besides the k/v relay (each sized for the largest block, packed dk|dv as PackedKv):
//   grad[2]  dk/dv accumulators (fp32 whatever the dtype of k/v, on the wire too): grad[s % 2] is
//            received at step s while this rank computes, and the kernel adds this rank's share
//            straight into it (BackwardOptions::before_dkdv waits for the accumulator just before
//            the first dk/dv write, so the transfer overlaps the work before it); it is then sent
//            on while grad[(s + 1) % 2] may still be in flight from step s - 1. At step 0 the
//            kernel writes its share of the own block into grad[0] (overwrite_dkdv).
//   home     this rank's own finished accumulator, received from the last rank on its path (its
//            receive is posted before step 0, so that send never waits for this rank); for a
//            direct own block, the accumulator itself: the own share, then the others
//   shares   a direct own block's shares from the ranks that need it, one buffer each (their
//            receives are posted before step 0 too), added into home in ring order at the end
class RingBackwardPass {
 public:
  RingBackwardPass(Communicator& comm, const RingProblem& p, const CpOptions& options,
                   ConstView dout, std::span<const float> lse, std::span<const float> delta,
                   View dq, View dk, View dv, std::span<float> dsink, WorkspaceLease* lease)
      : comm_(comm),
        p_(p),
        options_(options),
        d_(ring_dims(comm, p)),
        channel_(comm, options.stats),
        dout_(dout),
        lse_(lse),
        dq_(dq),
        dk_(dk),
        dv_(dv),
        own_dq_(dq.dtype != DType::kF32 && comm.size() > 1),
        dq_accumulator_({own_dq_ ? d_.B : 0, own_dq_ ? d_.Sq : 0, d_.Hq, own_dq_ ? d_.Dqk : 0},
                        &comm.memory()),
        dq_target_(own_dq_ ? dq_accumulator_.view() : dq),
        plan_(p.params, *p.q_blocks, *p.kv_blocks, options.document_aware),
        buffers_(lease != nullptr ? *lease : own_lease_.emplace(options.workspace, &comm.memory())),
        relay_(channel_, buffers_, d_, *p.kv_blocks, plan_, TagStream::kBackwardKv, p.k, p.v),
        pk_{d_.B, d_.Hkv, d_.Dqk, d_.Dv},
        pk_kv_{d_.B, d_.Hkv, d_.Dqk, d_.Dv, p.k.dtype},
        own_reach_(plan_.reach(d_.rank)),
        share_steps_(plan_.direct_steps(d_.rank)),
        own_floats_(pk_.floats(d_.Sk)) {
    // The kernel accumulates dq over the blocks, in fp32: over several ranks a bf16 or fp16 dq
    // gets an fp32 accumulator and is rounded once at the end. One rank has one block, whose dq
    // the kernel rounds once itself (onto the zeroed dq: the same bits, without the
    // accumulator's 4 bytes per element).
    zero_view(dq_target_);
    const int64_t ring_floats = d_.world > 1 ? pk_.floats(d_.max_block) : 0;
    grad_ = {buffers_.get(WorkspaceBuffer::kGrad0, ring_floats),
             buffers_.get(WorkspaceBuffer::kGrad1, ring_floats)};
    home_ = buffers_.get(WorkspaceBuffer::kHome, d_.world > 1 && own_reach_ > 0 ? own_floats_ : 0);
    shares_ = buffers_.get(WorkspaceBuffer::kShares,
                           static_cast<int64_t>(share_steps_.size()) * own_floats_);
    kernel_.kernel = kernel_options(comm, options);
    kernel_.accumulate = true;  // dq sums over blocks
    kernel_.delta = delta;
    // The sink gradient of this rank's rows, from the first block it computes (accumulated onto
    // zero: the kernel adds with `accumulate`).
    if (!dsink.empty()) {
      dsink_ = dsink;
      const std::span<float> own =
          dsink.subspan(static_cast<size_t>(p.head_offset), static_cast<size_t>(d_.Hq));
      std::fill(own.begin(), own.end(), 0.0f);
    }
  }

  // What the plain ring sends in this pass: P - 1 k/v blocks (as in the forward) and P
  // accumulators (CpStats::bytes_sent_plain_ring).
  void count_plain_ring_bytes() const {
    if (options_.stats == nullptr) return;
    for (int s = 0; s < d_.world && d_.world > 1; ++s) {
      const int64_t len = p_.kv_blocks->length(ring_step(d_.rank, d_.world, s).kv_block);
      const int64_t kv_bytes = static_cast<int64_t>(sizeof(float)) * pk_kv_.floats(len);
      const int64_t grad_bytes = static_cast<int64_t>(sizeof(float)) * pk_.floats(len);
      options_.stats->bytes_sent_plain_ring +=
          s + 1 < d_.world ? kv_bytes + grad_bytes : grad_bytes;
    }
  }

  // Before step 0: the receives of a direct own block's shares, or of the own block's finished
  // accumulator from the last rank on its path.
  void post_home_receives() {
    for (size_t i = 0; i < share_steps_.size(); ++i) {
      const int from = share_steps_[i];
      share_recvs_.push_back(channel_.recv(share(i), (d_.rank + from) % d_.world, home_tag(from)));
    }
    if (d_.world > 1 && own_reach_ > 0 && share_steps_.empty()) {
      home_recv_ = channel_.recv(home_, (d_.rank + own_reach_) % d_.world, home_tag(own_reach_));
    }
  }

  // Ring step s: the block of rank (r - s) mod P arrives; when this rank needs it, its share of
  // the block's dk/dv goes into the accumulator that arrived behind it (dq accumulates here);
  // then the accumulator travels on, or home from the last rank on the block's path.
  void step(int s) {
    const RingStep step = ring_step(d_.rank, d_.world, s);
    const int cur = s % 2;
    comm_.throw_if_group_failed();
    relay_.advance(step, s);
    if (!plan_.on_path(d_.rank, s)) {
      if (options_.stats != nullptr) ++options_.stats->blocks_skipped;
      return;
    }
    const int64_t len = relay_.length();
    const int64_t floats = pk_.floats(len);
    // A direct block's share goes home on its own: nothing to receive, the kernel writes it.
    const bool direct = plan_.direct(step.kv_block);
    bool received = s == 0 || direct;
    const auto wait_accumulator = [&] {
      channel_.wait_recv(grad_recv_, floats, "ring backward: bytes of the dk/dv accumulator");
      received = true;
    };
    if (s > 0) {
      // grad[cur] was sent on at step s - 2; the sender of this accumulator finished step s - 1.
      channel_.wait_if_pending(grad_sends_[cur]);
      if (!direct) {
        grad_recv_ = channel_.recv(grad_[cur].first(static_cast<size_t>(floats)),
                                   step.grad_recv_from, grad_tag(s - 1));
      }
    }
    // With one rank the share is the finished dk/dv; a direct own block's share starts home.
    float* const accumulator = s == 0 && direct ? home_.data() : grad_[cur].data();
    const View target_k = d_.world == 1 ? dk_ : pk_.k(accumulator, len);
    const View target_v = d_.world == 1 ? dv_ : pk_.v(accumulator, len);
    const bool needed = plan_.needs(d_.rank, step.kv_block);
    if (needed) {
      // Fixed order: the accumulator holds (shares of ranks kv_block .. r-1); the kernel adds
      // this rank's share elementwise. Step 0 starts it with this rank's share; a direct block's
      // share is written alone.
      kernel_.overwrite_dkdv = s == 0 || direct;
      kernel_.before_dkdv = nullptr;
      if (!received) kernel_.before_dkdv = wait_accumulator;
      kernel_.dsink = dsink_;
      dsink_ = {};  // one call of the ring computes it
      compute_share(step.kv_block, target_k, target_v);
      kernel_.before_dkdv = nullptr;  // it refers to this step's locals
      kernel_.dsink = {};
    } else if (s == 0) {
      // No query of this rank sees its own block: the accumulator (or, with one rank, the
      // result) starts at zero.
      zero_view(target_k);
      zero_view(target_v);
    }
    if (options_.stats != nullptr) {
      ++(needed ? options_.stats->blocks_computed : options_.stats->blocks_skipped);
    }
    if (!received) wait_accumulator();
    if (d_.world == 1) return;
    send_accumulator(step, s, floats, direct);
  }

  // After the last step: this rank's own block's finished dk/dv (received, or its direct shares
  // added in ring order), its dq rounded once, and the sends still in flight.
  void finish() {
    if (d_.world > 1 && own_reach_ > 0) {
      if (share_steps_.empty()) {
        channel_.wait_recv(home_recv_, own_floats_, "ring backward: bytes of the finished dk/dv");
      }
      for (size_t i = 0; i < share_steps_.size(); ++i) {
        channel_.wait_recv(share_recvs_[i], own_floats_, "ring backward: bytes of a dk/dv share");
        const std::span<const float> part = share(i);
        for (size_t e = 0; e < part.size(); ++e) home_[e] += part[e];
      }
      copy_view(pk_.k(static_cast<const float*>(home_.data()), d_.Sk), dk_);
      copy_view(pk_.v(static_cast<const float*>(home_.data()), d_.Sk), dv_);
    }
    if (own_dq_) copy_view(std::as_const(dq_accumulator_).view(), dq_);
    relay_.finish();
    for (Request& r : grad_sends_) channel_.wait_if_pending(r);
  }

 private:
  static int grad_tag(int step) { return stream_tag(TagStream::kBackwardGrad, step); }
  static int home_tag(int step) { return stream_tag(TagStream::kBackwardHome, step); }
  std::span<float> share(size_t i) const {
    return shares_.subspan(i * static_cast<size_t>(own_floats_), static_cast<size_t>(own_floats_));
  }

  // The kernel's backward of this rank's queries against the current block (of kv_block's
  // positions and documents): dq accumulates, dk/dv go into target_k / target_v.
  void compute_share(int kv_block, View target_k, View target_v) {
    const std::vector<int64_t>& q_pos = p_.q_blocks->pos[static_cast<size_t>(d_.rank)];
    const std::vector<int64_t>& q_doc = p_.q_blocks->doc[static_cast<size_t>(d_.rank)];
    const std::vector<int64_t>& k_pos = p_.kv_blocks->pos[static_cast<size_t>(kv_block)];
    const std::vector<int64_t>& k_doc = p_.kv_blocks->doc[static_cast<size_t>(kv_block)];
    AttentionInputs in{p_.q, relay_.k(), relay_.v(), q_pos, k_pos, q_doc, k_doc};
    in.head_offset = p_.head_offset;
    in.total_heads = p_.total_heads;
    const double comm0 = options_.stats ? options_.stats->comm_seconds : 0.0;
    const Stopwatch watch;
    // With delta given the kernel never reads out (kernel.h): dout stands in for it.
    attention_kernel_backward(in, p_.params, p_.rng, dout_, dout_, lse_, dq_target_, target_k,
                              target_v, kernel_);
    if (options_.stats != nullptr) {
      // The accumulator's wait inside the call is communication, counted as such.
      options_.stats->kernel_seconds += watch.seconds() - (options_.stats->comm_seconds - comm0);
    }
  }

  // Where step s's accumulator goes: home (a direct block; the last rank on the block's path),
  // or on to the next rank while later ranks need the block.
  void send_accumulator(const RingStep& step, int s, int64_t floats, bool direct) {
    const int cur = s % 2;
    const int reach = plan_.reach(step.kv_block);
    if (s == 0 && reach == 0) {
      // No other rank needs the own block: this share is its finished dk/dv (grad[0] is reused
      // at step 2).
      copy_view(pk_.k(static_cast<const float*>(grad_[0].data()), d_.Sk), dk_);
      copy_view(pk_.v(static_cast<const float*>(grad_[0].data()), d_.Sk), dv_);
    }
    if (direct) {
      if (s > 0) {
        grad_sends_[cur] = channel_.send(first(grad_[cur], floats), step.kv_block, home_tag(s));
      }
    } else if (s < reach) {
      grad_sends_[cur] = channel_.send(first(grad_[cur], floats), step.grad_send_to, grad_tag(s));
    } else if (s > 0) {
      // The last rank on the block's path: the accumulator is finished; straight home.
      grad_sends_[cur] = channel_.send(first(grad_[cur], floats), step.kv_block, home_tag(s));
    }
  }

  Communicator& comm_;
  const RingProblem& p_;
  const CpOptions& options_;
  const CpDims d_;
  CpChannel channel_;
  ConstView dout_;
  std::span<const float> lse_;
  View dq_, dk_, dv_;
  const bool own_dq_;
  Tensor dq_accumulator_;
  View dq_target_;
  const RelayPlan plan_;
  std::optional<WorkspaceLease> own_lease_;
  WorkspaceLease& buffers_;
  KvRelay relay_;
  const PackedKv pk_;     // the fp32 dk/dv accumulators
  const PackedKv pk_kv_;  // the travelling k/v blocks
  const int own_reach_;
  const std::vector<int>& share_steps_;
  const int64_t own_floats_;
  std::array<std::span<float>, 2> grad_{};
  std::span<float> home_, shares_;
  std::span<float> dsink_;  // until the first computed block: the sink gradient it writes
  BackwardOptions kernel_;
  std::array<Request, 2> grad_sends_;
  Request grad_recv_, home_recv_;
  std::vector<Request> share_recvs_;
};

}  // namespace

void ring_backward(Communicator& comm, const RingProblem& p, const CpOptions& options,
                   ConstView dout, std::span<const float> lse, std::span<const float> delta,
                   View dq, View dk, View dv, std::span<float> dsink, WorkspaceLease* lease) {
  {
    RingBackwardPass pass(comm, p, options, dout, lse, delta, dq, dk, dv, dsink, lease);
    pass.count_plain_ring_bytes();
    pass.post_home_receives();
    for (int s = 0; s < comm.size(); ++s) pass.step(s);
    pass.finish();
  }
  // Borrowed through an outer call's lease: free call-owned buffers now, not at its end.
  if (lease != nullptr) {
    lease->done({WorkspaceBuffer::kRelay0, WorkspaceBuffer::kRelay1, WorkspaceBuffer::kOwnKv,
                 WorkspaceBuffer::kGrad0, WorkspaceBuffer::kGrad1, WorkspaceBuffer::kHome,
                 WorkspaceBuffer::kShares});
  }
}

AttentionGradients ring_call_backward(const CpCall& c, const BackwardState& s) {
  const CpDims& d = c.d;
  const CallTimer call_timer(c.options.stats);
  MemoryCounter* mem = &c.comm.memory();
  const BlockTable q_blocks = BlockTable::of(c.q_seq);
  const BlockTable kv_blocks = BlockTable::of(c.kv_seq);
  AttentionGradients g{Tensor({d.B, d.Sq, d.Hq, d.Dqk}, c.q.dtype, mem),
                       Tensor({d.B, d.Sk, d.Hkv, d.Dqk}, c.q.dtype, mem),
                       Tensor({d.B, d.Sk, d.Hkv, d.Dv}, c.q.dtype, mem)};
  const Tensor delta = row_dot(s.dout, s.out, kernel_options(c.comm, c.options), mem);
  const RingProblem p{c.q, c.k, c.v, &q_blocks, &kv_blocks, c.params, c.rng};
  Tensor dsink = dsink_partial(c, mem);
  ring_backward(c.comm, p, c.options, s.dout, s.lse, delta.span(), g.dq.view(), g.dk.view(),
                g.dv.view(), dsink.span());
  g.dsink = reduce_dsink(c.comm, c.options, dsink.span(), mem);
  return g;
}

}  // namespace detail

}  // namespace cpattn
