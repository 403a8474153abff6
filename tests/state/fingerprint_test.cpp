// The Fingerprint's one field list (cpattn/fingerprint.h): the byte form round-trips any
// fingerprint, has no padding and changes with every scalar of every field; a wrong size or an
// enum or bool byte out of range is refused; every field but the call number is compared by
// differences(), and the call agreement compares exactly the shared ones.
#include "cpattn/fingerprint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstring>
#include <functional>
#include <new>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpattn/error.h"
#include "state/call_agreement.h"
#include "support/errors.h"

namespace cpattn::testing {
namespace {

using ::testing::HasSubstr;

// Calls f(field, scalar, offset, index) for every scalar of every field of `fp`: its byte offset
// in the byte form and its index among its field's scalars.
template <typename F>
void for_each_scalar_at(Fingerprint& fp, F&& f) {
  size_t at = 0;
  detail::for_each_fingerprint_field([&](const auto& field) {
    size_t index = 0;
    detail::for_each_scalar(fp.*field.member, [&](auto& scalar) {
      f(field, scalar, at, index++);
      at += sizeof scalar;
    });
  });
}

// Another valid value for a scalar: enums toggle between their first two enumerators (every
// enum of the list has at least two), bools flip, numbers add one.
template <typename S>
void change(S& scalar) {
  if constexpr (std::is_same_v<S, bool>) {
    scalar = !scalar;
  } else if constexpr (std::is_enum_v<S>) {
    scalar = static_cast<S>(static_cast<std::underlying_type_t<S>>(scalar) == 0 ? 1 : 0);
  } else {
    scalar = static_cast<S>(scalar + 1);
  }
}

// Where a scalar of the list lies, and which field it belongs to.
struct ScalarAt {
  std::string label;
  FingerprintRole role;
  size_t at, size, index;
};

// Every scalar of the list, in the order of the byte form.
std::vector<ScalarAt> scalars() {
  std::vector<ScalarAt> all;
  Fingerprint fp;
  for_each_scalar_at(fp, [&](const auto& field, const auto& scalar, size_t at, size_t index) {
    all.push_back({field.label, field.role, at, sizeof scalar, index});
  });
  return all;
}

// `fp` with its scalar number `n` (of scalars()) changed.
Fingerprint changed(Fingerprint fp, size_t n) {
  size_t i = 0;
  for_each_scalar_at(fp, [&](const auto&, auto& scalar, size_t, size_t) {
    if (i++ == n) change(scalar);
  });
  return fp;
}

// Every scalar random: numbers over their range (floats finite), enums among their first three
// enumerators (every enum of the list has at least three), bools either way.
Fingerprint random_fingerprint(uint64_t seed) {
  std::mt19937_64 gen(seed);
  Fingerprint fp;
  for_each_scalar_at(fp, [&](const auto&, auto& scalar, size_t, size_t) {
    using S = std::remove_reference_t<decltype(scalar)>;
    if constexpr (std::is_same_v<S, bool>) {
      scalar = (gen() & 1) != 0;
    } else if constexpr (std::is_enum_v<S>) {
      scalar = static_cast<S>(gen() % 3);
    } else if constexpr (std::is_floating_point_v<S>) {
      scalar = std::uniform_real_distribution<S>(-1e6, 1e6)(gen);
    } else {
      scalar = static_cast<S>(gen());
    }
  });
  return fp;
}

RC_GTEST_PROP(FingerprintBytes, RoundTripsAnyFingerprint, ()) {
  const Fingerprint fp = random_fingerprint(*rc::gen::arbitrary<uint64_t>());
  const auto bytes = fingerprint_bytes(fp);
  const Fingerprint back = fingerprint_from_bytes(bytes);
  RC_ASSERT(fp.differences(back).empty());
  RC_ASSERT(back.call_number == fp.call_number);  // the one field differences() skips
  RC_ASSERT(fingerprint_bytes(back) == bytes);
}

// Two fingerprints of equal fields built over memory of different garbage have the same bytes:
// no padding byte reaches the byte form.
TEST(FingerprintBytes, AreTheFieldsOnlyNotThePadding) {
  alignas(Fingerprint) unsigned char zeros[sizeof(Fingerprint)], ones[sizeof(Fingerprint)];
  std::memset(zeros, 0x00, sizeof zeros);
  std::memset(ones, 0xFF, sizeof ones);
  const Fingerprint want = random_fingerprint(7);
  auto* a = new (zeros) Fingerprint(want);
  auto* b = new (ones) Fingerprint(want);
  EXPECT_EQ(fingerprint_bytes(*a), fingerprint_bytes(*b));
  EXPECT_EQ(fingerprint_bytes(*a), fingerprint_bytes(want));
  a->~Fingerprint();
  b->~Fingerprint();
}

// Every scalar of every field, changed alone, changes its own bytes and no other, and
// differences() names its field (all but the call number); the list holds the kernel numerics,
// the RngState and the call number.
TEST(FingerprintBytes, EveryFieldChangesTheBytesAndIsCompared) {
  const Fingerprint base = random_fingerprint(11);
  const auto base_bytes = fingerprint_bytes(base);
  const std::vector<ScalarAt> all = scalars();
  for (size_t n = 0; n < all.size(); ++n) {
    const ScalarAt& s = all[n];
    const Fingerprint other = changed(base, n);
    const auto bytes = fingerprint_bytes(other);
    for (size_t i = 0; i < kFingerprintBytes; ++i) {
      if (i < s.at || i >= s.at + s.size) {
        EXPECT_EQ(bytes[i], base_bytes[i]) << s.label << " changed byte " << i;
      }
    }
    EXPECT_NE(bytes, base_bytes) << s.label;
    const std::vector<std::string> diffs = base.differences(other);
    if (s.role == FingerprintRole::kSetByForward) {
      EXPECT_TRUE(diffs.empty()) << s.label;
    } else {
      ASSERT_EQ(diffs.size(), 1u) << s.label;
      EXPECT_THAT(diffs[0], HasSubstr(s.label));
    }
  }
  EXPECT_EQ(all.back().at + all.back().size, kFingerprintBytes);
  std::vector<std::string> labels;
  for (const ScalarAt& s : all) labels.push_back(s.label);
  for (const char* label : {"kernel numerics", "rng", "call number"}) {
    EXPECT_THAT(labels, ::testing::Contains(std::string(label)));
  }
}

TEST(FingerprintBytes, AWrongSizeIsRefused) {
  const auto bytes = fingerprint_bytes(Fingerprint{});
  for (const size_t size : {size_t{0}, kFingerprintBytes - 1}) {
    const Error e = error_of([&] { fingerprint_from_bytes(std::span(bytes.data(), size)); });
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(),
                HasSubstr(detail::str_cat("expected ", kFingerprintBytes, " bytes, got ", size)));
  }
  std::vector<uint8_t> longer(bytes.begin(), bytes.end());
  longer.push_back(0);
  EXPECT_EQ(error_of([&] { fingerprint_from_bytes(longer); }).code(), ErrorCode::kInvalidArgument);
}

// An enum scalar that is none of its enumerators, or a bool byte that is neither 0 nor 1, is
// refused naming the field.
TEST(FingerprintBytes, ValuesOutOfRangeAreRefused) {
  Fingerprint fp;
  int checked = 0;
  for_each_scalar_at(fp, [&](const auto& field, const auto& scalar, size_t at, size_t) {
    using S = std::remove_cvref_t<decltype(scalar)>;
    if constexpr (std::is_same_v<S, bool> || std::is_enum_v<S>) {
      auto bytes = fingerprint_bytes(Fingerprint{});
      bytes[at] = std::is_same_v<S, bool> ? 2 : 99;
      const Error e = error_of([&] { fingerprint_from_bytes(bytes); });
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << field.label;
      EXPECT_THAT(e.what(), HasSubstr(field.label));
      ++checked;
    }
  });
  EXPECT_GE(checked, 6);  // dtype, two layouts, causal, the strategy kind, the numerics
}

// make_fingerprint records the score features: the softcap's value, and digests of the ALiBi
// slopes, the sink logits and the slices that change with any value (a slice's type too) and are
// 0 without the feature; differences() names the field.
TEST(Fingerprint, ScoreFeaturesAreRecorded) {
  const Tensor q({1, 6, 2, 4}), kv({1, 6, 1, 4});
  const SequenceSharding seq = SequenceSharding::of(Layout::kContiguous, 6, 1, 0);
  const auto fingerprint = [&](const AttentionParams& p) {
    return make_fingerprint(0, 1, q.view(), kv.view(), kv.view(), seq, seq, p, {1, 0});
  };
  const Fingerprint none = fingerprint({});
  EXPECT_EQ(none.softcap, 0.0f);
  EXPECT_EQ(none.alibi_digest, 0u);
  EXPECT_EQ(none.sink_digest, 0u);
  EXPECT_EQ(none.slices_digest, 0u);
  AttentionParams a;
  a.softcap = 3.5f;
  a.alibi_slopes = {0.5f, 0.25f};
  a.sink = {1.0f, -1.0f};
  a.slices = {{0, 6, 0, 3, SliceType::kFull}, {3, 6, 3, 6, SliceType::kCausal}};
  const Fingerprint fa = fingerprint(a);
  EXPECT_EQ(fa.softcap, 3.5f);
  EXPECT_NE(fa.alibi_digest, 0u);
  EXPECT_NE(fa.sink_digest, 0u);
  EXPECT_NE(fa.slices_digest, 0u);
  EXPECT_TRUE(fa.differences(fingerprint(a)).empty());
  const auto differs = [&](const std::function<void(AttentionParams&)>& change, const char* label) {
    AttentionParams b = a;
    change(b);
    const std::vector<std::string> d = fa.differences(fingerprint(b));
    ASSERT_EQ(d.size(), 1u) << label;
    EXPECT_THAT(d[0], HasSubstr(detail::str_cat("ForwardResult was produced with ", label, "=")));
  };
  differs([](AttentionParams& b) { b.sink[1] = -1.5f; }, "sink digest");
  differs([](AttentionParams& b) { b.sink.clear(); }, "sink digest");
  differs([](AttentionParams& b) { b.alibi_slopes = {0.25f, 0.5f}; }, "alibi_slopes digest");
  differs([](AttentionParams& b) { b.slices[1].type = SliceType::kBiCausal; }, "slices digest");
  differs([](AttentionParams& b) { std::swap(b.slices[0], b.slices[1]); }, "slices digest");
  differs([](AttentionParams& b) { b.softcap = 0.0f; }, "softcap");
}

// The call agreement's record holds exactly the shared part of the fingerprint: a change of a
// kShared field (or of B, H, D of a shape) makes the records differ and the error name the
// field; a change of a rank's own field (or of its own length S_r, index 1 of a shape) does not.
TEST(FingerprintBytes, TheCallAgreementComparesExactlyTheSharedFields) {
  const Fingerprint base = random_fingerprint(5);
  const CpOptions options;
  const auto record = [&](const Fingerprint& fp) {
    return detail::call_record(detail::CallOp::kForward, 0, 0, 2, &fp, options, "a.cpp:1");
  };
  const detail::CallRecord base_record = record(base);
  const std::vector<ScalarAt> all = scalars();
  for (size_t n = 0; n < all.size(); ++n) {
    const ScalarAt& s = all[n];
    const detail::CallRecord other = record(changed(base, n));
    const bool agreed = s.role == FingerprintRole::kShared ||
                        (s.role == FingerprintRole::kSharedButLength && s.index != 1);
    EXPECT_EQ(std::memcmp(&base_record, &other, sizeof other) != 0, agreed) << s.label;
    if (agreed) {
      const Error e = detail::call_disagreement({base_record, other});
      EXPECT_EQ(e.code(), ErrorCode::kRankDisagreement);
      EXPECT_THAT(e.what(), HasSubstr(detail::str_cat("rank 1 has ", s.label, "=")));
    }
  }
}

}  // namespace
}  // namespace cpattn::testing
