// Fingerprint: what identifies one attention call, and the readable list of what differs.
#include <cmath>

#include "cpattn/attention.h"
#include "cpattn/digest.h"
#include "cpattn/error.h"

namespace cpattn {

namespace {

// Appends "ForwardResult was produced with <name>=<recorded>, backward called with <name>=<called>"
// when the two differ.
template <typename T, typename Format>
void compare(std::vector<std::string>& out, const char* name, const T& recorded, const T& called,
             Format format) {
  if (recorded == called) return;
  out.push_back(detail::str_cat("ForwardResult was produced with ", name, "=", format(recorded),
                                ", backward called with ", name, "=", format(called)));
}

void add_sharding(Digest& d, const SequenceSharding& seq) {
  d.value(seq.layout).value(seq.seq_len);
  d.values(std::span<const int64_t>(seq.positions));
  d.values(std::span<const int64_t>(seq.docs));
}

}  // namespace

std::vector<std::string> Fingerprint::differences(const Fingerprint& called) const {
  std::vector<std::string> d;
  const auto plain = [](const auto& x) { return x; };
  const auto shape = [](const std::array<int64_t, 4>& a) { return shape_string(a); };
  const auto hex = [](uint64_t x) { return digest_hex(x); };
  const auto boolean = [](bool b) { return b ? "true" : "false"; };
  const auto layout = [](Layout l) { return layout_name(l); };
  if (cp_rank != called.cp_rank || cp_size != called.cp_size) {
    d.push_back(detail::str_cat("ForwardResult was produced for cp_rank ", cp_rank, " of ", cp_size,
                                ", backward called on cp_rank ", called.cp_rank, " of ",
                                called.cp_size));
  }
  compare(d, "q shape", q_shape, called.q_shape, shape);
  compare(d, "k shape", k_shape, called.k_shape, shape);
  compare(d, "v shape", v_shape, called.v_shape, shape);
  compare(d, "q strides", q_stride, called.q_stride, shape);
  compare(d, "k strides", k_stride, called.k_stride, shape);
  compare(d, "v strides", v_stride, called.v_stride, shape);
  compare(d, "dtype", dtype, called.dtype, [](DType t) { return std::string(dtype_name(t)); });
  compare(d, "q layout", q_layout, called.q_layout, layout);
  compare(d, "kv layout", kv_layout, called.kv_layout, layout);
  compare(d, "q seq_len", q_seq_len, called.q_seq_len, plain);
  compare(d, "kv seq_len", kv_seq_len, called.kv_seq_len, plain);
  compare(d, "positions/documents digest", positions_digest, called.positions_digest, hex);
  compare(d, "q/k/v inputs digest", inputs_digest, called.inputs_digest, hex);
  compare(d, "softmax_scale", softmax_scale, called.softmax_scale, plain);
  compare(d, "causal", causal, called.causal, boolean);
  compare(d, "window_left", window_left, called.window_left, plain);
  compare(d, "window_right", window_right, called.window_right, plain);
  compare(d, "dropout_p", dropout_p, called.dropout_p, plain);
  compare(d, "strategy", strategy, called.strategy,
          [](const Strategy& x) { return strategy_name(x); });
  compare(d, "kernel numerics", numerics, called.numerics,
          [](KernelNumerics x) { return std::string(kernel_numerics_name(x)); });
  compare(d, "rng", rng, called.rng, [](RngState r) { return to_string(r); });
  return d;
}

Fingerprint make_fingerprint(int cp_rank, int cp_size, ConstView q, ConstView k, ConstView v,
                             const SequenceSharding& q_seq, const SequenceSharding& kv_seq,
                             const AttentionParams& params, RngState rng, const Strategy& strategy,
                             Isa isa) {
  // q, k and v are hashed before any ring validation (backward and recompute check the state
  // first), so a view that cannot be read must be refused here, not dereferenced.
  check_readable(q, "q");
  check_readable(k, "k");
  check_readable(v, "v");
  const AttentionParams resolved = resolve_params(params, q.shape[3]);
  Fingerprint fp;
  fp.q_shape = q.shape;
  fp.k_shape = k.shape;
  fp.v_shape = v.shape;
  fp.q_stride = q.stride;
  fp.k_stride = k.stride;
  fp.v_stride = v.stride;
  fp.dtype = q.dtype;
  Digest positions;
  add_sharding(positions, q_seq);
  add_sharding(positions, kv_seq);
  fp.positions_digest = positions.finish();
  fp.inputs_digest = Digest().view(q).view(k).view(v).finish();
  fp.softmax_scale = *resolved.softmax_scale;
  fp.causal = resolved.causal;
  fp.window_left = resolved.window_left;
  fp.window_right = resolved.window_right;
  fp.dropout_p = resolved.dropout_p;
  fp.q_layout = q_seq.layout;
  fp.kv_layout = kv_seq.layout;
  fp.q_seq_len = q_seq.seq_len;
  fp.kv_seq_len = kv_seq.seq_len;
  fp.cp_rank = cp_rank;
  fp.cp_size = cp_size;
  fp.strategy = strategy;
  fp.numerics = kernel_numerics(resolve_isa(isa), q.dtype);
  fp.rng = rng;
  return fp;
}

}  // namespace cpattn
