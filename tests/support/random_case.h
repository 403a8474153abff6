// rapidcheck generators of random attention problems for the property tests: one place for the
// head groupings and position layouts every random case draws from.
#pragma once

#include <rapidcheck.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "verify/reference.h"
#include "verify/reference_case.h"

namespace cpattn::testing {

/// Ranges of draw_dims: B in [1, 3), Sq in [1, sq_end), Sk in [sk_begin, sk_end), Dqk and Dv
/// one of the listed widths.
struct DimRanges {
  int64_t sq_end = 0;
  int64_t sk_begin = 1;
  int64_t sk_end = 0;
  std::vector<int64_t> dqk;
  std::vector<int64_t> dv;
};

/// Draws the dims of one case inside a rapidcheck property: sizes from `ranges`, (Hq, Hkv) one of
/// MHA 1/1 and 2/2 and GQA 4/1 and 4/2.
inline reference::Dims draw_dims(const DimRanges& ranges) {
  using Heads = std::pair<int64_t, int64_t>;
  const Heads heads = *rc::gen::element(Heads{1, 1}, Heads{2, 2}, Heads{4, 1}, Heads{4, 2});
  reference::Dims d;
  d.B = *rc::gen::inRange<int64_t>(1, 3);
  d.Sq = *rc::gen::inRange<int64_t>(1, ranges.sq_end);
  d.Sk = *rc::gen::inRange<int64_t>(ranges.sk_begin, ranges.sk_end);
  d.Hq = heads.first;
  d.Hkv = heads.second;
  d.Dqk = *rc::gen::elementOf(ranges.dqk);
  d.Dv = *rc::gen::elementOf(ranges.dv);
  return d;
}

/// Draws how a case's global positions are laid out: contiguous, zigzag or striped.
inline reference::PositionKind draw_positions() {
  return *rc::gen::element(reference::PositionKind::kContiguous, reference::PositionKind::kZigzag,
                           reference::PositionKind::kStriped);
}

}  // namespace cpattn::testing
