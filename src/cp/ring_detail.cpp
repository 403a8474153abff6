// Validation, packing and block-skip helpers of the ring (ring_detail.h).
#include "cp/ring_detail.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpattn/error.h"

namespace cpattn::detail {

namespace {

std::string shape_str(const std::array<int64_t, 4>& s) {
  return str_cat("[", s[0], ", ", s[1], ", ", s[2], ", ", s[3], "]");
}

void check_shape(const char* name, const char* dims, ConstView t,
                 const std::array<int64_t, 4>& want) {
  CPATTN_CHECK(t.shape == want, ErrorCode::kShapeMismatch, name, " must have shape ", dims, " = ",
               shape_str(want), ", got ", shape_str(t.shape));
  CPATTN_CHECK(t.data != nullptr || t.numel() == 0, ErrorCode::kInvalidArgument, name,
               ": null data for a non-empty tensor");
}

}  // namespace

RingDims validate_ring_call(const Communicator& comm, ConstView q, ConstView k, ConstView v,
                            const SequenceSharding& q_sharding, const SequenceSharding& kv_sharding,
                            const AttentionParams& params, const RingOptions& options) {
  q_sharding.validate();
  kv_sharding.validate();
  RingDims d;
  d.world = comm.size();
  d.rank = comm.rank();
  CPATTN_CHECK_EQ(q_sharding.cp_size, d.world, ErrorCode::kInvalidArgument,
                  "q sharding cp_size (communicator size)");
  CPATTN_CHECK_EQ(kv_sharding.cp_size, d.world, ErrorCode::kInvalidArgument,
                  "kv sharding cp_size (communicator size)");
  CPATTN_CHECK_EQ(q_sharding.cp_rank, d.rank, ErrorCode::kInvalidArgument,
                  "q sharding cp_rank (communicator rank)");
  CPATTN_CHECK_EQ(kv_sharding.cp_rank, d.rank, ErrorCode::kInvalidArgument,
                  "kv sharding cp_rank (communicator rank)");
  CPATTN_CHECK(q_sharding.docs.empty() == kv_sharding.docs.empty(), ErrorCode::kInvalidArgument,
               "document ids must be given for both q and kv shardings or for neither");
  // Parameters are checked here although the kernel checks them too: a rank whose blocks are all
  // masked never calls the kernel, and every rank must reject a bad call alike, before any message.
  CPATTN_CHECK(!params.softmax_scale || std::isfinite(*params.softmax_scale),
               ErrorCode::kInvalidArgument, "softmax_scale: expected a finite value, got ",
               params.softmax_scale.value_or(0.0f));
  CPATTN_CHECK(params.dropout_p >= 0.0f && params.dropout_p < 1.0f, ErrorCode::kInvalidArgument,
               "dropout_p: expected in [0, 1), got ", params.dropout_p);
  CPATTN_CHECK(params.window_left >= -1 && params.window_right >= -1, ErrorCode::kInvalidArgument,
               "window_left/window_right: expected >= -1, got ", params.window_left, "/",
               params.window_right);
  CPATTN_CHECK(options.num_threads >= 1, ErrorCode::kInvalidArgument,
               "RingOptions.num_threads: expected >= 1, got ", options.num_threads);

  d.B = q.shape[0];
  d.Sq = q_sharding.local_length();
  d.Hq = q.shape[2];
  d.Dqk = q.shape[3];
  d.Sk = kv_sharding.local_length();
  d.Hkv = k.shape[2];
  d.Dv = v.shape[3];
  check_shape("q", "[B, Sq_local, Hq, Dqk]", q, {d.B, d.Sq, d.Hq, d.Dqk});
  check_shape("k", "[B, Sk_local, Hkv, Dqk]", k, {d.B, d.Sk, d.Hkv, d.Dqk});
  check_shape("v", "[B, Sk_local, Hkv, Dv]", v, {d.B, d.Sk, d.Hkv, d.Dv});
  CPATTN_CHECK(d.Hkv >= 1 && d.Hq % d.Hkv == 0, ErrorCode::kShapeMismatch,
               "Hq must be a multiple of Hkv >= 1, got Hq ", d.Hq, ", Hkv ", d.Hkv);
  CPATTN_CHECK(d.Dqk >= 1 && d.Dv >= 1, ErrorCode::kShapeMismatch,
               "head dims must be >= 1, got Dqk ", d.Dqk, ", Dv ", d.Dv);
  for (int r = 0; r < d.world; ++r)
    d.max_block = std::max(d.max_block, kv_sharding.local_length(r));
  return d;
}

Request RingChannel::send(std::span<const float> data, int dest, int tag) {
  const ScopedSeconds t(stats_ ? &stats_->comm_seconds : nullptr);
  if (stats_ != nullptr) {
    ++stats_->messages_sent;
    stats_->bytes_sent += static_cast<int64_t>(data.size_bytes());
  }
  return comm_.isend(data, dest, tag);
}

Request RingChannel::recv(std::span<float> data, int src, int tag) {
  const ScopedSeconds t(stats_ ? &stats_->comm_seconds : nullptr);
  return comm_.irecv(data, src, tag);
}

void RingChannel::wait_recv(Request& r, int64_t floats, const char* what) {
  size_t got = 0;
  {
    const ScopedSeconds t(stats_ ? &stats_->comm_seconds : nullptr);
    got = r.wait();
  }
  CPATTN_CHECK_EQ(got, static_cast<size_t>(floats) * sizeof(float), ErrorCode::kCommunication,
                  what);
}

void RingChannel::wait_if_pending(Request& r) {
  if (!r.valid()) return;
  const ScopedSeconds t(stats_ ? &stats_->comm_seconds : nullptr);
  r.wait();
}

CallTimer::CallTimer(RingStats* stats) : stats_(stats) {
  if (stats_ == nullptr) return;
  kernel0_ = stats_->kernel_seconds;
  comm0_ = stats_->comm_seconds;
  start_ = std::chrono::steady_clock::now();
}

CallTimer::~CallTimer() {
  if (stats_ == nullptr) return;
  const double total =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  stats_->other_seconds +=
      total - (stats_->kernel_seconds - kernel0_) - (stats_->comm_seconds - comm0_);
}

View PackedKv::k(float* base, int64_t len) const {
  const std::array<int64_t, 4> shape{B, len, Hkv, Dk};
  return {base, shape, dense_strides(shape, MemoryLayout::kBSHD)};
}

View PackedKv::v(float* base, int64_t len) const {
  const std::array<int64_t, 4> shape{B, len, Hkv, Dv};
  return {base + B * len * Hkv * Dk, shape, dense_strides(shape, MemoryLayout::kBSHD)};
}

void copy_view(ConstView src, View dst) {
  const int64_t D = src.shape[3], ss = src.stride[3], ds = dst.stride[3];
  for (int64_t b = 0; b < src.shape[0]; ++b) {
    for (int64_t s = 0; s < src.shape[1]; ++s) {
      for (int64_t h = 0; h < src.shape[2]; ++h) {
        const float* from = &src(b, s, h, 0);
        float* to = &dst(b, s, h, 0);
        if (ss == 1 && ds == 1) {
          std::copy_n(from, D, to);  // the common case: rows of D contiguous floats
        } else {
          for (int64_t x = 0; x < D; ++x) to[x * ds] = from[x * ss];
        }
      }
    }
  }
}

void pack_kv(const PackedKv& p, ConstView k, ConstView v, float* base) {
  copy_view(k, p.k(base, k.shape[1]));
  copy_view(v, p.v(base, k.shape[1]));
}

namespace {

struct Range {
  int64_t lo, hi;
};
// pos + window (both >= 0) saturated at INT64_MAX: a huge window_right must not wrap negative.
int64_t add_window(int64_t pos, int64_t window) {
  return window > std::numeric_limits<int64_t>::max() - pos ? std::numeric_limits<int64_t>::max()
                                                            : pos + window;
}
Range range_of(std::span<const int64_t> x) {
  const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
  return {*lo, *hi};
}

}  // namespace

bool block_hidden(std::span<const int64_t> q_pos, std::span<const int64_t> k_pos,
                  std::span<const int64_t> q_doc, std::span<const int64_t> k_doc,
                  const AttentionParams& params) {
  if (q_pos.empty() || k_pos.empty()) return true;
  const Range q = range_of(q_pos), k = range_of(k_pos);
  // Every key after every query: causal hides all; so does a bounded right window.
  if (params.causal && k.lo > q.hi) return true;
  if (params.window_right >= 0 && k.lo > add_window(q.hi, params.window_right)) return true;
  if (params.window_left >= 0 && k.hi < q.lo - params.window_left) return true;
  if (!q_doc.empty() && !k_doc.empty()) {
    const Range qd = range_of(q_doc), kd = range_of(k_doc);
    if (qd.hi < kd.lo || kd.hi < qd.lo) return true;
  }
  return false;
}

int64_t count_visible_pairs(std::span<const int64_t> q_pos, std::span<const int64_t> k_pos,
                            std::span<const int64_t> q_doc, std::span<const int64_t> k_doc,
                            const AttentionParams& params) {
  const bool docs = !q_doc.empty() && !k_doc.empty();
  int64_t n = 0;
  for (size_t i = 0; i < q_pos.size(); ++i) {
    for (size_t j = 0; j < k_pos.size(); ++j) {
      const int64_t qi = q_pos[i], kj = k_pos[j];
      if (params.causal && kj > qi) continue;
      if (params.window_left >= 0 && kj < qi - params.window_left) continue;
      if (params.window_right >= 0 && kj > add_window(qi, params.window_right)) continue;
      if (docs && q_doc[i] != k_doc[j]) continue;
      ++n;
    }
  }
  return n;
}

}  // namespace cpattn::detail
