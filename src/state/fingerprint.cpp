// Fingerprint: what identifies one attention call, and the readable list of what differs.
#include <cmath>
#include <sstream>

#include "cpattn/attention.h"
#include "cpattn/digest.h"
#include "cpattn/error.h"

namespace cpattn {

namespace {

std::string shape_text(const std::array<int64_t, 4>& a) {
  std::ostringstream os;
  os << '[' << a[0] << ", " << a[1] << ", " << a[2] << ", " << a[3] << ']';
  return os.str();
}

std::string rng_text(RngState r) {
  return detail::str_cat("{seed=", r.seed, ", offset=", r.offset, "}");
}

// Appends "ForwardResult was produced with <name>=<recorded>, backward called with <name>=<called>"
// when the two differ.
template <typename T, typename Format>
void compare(std::vector<std::string>& out, const char* name, const T& recorded, const T& called,
             Format format) {
  if (recorded == called) return;
  out.push_back(detail::str_cat("ForwardResult was produced with ", name, "=", format(recorded),
                                ", backward called with ", name, "=", format(called)));
}

// make_fingerprint hashes q, k and v before any ring validation (backward and recompute check
// the state first), so a view that cannot be read must be refused here, not dereferenced.
void check_readable(ConstView x, const char* name) {
  for (int i = 0; i < 4; ++i) {
    CPATTN_CHECK(x.shape[i] >= 0, ErrorCode::kShapeMismatch, name,
                 ": dimensions must be >= 0, got ", shape_text(x.shape));
    CPATTN_CHECK(x.stride[i] >= 0, ErrorCode::kShapeMismatch, name, ": strides must be >= 0, got ",
                 shape_text(x.stride));
  }
  CPATTN_CHECK(x.data != nullptr || x.numel() == 0, ErrorCode::kInvalidArgument, name,
               ": null data pointer for shape ", shape_text(x.shape));
}

}  // namespace

std::vector<std::string> Fingerprint::differences(const Fingerprint& called) const {
  std::vector<std::string> d;
  const auto plain = [](const auto& x) { return x; };
  const auto hex = [](uint64_t x) { return digest_hex(x); };
  const auto boolean = [](bool b) { return b ? "true" : "false"; };
  if (cp_rank != called.cp_rank || cp_size != called.cp_size) {
    d.push_back(detail::str_cat("ForwardResult was produced for cp_rank ", cp_rank, " of ", cp_size,
                                ", backward called on cp_rank ", called.cp_rank, " of ",
                                called.cp_size));
  }
  compare(d, "q shape", q_shape, called.q_shape, shape_text);
  compare(d, "k shape", k_shape, called.k_shape, shape_text);
  compare(d, "v shape", v_shape, called.v_shape, shape_text);
  compare(d, "q strides", q_stride, called.q_stride, shape_text);
  compare(d, "k strides", k_stride, called.k_stride, shape_text);
  compare(d, "v strides", v_stride, called.v_stride, shape_text);
  compare(d, "layout", layout, called.layout, [](Layout l) { return layout_name(l); });
  compare(d, "seq_len", seq_len, called.seq_len, plain);
  compare(d, "positions/documents digest", positions_digest, called.positions_digest, hex);
  compare(d, "q/k/v inputs digest", inputs_digest, called.inputs_digest, hex);
  compare(d, "softmax_scale", softmax_scale, called.softmax_scale, plain);
  compare(d, "causal", causal, called.causal, boolean);
  compare(d, "window_left", window_left, called.window_left, plain);
  compare(d, "window_right", window_right, called.window_right, plain);
  compare(d, "dropout_p", dropout_p, called.dropout_p, plain);
  compare(d, "rng", rng, called.rng, rng_text);
  return d;
}

Fingerprint make_fingerprint(int cp_rank, int cp_size, ConstView q, ConstView k, ConstView v,
                             const SequenceSharding& seq, const AttentionParams& params,
                             RngState rng) {
  check_readable(q, "q");
  check_readable(k, "k");
  check_readable(v, "v");
  Fingerprint fp;
  fp.q_shape = q.shape;
  fp.k_shape = k.shape;
  fp.v_shape = v.shape;
  fp.q_stride = q.stride;
  fp.k_stride = k.stride;
  fp.v_stride = v.stride;
  Digest positions;
  positions.value(seq.layout).value(seq.seq_len);
  positions.values(std::span<const int64_t>(seq.positions));
  positions.values(std::span<const int64_t>(seq.docs));
  fp.positions_digest = positions.finish();
  fp.inputs_digest = Digest().view(q).view(k).view(v).finish();
  CPATTN_CHECK(q.shape[3] > 0 || params.softmax_scale.has_value(), ErrorCode::kInvalidArgument,
               "softmax_scale must be given when Dqk = 0");
  fp.softmax_scale = params.softmax_scale.value_or(
      q.shape[3] > 0 ? 1.0f / std::sqrt(static_cast<float>(q.shape[3])) : 0.0f);
  fp.causal = params.causal;
  fp.window_left = params.window_left;
  fp.window_right = params.window_right;
  fp.dropout_p = params.dropout_p;
  fp.layout = seq.layout;
  fp.seq_len = seq.seq_len;
  fp.cp_rank = cp_rank;
  fp.cp_size = cp_size;
  fp.rng = rng;
  return fp;
}

}  // namespace cpattn
