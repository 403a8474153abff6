// Call agreement (call_agreement.h).
#include "state/call_agreement.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "cpattn/digest.h"
#include "cpattn/error.h"
#include "state/fingerprint_fields.h"

namespace cpattn::detail {

namespace {

const char* op_name(uint32_t op) {
  switch (static_cast<CallOp>(op)) {
    case CallOp::kForward:
      return "forward";
    case CallOp::kBackward:
      return "backward";
    case CallOp::kRecompute:
      return "recompute";
    case CallOp::kStrictRecompute:
      return "strict recompute";
  }
  return "an unknown operation";
}

// One compared field: its name and its value as text.
struct Field {
  const char* name;
  std::function<std::string(const CallRecord&)> text;
};

template <typename T>
std::string plain(T x) {
  return str_cat(x);
}

// A shared field of a record's fingerprint as text: a kSharedButLength shape shows "S_r" for
// the rank's own length, which is not compared.
template <typename T>
std::string shared_text(const T& value, FingerprintRole role) {
  if constexpr (std::is_same_v<T, Shape4>) {
    if (role == FingerprintRole::kSharedButLength) {
      return str_cat("[", value[0], ", S_r, ", value[2], ", ", value[3], "]");
    }
  }
  return field_text(value);
}

// The compared fields, in the order of the checks: the first differing one is reported. The
// record's own fields, then the shared fields of the Fingerprint in the list's order, then the
// document-aware relay. Built only on the error path.
std::vector<Field> fields() {
  std::vector<Field> all = {
      {"op", [](const CallRecord& r) { return std::string(op_name(r.op)); }},
      {"call number", [](const CallRecord& r) { return plain(r.call_number); }},
      {"forward call number", [](const CallRecord& r) { return plain(r.forward_number); }},
      {"cp_size", [](const CallRecord& r) { return plain(r.cp_size); }},
  };
  for_each_fingerprint_field([&](const auto& field) {
    if (field.role != FingerprintRole::kShared && field.role != FingerprintRole::kSharedButLength) {
      return;
    }
    all.push_back({field.label, [field](const CallRecord& r) {
                     return shared_text(read_fingerprint_bytes(r.fingerprint).*field.member,
                                        field.role);
                   }});
  });
  all.push_back({"document_aware", [](const CallRecord& r) {
                   return std::string(r.document_aware ? "true" : "false");
                 }});
  all.push_back({"reduce_dsink", [](const CallRecord& r) {
                   return std::string(r.reduce_dsink ? "true" : "false");
                 }});
  return all;
}

// "rank 3", "ranks 0-2", "ranks 0, 2, 5".
std::string ranks_text(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return str_cat("rank ", ranks[0]);
  bool consecutive = true;
  for (size_t i = 1; i < ranks.size(); ++i) consecutive &= ranks[i] == ranks[i - 1] + 1;
  if (consecutive) return str_cat("ranks ", ranks.front(), "-", ranks.back());
  std::string s = "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

// Defined below agree_on_call, which uses them.
std::string first_difference(const std::vector<CallRecord>& all);
std::string site_difference(const std::vector<CallRecord>& all);

// Copies `text` on one line (one_line: a newline or a NUL of a caller's text escaped, so that
// the errors quoting it stay one line and whole) into the NUL-terminated field `out` of `size`
// bytes, cut with "..." at the cut when it does not fit.
void copy_cut(std::string_view text, char* out, size_t size) {
  const size_t room = size - 1;  // the NUL
  const std::string line = one_line(text);
  const std::string cut = line.size() <= room ? line : line.substr(0, room - 3) + "...";
  std::memcpy(out, cut.data(), cut.size());
  out[cut.size()] = '\0';
}

// The call site text of a record (with its digest where the text was cut).
std::string site_of(const CallRecord& r) {
  std::string text(r.call_site, strnlen(r.call_site, sizeof r.call_site));
  if (text.ends_with("...")) text += " #" + digest_hex(r.call_site_digest);
  return text;
}

}  // namespace

std::string call_site_text(std::string_view named, const SourceLocation& caller) {
  if (!named.empty()) return std::string(named);
  std::string_view file = caller.file;
  if (const size_t slash = file.find_last_of("/\\"); slash != std::string_view::npos) {
    file.remove_prefix(slash + 1);
  }
  return str_cat(file, ":", caller.line);
}

CallRecord call_record(CallOp op, uint64_t call_number, uint64_t forward_number, int cp_size,
                       const Fingerprint* described, const CpOptions& options,
                       std::string_view call_site) {
  CallRecord r;
  r.op = static_cast<uint32_t>(op);
  r.cp_size = static_cast<uint32_t>(cp_size);
  r.call_number = call_number;
  r.forward_number = forward_number;
  r.document_aware = options.document_aware ? 1 : 0;
  r.reduce_dsink = options.reduce_dsink ? 1 : 0;
  r.call_site_digest = Digest().string(call_site).finish();
  copy_cut(call_site, r.call_site, sizeof r.call_site);
  if (described == nullptr) {
    r.described = 0;
    return r;
  }
  r.fingerprint = fingerprint_bytes(shared_part(*described));
  return r;
}

void agree_on_call(Communicator& comm, const CallRecord& mine) {
  const int p = comm.size();
  if (p == 1) return;
  const size_t bytes = sizeof(CallRecord);
  std::vector<std::byte> send(bytes * static_cast<size_t>(p)), recv(send.size());
  for (int r = 0; r < p; ++r)
    std::memcpy(send.data() + bytes * static_cast<size_t>(r), &mine, bytes);
  comm.all_to_all(send, recv);
  std::vector<CallRecord> all(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    std::memcpy(&all[static_cast<size_t>(r)], recv.data() + bytes * static_cast<size_t>(r), bytes);
  }
  if (std::memcmp(send.data(), recv.data(), send.size()) == 0) return;
  // Every rank sees the same records, so every rank is here. The barrier lets all of them finish
  // the exchange before any throws (an in-process rank that throws releases its peers' waits at
  // once, which would turn their precise error into "peer failed").
  comm.barrier();
  throw call_disagreement(all);
}

Error call_disagreement(const std::vector<CallRecord>& all) {
  const std::string head =  // named after rank 0's record, so that every rank throws the same
      str_cat("call agreement failed (call ", all.at(0).call_number, ", ", op_name(all[0].op),
              "): ");
  // A refusal is the reason, and the others quote it; where every record describes its call, the
  // first field that differs follows (a refusing rank's record may describe it: a state of
  // another call, say).
  // A refusal of code rank_disagreement is a rank that learned before the call that another
  // refuses it (agree_or_throw): it is named only when no rank gives a reason of its own.
  const auto deferring = [](const CallRecord& rec) {
    return rec.refusal_code == static_cast<int32_t>(ErrorCode::kRankDisagreement);
  };
  const bool any_reason = std::any_of(all.begin(), all.end(), [&](const CallRecord& rec) {
    return !rec.local_check_passed && !deferring(rec);
  });
  std::string refusals;
  bool all_described = true;
  for (size_t r = 0; r < all.size(); ++r) {
    const CallRecord& rec = all[r];
    all_described = all_described && rec.described;
    if (rec.local_check_passed || (any_reason && deferring(rec))) continue;
    const std::string text(rec.refusal, strnlen(rec.refusal, sizeof rec.refusal));
    refusals += str_cat(refusals.empty() ? "" : "; ", "rank ", r, " refuses the call (",
                        error_code_name(static_cast<ErrorCode>(rec.refusal_code)), ": ", text, ")");
  }
  const std::string difference = all_described ? first_difference(all) : std::string();
  const std::string sites = site_difference(all);
  if (!refusals.empty()) {
    return Error(ErrorCode::kRankDisagreement,
                 head + refusals + (difference.empty() ? "" : "; and " + difference));
  }
  if (!difference.empty()) {
    return Error(ErrorCode::kRankDisagreement,
                 head + difference +
                     (sites.empty() ? "" : "; the calls come from different call sites: " + sites));
  }
  if (!sites.empty()) {  // the same call from other places: a skipped or an extra call
    return Error(ErrorCode::kRankDisagreement,
                 str_cat(head, "the calls come from different call sites: ", sites,
                         " (did a rank skip a call, or make one the others did not?)"));
  }
  // Records that differ only in bytes no field above shows (a rank that could not describe its
  // call, or a peer of another cpattn build writing the record differently).
  std::vector<int> differing;
  for (size_t r = 1; r < all.size(); ++r) {
    if (std::memcmp(&all[r], &all[0], sizeof(CallRecord)) != 0) {
      differing.push_back(static_cast<int>(r));
    }
  }
  return Error(ErrorCode::kRankDisagreement,
               str_cat(head, differing.empty() ? std::string("no rank") : ranks_text(differing),
                       differing.size() == 1 ? " describes" : " describe",
                       " the call differently from rank 0, in no field this build compares (a "
                       "rank of another cpattn build?)"));
}

}  // namespace cpattn::detail

namespace cpattn::detail {
namespace {

// The ranks holding each value of `text` over the records, fewest holders first (so the odd
// rank out is named first and the majority last).
std::vector<std::pair<std::string, std::vector<int>>> holders_of(
    const std::vector<CallRecord>& all, const std::function<std::string(const CallRecord&)>& text) {
  std::map<std::string, std::vector<int>> holders;
  for (size_t r = 0; r < all.size(); ++r) holders[text(all[r])].push_back(static_cast<int>(r));
  std::vector<std::pair<std::string, std::vector<int>>> groups(holders.begin(), holders.end());
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
  return groups;
}

// "rank 3 has dropout_p=0, ranks 0-2 have dropout_p=0.1" for the first compared field that
// differs, "" when none does.
std::string first_difference(const std::vector<CallRecord>& all) {
  for (const Field& f : fields()) {
    const auto groups = holders_of(all, f.text);
    if (groups.size() == 1) continue;
    std::string message;
    for (size_t g = 0; g < groups.size(); ++g) {
      const bool one = groups[g].second.size() == 1;
      message += str_cat(g ? ", " : "", ranks_text(groups[g].second), one ? " has " : " have ",
                         f.name, "=", groups[g].first);
    }
    return message;
  }
  return {};
}

// "rank 1 at b.cpp:20, ranks 0, 2-3 at a.cpp:10" when the call sites differ, "" when not.
std::string site_difference(const std::vector<CallRecord>& all) {
  const auto groups = holders_of(all, site_of);
  if (groups.size() == 1) return {};
  std::string message;
  for (size_t g = 0; g < groups.size(); ++g) {
    message += str_cat(g ? ", " : "", ranks_text(groups[g].second), " at ", groups[g].first);
  }
  return message;
}

}  // namespace

uint64_t take_call_number(Communicator& comm) { return comm.layer_state<CallNumbering>().next++; }

uint64_t agree_or_throw(Communicator& comm, CallOp op, const Fingerprint* fp,
                        const CpOptions& options, std::string_view call_site,
                        std::optional<uint64_t> forward_number,
                        const std::optional<Error>& local_error) {
  const uint64_t number = take_call_number(comm);
  CallRecord record =
      call_record(op, number, forward_number.value_or(number), comm.size(), fp, options, call_site);
  if (local_error) {
    record.local_check_passed = 0;
    record.refusal_code = static_cast<int32_t>(local_error->code());
    copy_cut(local_error->what(), record.refusal, sizeof record.refusal);
  }
  try {
    agree_on_call(comm, record);
  } catch (const Error&) {
    // This rank's own, more precise reason; unless that reason is only that another rank
    // refuses the call (a wrapper can learn so before it: the Python package's token count),
    // which the agreement's error names, with its reason.
    if (local_error && local_error->code() != ErrorCode::kRankDisagreement) throw *local_error;
    throw;
  }
  if (local_error) throw *local_error;  // every rank refused the call, each for its own reason
  return number;
}

}  // namespace cpattn::detail
