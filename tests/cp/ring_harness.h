// Test harness of the ring: the verification helper (verify/ring_case.h: shard a whole
// reference::Problem over P ranks, run the ring, gather whole-sequence Outputs) under the names
// the cp tests use, and the ring's block-skip predicate.
#pragma once

#include <cstdint>
#include <span>

#include "cp/ring_detail.h"
#include "cpattn/detail/cp.h"
#include "cpattn/layout.h"
#include "cpattn/thread_communicator.h"
#include "verify/reference.h"
#include "verify/ring_case.h"

namespace cpattn::testing {

using reference::ProblemTensors;
using reference::RingRun;
using reference::run_ring;
using reference::run_ring_gathered;
using reference::run_ring_rank;
using reference::zero_outputs;

/// The ring's block skip (detail::BlockSkip: MaskRule::classify of the blocks' ranges, then of
/// their runs): true when the k/v block is hidden from every query of the q block.
inline bool block_hidden(std::span<const int64_t> q_pos, std::span<const int64_t> k_pos,
                         std::span<const int64_t> q_doc, std::span<const int64_t> k_doc,
                         const AttentionParams& params) {
  return detail::BlockSkip(params, q_pos, q_doc).hidden(k_pos, k_doc);
}

}  // namespace cpattn::testing
