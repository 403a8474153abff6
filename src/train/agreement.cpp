// Field-by-field agreement of a group's configuration and rank 0's results shared with every rank.
#include "train/agreement.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <span>

namespace cpattn::train {

namespace {

// Point-to-point tag of rank0_result: above the ring's tags (4096 * stream + step, streams 1-3).
constexpr int kRank0ResultTag = 7 * 4096;

void put_string(std::vector<std::byte>& out, const std::string& s) {
  const auto n = static_cast<uint32_t>(s.size());
  const auto* p = reinterpret_cast<const std::byte*>(&n);
  out.insert(out.end(), p, p + sizeof n);
  const auto* d = reinterpret_cast<const std::byte*>(s.data());
  out.insert(out.end(), d, d + s.size());
}

}  // namespace

std::vector<std::byte> encode_fields(const std::vector<ConfigField>& fields) {
  std::vector<std::byte> out;
  for (const ConfigField& f : fields) {
    put_string(out, f.flag);
    put_string(out, f.value);
    put_string(out, f.note);
    put_string(out, f.absent_value);
  }
  return out;
}

std::vector<ConfigField> decode_fields(std::span<const std::byte> in) {
  std::vector<ConfigField> fields;
  size_t at = 0;
  const auto get = [&](std::string& s) {
    uint32_t n = 0;
    if (in.size() - at < sizeof n) return false;
    std::memcpy(&n, in.data() + at, sizeof n);
    at += sizeof n;
    if (in.size() - at < n) return false;
    s.assign(reinterpret_cast<const char*>(in.data() + at), n);
    at += n;
    return true;
  };
  while (at < in.size()) {
    ConfigField f;
    if (!get(f.flag) || !get(f.value) || !get(f.note) || !get(f.absent_value)) break;
    fields.push_back(std::move(f));
  }
  return fields;
}

namespace {

// "rank 1" / "ranks 0, 2-3".
std::string ranks_text(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) s += ", ";
    s += std::to_string(ranks[i]);
    if (j > i) {
      s += '-';
      s += std::to_string(ranks[j]);
    }
    i = j + 1;
  }
  return s;
}

// "rank 0 has --dropout 0.1, rank 1 has 0.2" for one flag's values (nullopt: absent) per rank.
std::string describe(const std::string& flag, const std::vector<std::optional<ConfigField>>& by) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;  // value -> ranks, first seen
  std::vector<std::string> shown;
  std::string absent = "(absent)";  // what a rank without the field runs with, where known
  for (const std::optional<ConfigField>& f : by) {
    if (f && !f->absent_value.empty()) absent = f->absent_value + " (the default)";
  }
  for (size_t r = 0; r < by.size(); ++r) {
    // Absent sorts apart from every real value (no value contains a NUL byte).
    const std::string value = by[r] ? by[r]->value : std::string(1, '\0');
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == value; });
    if (it == groups.end()) {
      groups.push_back({value, {}});
      shown.push_back(by[r] ? by[r]->shown() : absent);
      it = groups.end() - 1;
    }
    it->second.push_back(static_cast<int>(r));
  }
  std::string s;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (g > 0) s += ", ";
    s += ranks_text(groups[g].second);
    s += groups[g].second.size() == 1 ? " has " : " have ";
    if (g == 0) {
      s += flag;
      s += ' ';
    }
    s += shown[g];
  }
  return s;
}

// Every rank's `mine` (any sizes), in rank order: one allreduce of the sizes, one all_to_all of
// blocks padded to the largest.
std::vector<std::vector<std::byte>> allgather_bytes(Communicator& comm,
                                                    const std::vector<std::byte>& mine) {
  const auto p = static_cast<size_t>(comm.size());
  std::vector<double> sizes(p, 0.0);
  sizes[static_cast<size_t>(comm.rank())] = static_cast<double>(mine.size());
  comm.allreduce_sum(std::span<double>(sizes));  // one-hot sums of integers: exact
  const auto block = static_cast<size_t>(*std::max_element(sizes.begin(), sizes.end()));
  std::vector<std::byte> send(p * block), recv(p * block);
  for (size_t r = 0; r < p; ++r) std::copy(mine.begin(), mine.end(), send.begin() + r * block);
  comm.all_to_all(std::span<const std::byte>(send), std::span<std::byte>(recv));
  std::vector<std::vector<std::byte>> all(p);
  for (size_t r = 0; r < p; ++r) {
    const auto first = recv.begin() + static_cast<std::ptrdiff_t>(r * block);
    all[r].assign(first, first + static_cast<std::ptrdiff_t>(sizes[r]));
  }
  return all;
}

}  // namespace

std::string ConfigField::shown() const { return note.empty() ? value : note + " (" + value + ")"; }

std::string format_value(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string format_value(float v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::optional<GroupError> settings_disagreement(const std::vector<std::vector<std::byte>>& by_rank,
                                                const std::string& what) {
  const size_t p = by_rank.size();
  std::vector<std::map<std::string, ConfigField>> fields_of(p);
  std::vector<std::string> flags;  // every flag, in first-seen order
  for (size_t r = 0; r < p; ++r) {
    for (ConfigField& f : decode_fields(by_rank[r])) {
      if (std::find(flags.begin(), flags.end(), f.flag) == flags.end()) flags.push_back(f.flag);
      fields_of[r].emplace(f.flag, std::move(f));
    }
  }
  std::string differing;
  for (const std::string& flag : flags) {
    std::vector<std::optional<ConfigField>> values(p);
    bool same = true;
    for (size_t r = 0; r < p; ++r) {
      const auto it = fields_of[r].find(flag);
      if (it != fields_of[r].end()) values[r] = it->second;
      same = same && values[r].has_value() == values[0].has_value() &&
             (!values[r] || values[r]->value == values[0]->value);
    }
    if (same) continue;
    if (!differing.empty()) differing += "; ";
    differing += describe(flag, values);
  }
  if (differing.empty()) return std::nullopt;
  return GroupError(ErrorCode::kRankDisagreement,
                    what + ": the ranks were started with different settings: " + differing);
}

void agree_on_fields(Communicator& comm, const std::vector<ConfigField>& fields,
                     const std::string& what) {
  if (auto error = settings_disagreement(allgather_bytes(comm, encode_fields(fields)), what)) {
    throw *error;
  }
}

std::optional<GroupError> startup_failure(const std::vector<std::vector<std::byte>>& by_rank) {
  std::vector<std::pair<int, ConfigField>> failed;  // rank, {code, message}
  for (size_t r = 0; r < by_rank.size(); ++r) {
    for (ConfigField& f : decode_fields(by_rank[r])) {
      failed.push_back({static_cast<int>(r), std::move(f)});
    }
  }
  if (failed.empty()) return std::nullopt;
  // The lowest failing rank's code; a code that does not read as a number (a rank of another
  // program) is reported as that rank's failure.
  const std::string& code_text = failed.front().second.flag;
  int code_number = 0;
  const auto [end, ec] =
      std::from_chars(code_text.data(), code_text.data() + code_text.size(), code_number);
  const ErrorCode code = ec == std::errc() && end == code_text.data() + code_text.size()
                             ? static_cast<ErrorCode>(code_number)
                             : ErrorCode::kPeerFailed;
  const bool alike = failed.size() == by_rank.size() &&
                     std::all_of(failed.begin(), failed.end(), [&](const auto& f) {
                       return f.second.value == failed.front().second.value;
                     });
  if (alike) return GroupError(code, "every rank: " + failed.front().second.value);
  std::string message;
  for (const auto& [rank, f] : failed) {
    if (!message.empty()) message += "; ";
    message += "rank " + std::to_string(rank) + ": " + f.value;
  }
  return GroupError(code, message);
}

void share_startup_errors(Communicator& comm, const std::optional<Error>& mine) {
  // Encoded as fields: flag = the code's number, value = the message ("" flag: no error).
  std::vector<ConfigField> own;
  if (mine) own.push_back({std::to_string(static_cast<int>(mine->code())), mine->what(), ""});
  if (auto error = startup_failure(allgather_bytes(comm, encode_fields(own)))) throw *error;
}

std::vector<std::byte> rank0_result(Communicator& comm,
                                    const std::function<std::vector<std::byte>()>& fn) {
  // head: {succeeded, error code, payload bytes}; only rank 0 contributes, so the sums are exact.
  std::vector<double> head(3, 0.0);
  std::vector<std::byte> payload;
  if (comm.rank() == 0) {
    try {
      payload = fn();
      head = {1.0, 0.0, static_cast<double>(payload.size())};
    } catch (const Error& e) {
      const std::string message = e.what();
      const auto* m = reinterpret_cast<const std::byte*>(message.data());
      payload.assign(m, m + message.size());
      head = {0.0, static_cast<double>(e.code()), static_cast<double>(payload.size())};
    }
  }
  comm.allreduce_sum(std::span<double>(head));
  if (comm.rank() == 0) {
    std::vector<Request> sends;
    for (int r = 1; r < comm.size(); ++r) {
      sends.push_back(comm.isend(std::span<const std::byte>(payload), r, kRank0ResultTag));
    }
    for (Request& s : sends) s.wait();
  } else {
    payload.resize(static_cast<size_t>(head[2]));
    comm.irecv(std::span<std::byte>(payload), 0, kRank0ResultTag).wait();
  }
  if (head[0] == 0.0) {
    throw GroupError(static_cast<ErrorCode>(static_cast<int>(head[1])),
                     std::string(reinterpret_cast<const char*>(payload.data()), payload.size()));
  }
  return payload;
}

}  // namespace cpattn::train
