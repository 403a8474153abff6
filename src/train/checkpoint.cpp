// The checkpoint format: encoding, decoding with every check, and the resume compatibility rule.
#include "train/checkpoint.h"

#include <cstring>
#include <map>
#include <type_traits>

#include "cpattn/digest.h"
#include "cpattn/error.h"
#include "train/model_params.h"

namespace cpattn::train {

namespace {

constexpr char kMagic[8] = {'C', 'P', 'A', 'T', 'T', 'N', 'C', 'K'};
// magic, version, reserved, total size, config digest.
constexpr size_t kHeaderBytes = sizeof kMagic + 4 + 4 + 8 + 8;
constexpr size_t kChecksumBytes = 8;

class Writer {
 public:
  template <typename T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    out_.insert(out_.end(), p, p + sizeof v);
  }
  template <typename T>
  void put_vector(const std::vector<T>& v) {
    put(static_cast<uint64_t>(v.size()));
    const auto* p = reinterpret_cast<const std::byte*>(v.data());
    out_.insert(out_.end(), p, p + v.size() * sizeof(T));
  }
  void put_string(const std::string& s) { put_vector(std::vector<char>(s.begin(), s.end())); }
  std::vector<std::byte>& bytes() { return out_; }

 private:
  std::vector<std::byte> out_;
};

class Reader {
 public:
  Reader(std::span<const std::byte> in, const std::string& source) : in_(in), source_(source) {}
  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, in_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  template <typename T>
  std::vector<T> get_vector(const char* what) {
    const auto n = get<uint64_t>(what);
    CPATTN_CHECK(n <= (in_.size() - at_) / sizeof(T), ErrorCode::kIo, source_,
                 " is corrupted: ", what, " claims ", n, " entries past the end of the file");
    std::vector<T> v(static_cast<size_t>(n));
    if (n > 0) std::memcpy(v.data(), in_.data() + at_, v.size() * sizeof(T));  // data() may be null
    at_ += v.size() * sizeof(T);
    return v;
  }
  std::string get_string(const char* what) {
    const std::vector<char> c = get_vector<char>(what);
    return {c.begin(), c.end()};
  }
  size_t remaining() const { return in_.size() - at_; }

 private:
  void need(size_t n, const char* what) const {
    CPATTN_CHECK(in_.size() - at_ >= n, ErrorCode::kIo, source_, " is corrupted: ", what,
                 " runs past the end of the file");
  }
  std::span<const std::byte> in_;
  const std::string& source_;
  size_t at_ = 0;
};

uint64_t checksum_of(std::span<const std::byte> bytes) { return Digest().bytes(bytes).finish(); }

std::map<std::string, std::string> parse_config_text(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end == std::string::npos ? end : end - at);
    const size_t tab = line.find('\t');
    if (tab != std::string::npos) out[line.substr(0, tab)] = line.substr(tab + 1);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return out;
}

}  // namespace

std::string training_config_text(const std::vector<ConfigField>& fields) {
  std::string s;
  for (const ConfigField& f : fields) {
    if (f.training) s += f.flag + "\t" + f.value + "\n";
  }
  return s;
}

std::vector<std::byte> encode_checkpoint(const Checkpoint& c) {
  Writer w;
  for (char ch : kMagic) w.put(ch);
  w.put(kCheckpointVersion);
  w.put(uint32_t{0});  // reserved
  w.put(uint64_t{0});  // total size, patched below
  w.put(Digest().string(c.config_text).finish());
  const ModelConfig& m = c.model;
  for (int64_t v : {m.layers, m.d_model, m.heads, m.kv_heads, m.mlp_hidden, m.vocab}) w.put(v);
  w.put(m.rope_base);
  w.put(m.seed);
  w.put(c.seq_len);
  w.put_string(c.config_text);
  w.put(c.step);
  w.put(c.data_position);
  w.put(c.generator.seed);
  w.put(c.generator.offset);
  w.put(c.skipped_steps);
  w.put_vector(c.losses);
  w.put(static_cast<uint64_t>(c.evals.size()));
  for (const EvalPoint& e : c.evals) {
    w.put(e.step);
    w.put(e.loss);
  }
  w.put(c.adam_steps);
  w.put_vector(c.weights);
  w.put_vector(c.adam_m);
  w.put_vector(c.adam_v);
  std::vector<std::byte>& out = w.bytes();
  const uint64_t total = out.size() + kChecksumBytes;
  std::memcpy(out.data() + sizeof kMagic + 8, &total, sizeof total);
  w.put(checksum_of(out));
  return std::move(out);
}

Checkpoint decode_checkpoint(std::span<const std::byte> bytes, const std::string& source) {
  CPATTN_CHECK(bytes.size() >= kHeaderBytes + kChecksumBytes &&
                   std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0,
               ErrorCode::kIo, source, " is not a cpattn checkpoint (",
               bytes.size() < kHeaderBytes + kChecksumBytes
                   ? detail::str_cat(bytes.size(), " bytes, shorter than the header")
                   : std::string("no CPATTNCK magic"),
               ")");
  Reader header(bytes.subspan(sizeof kMagic), source);
  const auto version = header.get<uint32_t>("version");
  CPATTN_CHECK(version == kCheckpointVersion, ErrorCode::kIo, source, " has format version ",
               version, "; this cpattn reads version ", kCheckpointVersion);
  const auto reserved = header.get<uint32_t>("reserved");
  CPATTN_CHECK(reserved == 0, ErrorCode::kIo, source, " is not a version ", kCheckpointVersion,
               " checkpoint: its reserved header word is ", reserved, ", not 0");
  const auto total = header.get<uint64_t>("size");
  CPATTN_CHECK(total == bytes.size(), ErrorCode::kIo, source,
               total > bytes.size() ? " is truncated: " : " has trailing bytes: ", bytes.size(),
               " bytes, its header says ", total);
  const uint64_t config_digest = header.get<uint64_t>("config digest");
  const std::span<const std::byte> body = bytes.first(bytes.size() - kChecksumBytes);
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + body.size(), sizeof stored);
  const uint64_t actual = checksum_of(body);
  CPATTN_CHECK(stored == actual, ErrorCode::kIo, source, " is corrupted: checksum ",
               digest_hex(actual), ", the file says ", digest_hex(stored));

  Reader r(body.subspan(kHeaderBytes), source);
  Checkpoint c;
  c.model.layers = r.get<int64_t>("layers");
  c.model.d_model = r.get<int64_t>("d_model");
  c.model.heads = r.get<int64_t>("heads");
  c.model.kv_heads = r.get<int64_t>("kv_heads");
  c.model.mlp_hidden = r.get<int64_t>("mlp_hidden");
  c.model.vocab = r.get<int64_t>("vocab");
  c.model.rope_base = r.get<double>("rope_base");
  c.model.seed = r.get<uint64_t>("seed");
  c.seq_len = r.get<int64_t>("seq_len");
  c.config_text = r.get_string("config");
  c.step = r.get<int64_t>("step");
  c.data_position = r.get<int64_t>("data position");
  c.generator.seed = r.get<uint64_t>("generator seed");
  c.generator.offset = r.get<uint64_t>("generator offset");
  c.skipped_steps = r.get<int64_t>("skipped steps");
  c.losses = r.get_vector<double>("losses");
  const auto evals = r.get<uint64_t>("evals");
  CPATTN_CHECK(evals <= r.remaining() / 16, ErrorCode::kIo, source, " is corrupted: evals claims ",
               evals, " entries past the end of the file");
  for (uint64_t i = 0; i < evals; ++i) {
    EvalPoint e;
    e.step = r.get<int64_t>("eval step");
    e.loss = r.get<double>("eval loss");
    c.evals.push_back(e);
  }
  c.adam_steps = r.get<int64_t>("adam steps");
  c.weights = r.get_vector<float>("weights");
  c.adam_m = r.get_vector<float>("adam m");
  c.adam_v = r.get_vector<float>("adam v");

  const auto inconsistent = [&](bool ok, const auto&... what) {
    CPATTN_CHECK(ok, ErrorCode::kIo, source, " is inconsistent: ", what...);
  };
  inconsistent(r.remaining() == 0, r.remaining(), " unread bytes before the checksum");
  inconsistent(Digest().string(c.config_text).finish() == config_digest,
               "the config digest does not match its settings");
  try {
    validate_config(c.model);
  } catch (const Error& e) {
    inconsistent(false, "its model: ", e.what());
  }
  const std::vector<ParamInfo> table = param_table(c.model);
  const auto numel = static_cast<size_t>(table.back().offset + table.back().numel);
  inconsistent(c.weights.size() == numel && c.adam_m.size() == numel && c.adam_v.size() == numel,
               "the model has ", numel, " parameters, the file holds ", c.weights.size(),
               " weights and ", c.adam_m.size(), " / ", c.adam_v.size(), " moments");
  inconsistent(c.step >= 0 && c.losses.size() == static_cast<size_t>(c.step), "step ", c.step,
               " with ", c.losses.size(), " losses");
  inconsistent(
      c.skipped_steps >= 0 && c.skipped_steps <= c.step && c.adam_steps == c.step - c.skipped_steps,
      "step ", c.step, ", ", c.skipped_steps, " skipped, but ", c.adam_steps, " optimizer updates");
  inconsistent(c.seq_len >= 1, "seq_len ", c.seq_len);
  return c;
}

void check_resumable(const Checkpoint& checkpoint, const std::vector<ConfigField>& fields,
                     const std::string& source) {
  std::map<std::string, std::string> saved = parse_config_text(checkpoint.config_text);
  std::string differing;
  const auto add = [&](const std::string& s) { differing += (differing.empty() ? "" : "; ") + s; };
  for (const ConfigField& f : fields) {
    if (!f.training) continue;
    const auto it = saved.find(f.flag);
    if (it == saved.end()) {
      add(f.flag + " not in the checkpoint, " + f.value + " now");
      continue;
    }
    if (it->second != f.value)
      add(f.flag + " " + it->second + " in the checkpoint, " + f.value + " now");
    saved.erase(it);
  }
  for (const auto& [flag, value] : saved)
    add(flag + " " + value + " in the checkpoint, not set now");
  if (!differing.empty()) {
    throw GroupError(
        ErrorCode::kInvalidArgument,
        source + ": the checkpoint was written by a run with other settings: " + differing);
  }
}

}  // namespace cpattn::train
