// Varlen calls and the document-balanced layout in the call agreement (docs/design.md section
// 6): ranks that disagree on the layout or on the cu_seqlens fail every rank naming the field,
// and a rank whose cu_seqlens are refused (not from 0, decreasing, not ending at the tokens,
// another number of documents for q and k) refuses the call inside the agreement, so every rank
// raises instead of waiting for it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "cpattn/attention.h"
#include "cpattn/error.h"
#include "cpattn/layout.h"
#include "state/stack_harness.h"
#include "support/rank_outcomes.h"

namespace cpattn::testing {
namespace {

using ::testing::HasSubstr;
using Ids = std::vector<int64_t>;

constexpr int kRanks = 4;
const Ids kCu = {0, 1, 8, 40, 40, 45, 97};  // documents of 1, 7, 32, 0, 5 and 52 tokens

// x [1, 97, 2, 8] as q, k and v.
struct VarlenCase {
  StackProblem p{1, 97, 2, 8, 9};
  AttentionParams params;
  VarlenCase() {
    params.causal = true;
    params.dropout_p = 0.1f;
  }
};

// Rank `rank`'s forward of the varlen call with its own layout and cu_seqlens: the call a binding
// makes, refusing it in the agreement when its arguments are refused.
void varlen_forward(Communicator& comm, const VarlenCase& c, Layout layout, const Ids& cu_q,
                    const Ids& cu_k) {
  const int r = comm.rank();
  VarlenShardings seq;
  try {
    seq = varlen_shardings(layout, cu_q, cu_k, c.p.S, c.p.S, kRanks, r);
  } catch (const Error& e) {
    refuse_attention_call(comm, e, RefusedCall::kForward);
  }
  const Tensor x = shard_tensor(c.p.x.view(), seq.q, r, &comm.memory());
  attention_forward(comm, x.view(), x.view(), x.view(), seq.q, seq.kv, c.params, {3, 1});
}

TEST(VarlenAgreement, RanksThatDisagreeOnTheLayoutFailNamingIt) {
  const VarlenCase c;
  const RankOutcomes o = run_all(kRanks, [&](Communicator& comm) {
    const Layout layout = comm.rank() == 2 ? Layout::kZigzag : Layout::kDocZigzag;
    varlen_forward(comm, c, layout, kCu, kCu);
  });
  for (int r = 0; r < kRanks; ++r) {
    const size_t i = static_cast<size_t>(r);
    EXPECT_EQ(o.codes[i], ErrorCode::kRankDisagreement) << "rank " << r << ": " << o.messages[i];
    EXPECT_THAT(o.messages[i], HasSubstr("rank 2 has q layout=zigzag"));
    EXPECT_THAT(o.messages[i], HasSubstr("q layout=doc_zigzag"));
  }
}

TEST(VarlenAgreement, RanksThatDisagreeOnTheDocumentsFailNamingTheShardings) {
  const VarlenCase c;
  const Ids other = {0, 1, 8, 41, 41, 45, 97};  // the same tokens, cut elsewhere
  const RankOutcomes o = run_all(kRanks, [&](Communicator& comm) {
    varlen_forward(comm, c, Layout::kDocZigzag, comm.rank() == 1 ? other : kCu, kCu);
  });
  for (int r = 0; r < kRanks; ++r) {
    const size_t i = static_cast<size_t>(r);
    EXPECT_EQ(o.codes[i], ErrorCode::kRankDisagreement) << "rank " << r << ": " << o.messages[i];
    EXPECT_THAT(o.messages[i], HasSubstr("rank 1 has positions/documents digest="));
  }
}

TEST(VarlenAgreement, ARankWithBadCuSeqlensFailsEveryRank) {
  const VarlenCase c;
  struct Bad {
    const char* name;
    Ids cu_q, cu_k;
    ErrorCode code;
    const char* says;
  };
  const std::vector<Bad> bad = {
      {"not from 0",
       {2, 8, 40, 97},
       {0, 8, 40, 97},
       ErrorCode::kInvalidArgument,
       "cu_seqlens_q must start at 0, got 2"},
      {"decreasing",
       {0, 8, 40, 97},
       {0, 8, 4, 97},
       ErrorCode::kInvalidArgument,
       "cu_seqlens_k must be non-decreasing"},
      {"not the tokens",
       {0, 8, 40, 96},
       {0, 8, 40, 96},
       ErrorCode::kShapeMismatch,
       "cu_seqlens_q ends at 96 but q has 97 tokens"},
      {"documents differ",
       {0, 8, 40, 97},
       {0, 40, 97},
       ErrorCode::kInvalidArgument,
       "cu_seqlens_q lists 3 documents but cu_seqlens_k 2"},
  };
  for (const Bad& b : bad) {
    for (int refusing = 0; refusing < kRanks; refusing += 3) {
      const RankOutcomes o = run_all(kRanks, [&](Communicator& comm) {
        const bool mine = comm.rank() == refusing;
        varlen_forward(comm, c, Layout::kDocZigzag, mine ? b.cu_q : kCu, mine ? b.cu_k : kCu);
      });
      const std::string what = std::string(b.name) + " on rank " + std::to_string(refusing);
      for (int r = 0; r < kRanks; ++r) {
        const size_t i = static_cast<size_t>(r);
        EXPECT_THAT(o.messages[i], HasSubstr(b.says)) << what << ", rank " << r;
        EXPECT_EQ(o.codes[i], r == refusing ? b.code : ErrorCode::kRankDisagreement)
            << what << ", rank " << r << ": " << o.messages[i];
      }
    }
    // Every rank with the same bad lengths: each refuses alike, before any message.
    const RankOutcomes all = run_all(kRanks, [&](Communicator& comm) {
      varlen_forward(comm, c, Layout::kDocZigzag, b.cu_q, b.cu_k);
    });
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_EQ(all.codes[static_cast<size_t>(r)], b.code) << b.name << " everywhere, rank " << r;
    }
  }
}

}  // namespace
}  // namespace cpattn::testing
