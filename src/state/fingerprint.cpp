// Fingerprint: what identifies one attention call, the readable list of what differs and the
// byte form, all over the field list (cpattn/fingerprint.h).
#include <cstring>

#include "cpattn/attention.h"
#include "cpattn/digest.h"
#include "cpattn/error.h"
#include "state/fingerprint_fields.h"

namespace cpattn {

// for_each_scalar visits these structs member by member: a member it does not know would be
// missing from the byte form.
static_assert(sizeof(RngState) == 2 * sizeof(uint64_t), "for_each_scalar: RngState's members");
static_assert(sizeof(Strategy) == sizeof(Strategy::Kind) + 2 * sizeof(int),
              "for_each_scalar: Strategy's members");
static_assert(sizeof(CpRank) == 2 * sizeof(int), "for_each_scalar: CpRank's members");

namespace {

// "ForwardResult was produced with <label>=<recorded>, <caller> called with <label>=<called>".
template <typename T>
std::string difference(const char* label, const T& recorded, const T& called,
                       std::string_view caller) {
  return detail::str_cat("ForwardResult was produced with ", label, "=",
                         detail::field_text(recorded), ", ", caller, " called with ", label, "=",
                         detail::field_text(called));
}

// "ForwardResult was produced for cp_rank 0 of 4, backward called on cp_rank 1 of 4".
std::string difference(const char* label, const CpRank& recorded, const CpRank& called,
                       std::string_view caller) {
  return detail::str_cat("ForwardResult was produced for ", label, " ",
                         detail::field_text(recorded), ", ", caller, " called on ", label, " ",
                         detail::field_text(called));
}

// Feeds a sharding's layout, whole length, positions and document ids to `d`.
void add_sharding(Digest& d, const SequenceSharding& seq) {
  d.value(seq.layout).value(seq.seq_len);
  d.values(std::span<const int64_t>(seq.positions));
  d.values(std::span<const int64_t>(seq.docs));
}

// The digest of a per-head parameter (its values' bits, in order) or of the mask slices (each
// slice's ranges and type, in order): 0 when there is none, so a call without the feature keeps
// the field's default.
uint64_t digest_or_zero(std::span<const float> values) {
  return values.empty() ? 0 : Digest().values(values).finish();
}
uint64_t digest_or_zero(std::span<const MaskSlice> slices) {
  if (slices.empty()) return 0;
  Digest d;
  for (const MaskSlice& s : slices) {
    d.value(s.q_begin).value(s.q_end).value(s.k_begin).value(s.k_end).value(s.type);
  }
  return d.finish();
}

// Whether an enum value is one of its enumerators: the name functions know every one.
template <typename E>
bool named(E value) {
  if constexpr (std::is_same_v<E, Strategy::Kind>) {
    return strategy_name({value, 0, 0}) != "?";
  } else {
    return detail::field_text(value) != "?";
  }
}

// Reads the byte form; with `checked`, refuses (kInvalidArgument) enum values without a name
// and bools that are neither 0 nor 1, else keeps them (a bool as byte != 0).
Fingerprint read_bytes(std::span<const uint8_t, kFingerprintBytes> bytes, bool checked) {
  Fingerprint fp;
  size_t at = 0;
  detail::for_each_fingerprint_field([&](const auto& field) {
    detail::for_each_scalar(fp.*field.member, [&](auto& scalar) {
      using S = std::remove_reference_t<decltype(scalar)>;
      if constexpr (std::is_same_v<S, bool>) {
        CPATTN_CHECK(!checked || bytes[at] <= 1, ErrorCode::kInvalidArgument,
                     "fingerprint_from_bytes: ", field.label, " byte is ", int(bytes[at]),
                     ", not 0 or 1");
        scalar = bytes[at] != 0;
      } else {
        std::memcpy(&scalar, bytes.data() + at, sizeof scalar);
        if constexpr (std::is_enum_v<S>) {
          CPATTN_CHECK(!checked || named(scalar), ErrorCode::kInvalidArgument,
                       "fingerprint_from_bytes: ", field.label, " holds ",
                       static_cast<std::underlying_type_t<S>>(scalar),
                       ", which is none of its values");
        }
      }
      at += sizeof scalar;
    });
  });
  return fp;
}

}  // namespace

std::vector<std::string> Fingerprint::differences(const Fingerprint& called,
                                                  std::string_view caller) const {
  std::vector<std::string> d;
  detail::for_each_fingerprint_field([&](const auto& field) {
    if (field.role == FingerprintRole::kSetByForward) return;
    const auto& recorded = this->*field.member;
    if (recorded == called.*field.member) return;
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(recorded)>, uint64_t>) {
      if (field.member == &Fingerprint::inputs_digest && recorded == kInputsNotDigested) {
        d.push_back(detail::str_cat(
            "ForwardResult was produced without a ", field.label,
            " (its forward ran with CpOptions::for_backward = false, as for inference or "
            "no-grad mode: such a state cannot be differentiated or recomputed), ",
            caller, " called with ", field.label, "=", detail::field_text(called.*field.member)));
        return;
      }
    }
    d.push_back(difference(field.label, recorded, called.*field.member, caller));
  });
  return d;
}

std::array<uint8_t, kFingerprintBytes> fingerprint_bytes(const Fingerprint& fp) noexcept {
  std::array<uint8_t, kFingerprintBytes> bytes{};
  size_t at = 0;
  detail::for_each_fingerprint_field([&](const auto& field) {
    detail::for_each_scalar(fp.*field.member, [&](const auto& scalar) {
      std::memcpy(bytes.data() + at, &scalar, sizeof scalar);
      at += sizeof scalar;
    });
  });
  return bytes;
}

Fingerprint fingerprint_from_bytes(std::span<const uint8_t> bytes) {
  CPATTN_CHECK(bytes.size() == kFingerprintBytes, ErrorCode::kInvalidArgument,
               "fingerprint_from_bytes: expected ", kFingerprintBytes, " bytes, got ",
               bytes.size());
  return read_bytes(bytes.first<kFingerprintBytes>(), true);
}

namespace detail {

Fingerprint read_fingerprint_bytes(std::span<const uint8_t, kFingerprintBytes> bytes) noexcept {
  return read_bytes(bytes, false);
}

Fingerprint shared_part(const Fingerprint& fp) noexcept {
  Fingerprint shared = fp;
  const Fingerprint defaults;
  for_each_fingerprint_field([&](const auto& field) {
    switch (field.role) {
      case FingerprintRole::kShared:
        break;
      case FingerprintRole::kSharedButLength:
        if constexpr (std::is_same_v<typename std::remove_cvref_t<decltype(field)>::Type, Shape4>) {
          (shared.*field.member)[1] = 0;
        }
        break;
      case FingerprintRole::kOwn:
      case FingerprintRole::kSetByForward:
        shared.*field.member = defaults.*field.member;
        break;
    }
  });
  return shared;
}

}  // namespace detail

Fingerprint make_fingerprint(int cp_rank, int cp_size, ConstView q, ConstView k, ConstView v,
                             const SequenceSharding& q_seq, const SequenceSharding& kv_seq,
                             const AttentionParams& params, RngState rng, const Strategy& strategy,
                             Isa isa, int num_threads, bool digest_inputs) {
  // q, k and v are hashed before any ring validation (backward and recompute check the state
  // first), so a view that cannot be read must be refused here, not dereferenced.
  check_readable(q, "q");
  check_readable(k, "k");
  check_readable(v, "v");
  const AttentionParams resolved = resolve_params(params, q.shape[3], q.shape[2]);
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
  fp.inputs_digest =
      digest_inputs
          ? Digest().view(q, num_threads).view(k, num_threads).view(v, num_threads).finish()
          : kInputsNotDigested;
  fp.softmax_scale = *resolved.softmax_scale;
  fp.causal = resolved.causal;
  fp.window_left = resolved.window_left;
  fp.window_right = resolved.window_right;
  fp.dropout_p = resolved.dropout_p;
  fp.softcap = resolved.softcap;
  fp.alibi_digest = digest_or_zero(resolved.alibi_slopes);
  fp.sink_digest = digest_or_zero(resolved.sink);
  fp.slices_digest = digest_or_zero(resolved.slices);
  fp.q_layout = q_seq.layout;
  fp.kv_layout = kv_seq.layout;
  fp.q_seq_len = q_seq.seq_len;
  fp.kv_seq_len = kv_seq.seq_len;
  fp.cp = {cp_rank, cp_size};
  fp.strategy = strategy;
  fp.numerics = kernel_numerics(resolve_isa(isa), q.dtype);
  fp.rng = rng;
  return fp;
}

}  // namespace cpattn
