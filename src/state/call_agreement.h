// Call agreement: before any data of a checked attention call moves, every rank of the group
// learns every other rank's description of the call and all throw the same error if any differ.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "cpattn/attention.h"
#include "cpattn/error.h"
#include "cpattn/source_location.h"

namespace cpattn::detail {

/// What a checked call is.
/// A strict recompute is an op of its own: its ranks exchange one more message after the forward
/// (recompute_forward), so ranks that differ in strictness must fail the agreement.
enum class CallOp : uint32_t { kForward = 1, kBackward = 2, kRecompute = 3, kStrictRecompute = 4 };

/// The rank-independent description of one checked call: what every rank of the group must
/// agree on (the call's op and number, for backward the number of the forward whose state it
/// uses, the group size, the shared part of its Fingerprint: every kShared field of
/// CPATTN_FINGERPRINT_FIELDS and the kSharedButLength shapes but the rank's own length) and the
/// options that decide which messages travel (the ring's document-aware relay; the strategy is a
/// Fingerprint field). Fixed size, trivially copyable and without padding: it travels as bytes.
struct CallRecord {
  uint32_t op = 0;
  uint32_t cp_size = 0;
  uint64_t call_number = 0;        ///< take_call_number of this call
  uint64_t forward_number = 0;     ///< the forward's call number (this call's, for a forward)
  int32_t local_check_passed = 1;  ///< 0: this rank refuses the call (refusal_code, refusal)
  int32_t document_aware = 0;      ///< CpOptions::document_aware (ranks that differ would send
                                   ///< and expect different messages)
  int32_t reduce_dsink = 1;        ///< CpOptions::reduce_dsink (ranks that differ would not all
                                   ///< make the backward's allreduce)
  int32_t refusal_code = 0;        ///< the ErrorCode of this rank's refusal (local_check_passed 0)
  /// 0 when the call's arguments could not be read into a fingerprint (a refusing rank): its
  /// `fingerprint` is zero, and no error names a field of it.
  int32_t described = 1;
  /// The start of the refusing rank's error message, NUL-terminated, cut to fit with "..." at
  /// the cut ("" when it does not refuse): what the other ranks' errors quote.
  char refusal[228] = {};
  uint64_t call_site_digest = 0;  ///< Digest of the whole call site text (call_site_text)
  /// The call site text, NUL-terminated, cut to fit with "..." at the cut: what errors name.
  char call_site[56] = {};
  /// fingerprint_bytes of the call's shared_part (state/fingerprint_fields.h).
  std::array<uint8_t, kFingerprintBytes> fingerprint{};
  /// Zero: fills the record to a multiple of 8 bytes, so that it has no padding.
  uint8_t zero_fill[8 - kFingerprintBytes % 8] = {};
};
static_assert(std::has_unique_object_representations_v<CallRecord>,
              "CallRecord must have no padding");

/// The call site a checked call reports: `named` (CpOptions::call_site) when it is not
/// empty, else "file.cpp:123" of `caller` (the file name without its directory).
std::string call_site_text(std::string_view named, const SourceLocation& caller);

/// The record of a call from its fingerprint (its shared part), its options (the document-aware
/// relay) and its call site (call_site_text);
/// without a fingerprint (null: arguments this rank could not read) only the op, cp_size, call
/// numbers and call site, marked not described.
CallRecord call_record(CallOp op, uint64_t call_number, uint64_t forward_number, int cp_size,
                       const Fingerprint* fp, const CpOptions& options, std::string_view call_site);

/// Exchanges `mine` with every rank of comm (one all_to_all of P records) and returns when all
/// are equal. Otherwise throws, on every rank alike, Error(kRankDisagreement): when some rank
/// refuses the call, naming each refusing rank with its error code and message ("call agreement
/// failed (call 7, forward): rank 1 refuses the call (invalid_argument: dropout_p must be in
/// [0, 1), got 1)"), else naming the first field that differs and which ranks hold which value,
/// e.g. "call agreement failed (call 7, backward): rank 3 has dropout_p=0, ranks 0-2 have
/// dropout_p=0.1". When the ranks call from different call sites, the message names them too
/// ("... the calls come from different call sites: rank 1 at b.cpp:20, rank 0 at a.cpp:10"), or
/// only them when nothing else differs (a rank that skipped a call, at the call that follows).
/// And the communicator's errors when a rank does not take part.
void agree_on_call(Communicator& comm, const CallRecord& mine);

/// The error agree_on_call throws for `all`, the records of every rank (rank r's at [r], at
/// least one): Error(kRankDisagreement) naming the refusing ranks, else the first differing
/// field, the call sites, or, for records that differ in no field shown, the ranks that differ
/// from rank 0. Any bytes are accepted (a record is what a peer sent): enum fields outside their
/// range read as "unknown", texts are read up to their NUL or their field's end.
Error call_disagreement(const std::vector<CallRecord>& all);

/// The numbering of a group's checked calls, kept with its communicator (Communicator::
/// layer_state; set_next_call_number in attention.h sets it).
struct CallNumbering {
  uint64_t next = 0;
};

/// The number of this rank's next checked call on comm's group (0, 1, 2, ...), counted on.
uint64_t take_call_number(Communicator& comm);

/// The checked-call protocol: takes comm's next call number, makes the record (forward_number:
/// the forward this call uses the state of; nullopt = this call itself; call_site:
/// call_site_text of the public call), and agrees on it. When
/// this rank has a reason of its own to refuse the call (`local_error`), it takes part in the
/// agreement anyway, marked as refusing, and then throws that error, so the other ranks throw
/// at once too (their error names it) instead of waiting for it; a local_error of code
/// kRankDisagreement (this rank learned before the call that another refuses it) throws the
/// agreement's error instead, which quotes that rank's reason. Returns the call number.
uint64_t agree_or_throw(Communicator& comm, CallOp op, const Fingerprint* fp,
                        const CpOptions& options, std::string_view call_site,
                        std::optional<uint64_t> forward_number,
                        const std::optional<Error>& local_error);

}  // namespace cpattn::detail
