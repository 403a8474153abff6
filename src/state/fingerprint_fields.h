// The Fingerprint's fields as the state layer's checks read them (fingerprint.cpp, the call
// agreement): their text in messages, the part every rank must agree on, and the byte form read
// without checks (for bytes a peer sent).
#pragma once

#include <charconv>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "cpattn/digest.h"
#include "cpattn/error.h"
#include "cpattn/fingerprint.h"

namespace cpattn::detail {

/// A field's value as messages show it: a shape as "[1, 20, 2, 8]", a CpRank as "0 of 4", enums,
/// strategies and RngStates by their names ("bf16", "zigzag", "hybrid:2x4", "{seed=7,
/// offset=3}"; "ring with sizes 2x0" for a kind without sizes that has some), bools as "true" /
/// "false", uint64_t values (the digests) in hex, floats in the shortest decimal that reads back
/// as the same float (2.0000002, not 2), other numbers in decimal. An enum value without a
/// name reads "?".
template <typename T>
std::string field_text(const T& x) {
  if constexpr (std::is_same_v<T, CpRank>) {
    return str_cat(x.rank, " of ", x.size);
  } else if constexpr (std::is_same_v<T, Shape4>) {
    return shape_string(x);
  } else if constexpr (std::is_same_v<T, DType>) {
    return dtype_name(x);
  } else if constexpr (std::is_same_v<T, Layout>) {
    return layout_name(x);
  } else if constexpr (std::is_same_v<T, KernelNumerics>) {
    return kernel_numerics_name(x);
  } else if constexpr (std::is_same_v<T, Strategy>) {
    // The name shows every member but the sizes of a kind without sizes, which must be 0
    // (check_strategy) and are shown when a peer sends others.
    const bool named_fully =
        x.kind == Strategy::Kind::kHybrid || (x.ulysses_size == 0 && x.ring_size == 0);
    return named_fully
               ? strategy_name(x)
               : str_cat(strategy_name(x), " with sizes ", x.ulysses_size, "x", x.ring_size);
  } else if constexpr (std::is_same_v<T, RngState>) {
    return to_string(x);
  } else if constexpr (std::is_same_v<T, bool>) {
    return x ? "true" : "false";
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    return digest_hex(x);
  } else if constexpr (std::is_floating_point_v<T>) {
    // The shortest text that reads back as x: values that differ never print alike.
    char text[32];
    return std::string(text, std::to_chars(text, text + sizeof text, x).ptr);
  } else {
    static_assert(std::is_arithmetic_v<T>, "field_text: a Fingerprint field of a new type");
    return str_cat(x);
  }
}

/// The part of `fp` every rank of a group must agree on: `fp` with its kOwn and kSetByForward
/// fields at their defaults and the S_r of its kSharedButLength shapes 0.
Fingerprint shared_part(const Fingerprint& fp) noexcept;

/// fingerprint_from_bytes without its checks, for bytes any peer may have sent: an enum value
/// that is none of its enumerators is kept (its name reads "?"), a bool's byte other than 0
/// reads as true.
Fingerprint read_fingerprint_bytes(std::span<const uint8_t, kFingerprintBytes> bytes) noexcept;

}  // namespace cpattn::detail
