// Strategy names, the rules of check_strategy and the dispatch of cp_forward / cp_backward
// (strategy.h, cpattn/detail/cp.h).
#include <charconv>
#include <string>

#include "cp/ring_core.h"
#include "cp/strategy_detail.h"
#include "cp/transpose.h"
#include "cpattn/cp_options.h"
#include "cpattn/error.h"

namespace cpattn {

std::string strategy_name(const Strategy& s) {
  switch (s.kind) {
    case Strategy::Kind::kRing:
      return "ring";
    case Strategy::Kind::kAllGather:
      return "allgather";
    case Strategy::Kind::kUlysses:
      return "ulysses";
    case Strategy::Kind::kHybrid:
      return detail::str_cat("hybrid:", s.ulysses_size, "x", s.ring_size);
  }
  return "?";
}

namespace {

[[noreturn]] void bad_name(std::string_view name) {
  throw Error(ErrorCode::kInvalidArgument,
              detail::str_cat("strategy: expected ring | allgather | ulysses | hybrid:UxR (U, R "
                              ">= 1, e.g. hybrid:2x4), got ",
                              detail::quoted(name)));
}

int parse_size(std::string_view text, std::string_view name) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 1) bad_name(name);
  return value;
}

}  // namespace

Strategy parse_strategy(std::string_view name) {
  for (const Strategy s : {Strategy::ring(), Strategy::allgather(), Strategy::ulysses()}) {
    if (name == strategy_name(s)) return s;
  }
  constexpr std::string_view kHybrid = "hybrid:";
  if (name.substr(0, kHybrid.size()) != kHybrid) bad_name(name);
  const std::string_view sizes = name.substr(kHybrid.size());
  const size_t x = sizes.find('x');
  if (x == std::string_view::npos) bad_name(name);
  return Strategy::hybrid(parse_size(sizes.substr(0, x), name),
                          parse_size(sizes.substr(x + 1), name));
}

void check_strategy(const Strategy& s, int cp_size, int64_t Hq, int64_t Hkv) {
  const std::string name = strategy_name(s);
  if (s.kind != Strategy::Kind::kHybrid) {
    CPATTN_CHECK(s.ulysses_size == 0 && s.ring_size == 0, ErrorCode::kInvalidArgument, "strategy ",
                 name, ": ulysses_size and ring_size are for hybrid only, got ", s.ulysses_size,
                 " and ", s.ring_size);
  }
  switch (s.kind) {
    case Strategy::Kind::kRing:
    case Strategy::Kind::kAllGather:
      return;
    case Strategy::Kind::kUlysses: {
      const std::string what = detail::str_cat("strategy ulysses over ", cp_size, " ranks");
      detail::HeadSplit(Hq, Hkv, cp_size, what.c_str());
      return;
    }
    case Strategy::Kind::kHybrid: {
      CPATTN_CHECK(s.ulysses_size >= 1 && s.ring_size >= 1 &&
                       static_cast<int64_t>(s.ulysses_size) * s.ring_size == cp_size,
                   ErrorCode::kInvalidArgument, "strategy ", name,
                   ": U x R must cover the group of ", cp_size,
                   " ranks (U, R >= 1, U * R = ", cp_size, ")");
      const std::string what =
          detail::str_cat("strategy ", name, ": ulysses over rows of ", s.ulysses_size, " ranks");
      detail::HeadSplit(Hq, Hkv, s.ulysses_size, what.c_str());
      return;
    }
  }
  throw Error(ErrorCode::kInvalidArgument, "strategy: unknown kind");
}

void check_strategy_dtype(const Strategy& strategy, DType dtype) {
  CPATTN_CHECK(dtype == DType::kF32 || strategy.kind == Strategy::Kind::kRing,
               ErrorCode::kInvalidArgument, "strategy ", strategy_name(strategy), " takes fp32 ",
               "tensors only, got ", dtype_name(dtype),
               " (bf16 and fp16 run on the ring strategy)");
}

namespace detail {

CpForwardResult cp_forward(const CpCall& c) {
  switch (c.options.strategy.kind) {
    case Strategy::Kind::kRing:
      return ring_call_forward(c);
    case Strategy::Kind::kAllGather:
      return allgather_forward(c);
    case Strategy::Kind::kUlysses:
      return ulysses_forward(c);
    case Strategy::Kind::kHybrid:
      return hybrid_forward(c);
  }
  throw Error(ErrorCode::kInternal, "strategy: unknown kind");
}

AttentionGradients cp_backward(const CpCall& c, const BackwardState& s) {
  switch (c.options.strategy.kind) {
    case Strategy::Kind::kRing:
      return ring_call_backward(c, s);
    case Strategy::Kind::kAllGather:
      return allgather_backward(c, s);
    case Strategy::Kind::kUlysses:
      return ulysses_backward(c, s);
    case Strategy::Kind::kHybrid:
      return hybrid_backward(c, s);
  }
  throw Error(ErrorCode::kInternal, "strategy: unknown kind");
}

CpForwardResult cp_attention_forward(Communicator& comm, ConstView q, ConstView k, ConstView v,
                                     const SequenceSharding& q_sharding,
                                     const SequenceSharding& kv_sharding,
                                     const AttentionParams& params, RngState rng,
                                     const CpOptions& options) {
  return cp_forward(validate_cp_call(comm, q, k, v, q_sharding, kv_sharding, params, rng, options));
}

AttentionGradients cp_attention_backward(Communicator& comm, ConstView dout, ConstView q,
                                         ConstView k, ConstView v, ConstView out,
                                         std::span<const float> lse,
                                         const SequenceSharding& q_sharding,
                                         const SequenceSharding& kv_sharding,
                                         const AttentionParams& params, RngState rng,
                                         const CpOptions& options) {
  const CpCall call =
      validate_cp_call(comm, q, k, v, q_sharding, kv_sharding, params, rng, options);
  const BackwardState state{dout, out, lse};
  check_backward_state(call, state);
  return cp_backward(call, state);
}

namespace {

// `options` with the ring strategy: what ring_attention_forward / _backward run whatever
// options.strategy says.
CpOptions as_ring(const CpOptions& options) {
  CpOptions ring = options;
  ring.strategy = Strategy::ring();
  return ring;
}

}  // namespace

CpForwardResult ring_attention_forward(Communicator& comm, ConstView q, ConstView k, ConstView v,
                                       const SequenceSharding& q_sharding,
                                       const SequenceSharding& kv_sharding,
                                       const AttentionParams& params, RngState rng,
                                       const CpOptions& options) {
  return cp_attention_forward(comm, q, k, v, q_sharding, kv_sharding, params, rng,
                              as_ring(options));
}

AttentionGradients ring_attention_backward(Communicator& comm, ConstView dout, ConstView q,
                                           ConstView k, ConstView v, ConstView out,
                                           std::span<const float> lse,
                                           const SequenceSharding& q_sharding,
                                           const SequenceSharding& kv_sharding,
                                           const AttentionParams& params, RngState rng,
                                           const CpOptions& options) {
  return cp_attention_backward(comm, dout, q, k, v, out, lse, q_sharding, kv_sharding, params, rng,
                               as_ring(options));
}

}  // namespace detail

}  // namespace cpattn
