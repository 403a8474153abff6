// Communicator::split's default and the (color, key) exchange every backend's split starts with.
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "cpattn/backend.h"
#include "cpattn/error.h"

namespace cpattn {

std::unique_ptr<Communicator> Communicator::do_split(int /*color*/, int /*key*/) {
  throw Error(ErrorCode::kInvalidArgument,
              "Communicator::split: this communicator backend cannot make sub-groups");
}

namespace backend {

std::string rank_label(int rank, std::optional<int> group_rank, std::string_view group) {
  if (!group_rank.has_value()) return detail::str_cat("rank ", rank);
  return detail::str_cat("rank ", rank, " of a sub-group (", group, " rank ", *group_rank, ")");
}

SplitGroup plan_split(Communicator& parent, int color, int key) {
  const int p = parent.size();
  std::vector<std::array<int32_t, 2>> mine(static_cast<size_t>(p), {color, key});
  std::vector<std::array<int32_t, 2>> all(mine.size());
  parent.all_to_all(std::span<const std::array<int32_t, 2>>(mine),
                    std::span<std::array<int32_t, 2>>(all));
  std::string bad;
  for (int r = 0; r < p; ++r) {
    if (all[static_cast<size_t>(r)][0] < 0) {
      bad += detail::str_cat(bad.empty() ? "" : ", ", "rank ", r, " passed ",
                             all[static_cast<size_t>(r)][0]);
    }
  }
  CPATTN_CHECK(bad.empty(), ErrorCode::kInvalidArgument,
               "Communicator::split: every color must be >= 0; ", bad);
  SplitGroup g;
  for (int r = 0; r < p; ++r) {
    if (all[static_cast<size_t>(r)][0] == color) g.members.push_back(r);
  }
  std::stable_sort(g.members.begin(), g.members.end(), [&](int a, int b) {
    return all[static_cast<size_t>(a)][1] < all[static_cast<size_t>(b)][1];
  });
  g.rank = static_cast<int>(std::find(g.members.begin(), g.members.end(), parent.rank()) -
                            g.members.begin());
  return g;
}

}  // namespace backend
}  // namespace cpattn
