// The strategies behind cp_attention_forward / cp_attention_backward (strategy.h),
// each on arguments the dispatcher validated (validate_cp_call, check_strategy).
#pragma once

#include <span>

#include "cp/ring_detail.h"
#include "cpattn/cp_options.h"
#include "cpattn/detail/cp.h"

namespace cpattn::detail {

/// The arguments every strategy's forward and backward share, validated once.
struct StrategyCall {
  Communicator& comm;
  ConstView q, k, v;
  const SequenceSharding& q_seq;
  const SequenceSharding& kv_seq;
  const AttentionParams& params;
  RngState rng;
  const CpOptions& options;
  CpDims d;
};

/// The state of a backward: dout, and the forward's out and lse of this rank's queries.
struct BackwardState {
  ConstView dout, out;
  std::span<const float> lse;
};

detail::CpForwardResult allgather_forward(const StrategyCall& c);
AttentionGradients allgather_backward(const StrategyCall& c, const BackwardState& s);
detail::CpForwardResult ulysses_forward(const StrategyCall& c);
AttentionGradients ulysses_backward(const StrategyCall& c, const BackwardState& s);
detail::CpForwardResult hybrid_forward(const StrategyCall& c);
AttentionGradients hybrid_backward(const StrategyCall& c, const BackwardState& s);

}  // namespace cpattn::detail
