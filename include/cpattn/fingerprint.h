// The Fingerprint of a checked attention call (docs/design.md section 6): what identifies it on
// one rank, recorded by forward and checked by backward, recompute and the call agreement. Its
// fields are one list, CPATTN_FINGERPRINT_FIELDS; the struct, the comparison and its text
// (Fingerprint::differences), the byte form (fingerprint_bytes) and the part the ranks of a group
// agree on (the call agreement's record) all derive from it, so a field added to the list is
// compared, serialized and agreed without another edit.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "cpattn/dtype.h"
#include "cpattn/isa.h"
#include "cpattn/layout.h"
#include "cpattn/params.h"
#include "cpattn/rng.h"
#include "cpattn/strategy.h"
#include "cpattn/tensor.h"

namespace cpattn {

/// A rank's place in its CP group: rank `rank` of `size` ranks.
struct CpRank {
  int rank = 0;
  int size = 1;
  friend bool operator==(const CpRank&, const CpRank&) = default;
};

/// A q/k/v shape [B, S_r, H, D], or its strides (elements).
using Shape4 = std::array<int64_t, 4>;

/// How a Fingerprint field is checked: the last column of CPATTN_FINGERPRINT_FIELDS.
enum class FingerprintRole {
  kShared,  ///< the same on every rank: backward compares it, and so does the call agreement
  /// A [B, S_r, H, D] shape: backward compares it, the call agreement all of it but S_r (each
  /// rank's own sequence length).
  kSharedButLength,
  kOwn,  ///< this rank's own (its rank, strides, data): backward compares it, the agreement not
  /// What the forward records of its own run, not of its arguments (its call number, the digest
  /// of its out and lse): differences() and the call agreement do not compare it, since a
  /// backward's arguments have neither (the call agreement's record carries the call numbers
  /// itself; attention_backward digests the state's out and lse and compares that).
  kSetByForward,
};

/// The Fingerprint's fields, one row each: X(type, name, default, label, role) declares the
/// member `type name = default`, which messages call `label` and which is checked as `role`
/// says. The rows' order is the members' order, the order in which differences() lists what
/// differs and the call agreement looks for the first difference, and the order of the byte form.
// clang-format off
#define CPATTN_FINGERPRINT_FIELDS(X)                                                              \
  /* the call's rank and group size */                                                            \
  X(CpRank,         cp,               {},                  "cp_rank",                    kOwn)    \
  /* the shapes [B, S_r, H, D] of q, k and v */                                                   \
  X(Shape4,         q_shape,          {},                  "q shape",        kSharedButLength)    \
  X(Shape4,         k_shape,          {},                  "k shape",        kSharedButLength)    \
  X(Shape4,         v_shape,          {},                  "v shape",        kSharedButLength)    \
  /* their strides (elements) */                                                                  \
  X(Shape4,         q_stride,         {},                  "q strides",                  kOwn)    \
  X(Shape4,         k_stride,         {},                  "k strides",                  kOwn)    \
  X(Shape4,         v_stride,         {},                  "v strides",                  kOwn)    \
  /* of q, k and v (one dtype per call) */                                                        \
  X(DType,          dtype,            DType::kF32,         "dtype",                      kShared) \
  X(Layout,         q_layout,         Layout::kContiguous, "q layout",                   kShared) \
  X(Layout,         kv_layout,        Layout::kContiguous, "kv layout",                  kShared) \
  /* whole-sequence lengths Sq, Sk */                                                             \
  X(int64_t,        q_seq_len,        0,                   "q seq_len",                  kShared) \
  X(int64_t,        kv_seq_len,       0,                   "kv seq_len",                 kShared) \
  /* Digest of the layouts, lengths, global positions and document ids of both shardings */       \
  X(uint64_t,       positions_digest, 0,                   "positions/documents digest", kShared) \
  /* Digest of the values of q, k and v (identifies the layer and microbatch) */                  \
  X(uint64_t,       inputs_digest,    0,                   "q/k/v inputs digest",        kOwn)    \
  /* resolved: the default 1/sqrt(Dqk) filled in */                                               \
  X(float,          softmax_scale,    0.0f,                "softmax_scale",              kShared) \
  X(bool,           causal,           false,               "causal",                     kShared) \
  X(int64_t,        window_left,      -1,                  "window_left",                kShared) \
  X(int64_t,        window_right,     -1,                  "window_right",               kShared) \
  X(float,          dropout_p,        0.0f,                "dropout_p",                  kShared) \
  /* score features: the logit softcap (0: off); digests of the ALiBi slopes, sink logits */       \
  /* and mask slices (0: none; what each covers: make_fingerprint) */                              \
  X(float,          softcap,          0.0f,                "softcap",                    kShared) \
  X(uint64_t,       alibi_digest,     0,                   "alibi_slopes digest",        kShared) \
  X(uint64_t,       sink_digest,      0,                   "sink digest",                kShared) \
  X(uint64_t,       slices_digest,    0,                   "slices digest",              kShared) \
  /* how the group split the call (CpOptions::strategy): its out/lse carry its rounding */        \
  X(Strategy,       strategy,         {},                  "strategy",                   kShared) \
  /* the kernel arithmetic of the resolved path (cpattn/isa.h: kernel_numerics) */                \
  X(KernelNumerics, numerics,         KernelNumerics::kFma, "kernel numerics",           kShared) \
  /* the dropout stream */                                                                        \
  X(RngState,       rng,              {},                  "rng",                        kShared) \
  /* Digest of the forward's out and lse (outputs_digest; kInputsNotDigested when q/k/v were */   \
  /* not digested either): backward refuses a state whose out or lse changed since */             \
  X(uint64_t,       outputs_digest,   0,                   "out/lse digest",       kSetByForward) \
  /* the forward's number among the group's checked calls (set_next_call_number, attention.h) */ \
  X(uint64_t,       call_number,      0,                   "call number",          kSetByForward)
// clang-format on

/// Fingerprint::inputs_digest of a forward made with CpOptions::for_backward false: q, k and v
/// were not digested, and no backward or recompute accepts the state (a real digest is 0 with
/// probability 2^-64).
inline constexpr uint64_t kInputsNotDigested = 0;

/// Everything that identifies one attention call on one rank, recorded by forward and checked by
/// backward: the members of CPATTN_FINGERPRINT_FIELDS (above; their comments say what each
/// holds). Digests are 64-bit content hashes (cpattn/digest.h). A state from another strategy, or
/// computed with other kernel arithmetic, is refused like one of another shape. call_number is
/// the same on every rank, so a backward that uses another forward's state than the other ranks'
/// is caught by the call agreement; outputs_digest lets attention_backward refuse out or lse
/// changed after the forward; differences() compares neither.
struct Fingerprint {
#define CPATTN_FINGERPRINT_MEMBER(type, name, init, label, role) type name = init;
  CPATTN_FINGERPRINT_FIELDS(CPATTN_FINGERPRINT_MEMBER)
#undef CPATTN_FINGERPRINT_MEMBER

  /// One human-readable sentence per differing field (every field but those of role
  /// kSetByForward), in the list's order, phrased "ForwardResult was produced with
  /// <label>=<this>, <caller> called with <label>=<other>" ("ForwardResult was produced for
  /// cp_rank 0 of 4, backward called on cp_rank 1 of 4" for the rank; a recorded inputs_digest of
  /// kInputsNotDigested is said to come from a forward with CpOptions::for_backward false).
  /// caller names the call that brought `called`: "backward" or "recompute". Empty when equal.
  std::vector<std::string> differences(const Fingerprint& called,
                                       std::string_view caller = "backward") const;
};

namespace detail {

/// One row of CPATTN_FINGERPRINT_FIELDS: the member, its label and its role.
template <typename T>
struct FingerprintField {
  using Type = T;
  T Fingerprint::*member;
  const char* label;
  FingerprintRole role;
};

/// Every row of CPATTN_FINGERPRINT_FIELDS, in the list's order.
inline constexpr std::tuple kFingerprintFields{
#define CPATTN_FINGERPRINT_FIELD(type, name, init, label, role) \
  FingerprintField<type>{&Fingerprint::name, label, FingerprintRole::role},
    CPATTN_FINGERPRINT_FIELDS(CPATTN_FINGERPRINT_FIELD)
#undef CPATTN_FINGERPRINT_FIELD
};

/// Calls f(field) for every row of CPATTN_FINGERPRINT_FIELDS (a FingerprintField<T>), in order.
template <typename F>
constexpr void for_each_fingerprint_field(F&& f) {
  std::apply([&](const auto&... field) { (f(field), ...); }, kFingerprintFields);
}

/// Calls f(s) for every scalar s (arithmetic or enum) of a field's value `x`, in the order of the
/// byte form: an array's elements in order; the members of RngState, Strategy and CpRank as
/// declared. (fingerprint.cpp asserts that these structs have no other member.)
template <typename T, typename F>
constexpr void for_each_scalar(T& x, F&& f) {
  using V = std::remove_const_t<T>;
  if constexpr (std::is_arithmetic_v<V> || std::is_enum_v<V>) {
    f(x);
  } else if constexpr (std::is_same_v<V, RngState>) {
    f(x.seed);
    f(x.offset);
  } else if constexpr (std::is_same_v<V, Strategy>) {
    f(x.kind);
    f(x.ulysses_size);
    f(x.ring_size);
  } else if constexpr (std::is_same_v<V, CpRank>) {
    f(x.rank);
    f(x.size);
  } else {
    for (auto& element : x) for_each_scalar(element, f);
  }
}

/// Bytes of a value of type T in the byte form: the sizes of its scalars.
template <typename T>
constexpr size_t serialized_size() {
  T x{};
  size_t n = 0;
  for_each_scalar(x, [&](const auto& s) { n += sizeof s; });
  return n;
}

}  // namespace detail

/// Bytes of a Fingerprint's byte form (fingerprint_bytes): the scalars of every field, no padding.
inline constexpr size_t kFingerprintBytes = [] {
  size_t n = 0;
  detail::for_each_fingerprint_field([&](const auto& field) {
    n += detail::serialized_size<typename std::remove_cvref_t<decltype(field)>::Type>();
  });
  return n;
}();

/// The byte form of `fp`: every field of CPATTN_FINGERPRINT_FIELDS in the list's order (the
/// RngState and call_number included), each scalar in host byte order (little-endian on x86-64)
/// and nothing between them: integers and floats their bytes, enums their underlying integer,
/// bools one byte 0 or 1, arrays and RngState / Strategy / CpRank their members in order.
/// Deterministic, with no padding: fields with equal values (floats: equal bits) give equal
/// bytes. It lets a framework carry a forward's fingerprint in a uint8 tensor of
/// kFingerprintBytes elements (PyTorch custom ops may only return tensors, and
/// torch.library.opcheck compares their outputs bitwise) and hand it back to backward.
std::array<uint8_t, kFingerprintBytes> fingerprint_bytes(const Fingerprint& fp) noexcept;

/// The Fingerprint whose byte form is `bytes` (the inverse of fingerprint_bytes). Throws
/// Error(kInvalidArgument) when bytes.size() != kFingerprintBytes, when an enum field holds a
/// value that is none of its enumerators (dtype, layouts, strategy kind, kernel numerics), or
/// when a bool's byte is neither 0 nor 1, naming the field.
Fingerprint fingerprint_from_bytes(std::span<const uint8_t> bytes);

/// The fingerprint of a call with these arguments (what forward records and backward recomputes);
/// `isa` is the call's requested path (CpOptions::isa), resolved here (resolve_isa). call_number
/// is 0 (the forward sets it). The score features' digests cover every value's bits in order:
/// alibi_digest the slopes, sink_digest the sink logits (so a backward with another sink than
/// its forward's is refused), slices_digest each slice's q/k ranges and type; each is 0 when its
/// list is empty.
/// Cost: one pass over q, k and v (Digest::view on up to `num_threads` threads, the call's
/// CpOptions::num_threads), about 1 % of an S 4096 forward (docs/performance.md); with
/// digest_inputs false (a forward with CpOptions::for_backward false) that pass is skipped and
/// inputs_digest is kInputsNotDigested.
/// Throws like attention_forward on inconsistent arguments, and resolve_isa's errors.
Fingerprint make_fingerprint(int cp_rank, int cp_size, ConstView q, ConstView k, ConstView v,
                             const SequenceSharding& q_seq, const SequenceSharding& kv_seq,
                             const AttentionParams& params, RngState rng,
                             const Strategy& strategy = {}, Isa isa = Isa::kAuto,
                             int num_threads = 1, bool digest_inputs = true);

}  // namespace cpattn
