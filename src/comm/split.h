// The backend-independent half of Communicator::split: every rank learns every rank's (color,
// key) through the parent's all_to_all (under its deadline) and derives its sub-group.
#pragma once

#include <vector>

#include "cpattn/communicator.h"

namespace cpattn::detail {

/// This rank's sub-group of a split: the parent ranks of its color in the new order (by key,
/// then parent rank) and its rank among them.
struct SplitGroup {
  std::vector<int> members;
  int rank = 0;
};

/// Collective over `parent`: exchanges (color, key) with every rank and returns this rank's
/// sub-group. Throws Error(kInvalidArgument) on every rank when any rank passed color < 0
/// (naming the ranks), and the parent's communication errors.
SplitGroup plan_split(Communicator& parent, int color, int key);

}  // namespace cpattn::detail
