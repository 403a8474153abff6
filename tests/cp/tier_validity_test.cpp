// One validity rule per tier: a call the single-rank kernel accepts, every CP strategy and the
// safe API accept too (and the other way round). Here the edge of the document rule: no queries
// (Sq = 0) with key documents, which the kernel has always accepted and the ring and allgather
// used to refuse ("document ids must be given for both"), and its counterpart, ids for one side
// only when both sides have tokens, which every tier refuses alike.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "cpattn/attention.h"
#include "cpattn/error.h"
#include "cpattn/kernel.h"
#include "cpattn/thread_communicator.h"
#include "support/rank_outcomes.h"

namespace cpattn::testing {
namespace {

constexpr int64_t kSk = 12, kH = 4, kD = 8;

std::vector<std::pair<const char*, Strategy>> strategies() {
  return {{"ring", Strategy::ring()},
          {"allgather", Strategy::allgather()},
          {"ulysses", Strategy::ulysses()},
          {"hybrid:2x2", Strategy::hybrid(2, 2)}};
}

std::vector<int64_t> key_docs() {
  std::vector<int64_t> docs(kSk);
  for (int64_t i = 0; i < kSk; ++i) docs[static_cast<size_t>(i)] = i < 5 ? 0 : 1;
  return docs;
}

// The kernel, one rank: Sq queries (their documents `q_doc`, maybe none) against kSk keys with
// documents. Returns the error code, or nullopt when it accepts.
std::optional<ErrorCode> kernel_outcome(int64_t sq, bool q_docs) {
  Tensor q({1, sq, kH, kD}), kv({1, kSk, kH, kD}), out({1, sq, kH, kD});
  std::vector<float> lse(static_cast<size_t>(sq * kH));
  std::vector<int64_t> q_pos(static_cast<size_t>(sq)), k_pos(kSk), q_doc(q_docs ? sq : 0, 0);
  for (int64_t i = 0; i < kSk; ++i) k_pos[static_cast<size_t>(i)] = i;
  const std::vector<int64_t> k_doc = key_docs();
  AttentionParams params;
  params.causal = true;
  try {
    attention_kernel_forward({q.view(), kv.view(), kv.view(), q_pos, k_pos, q_doc, k_doc}, params,
                             {1, 0}, out.view(), lse);
  } catch (const Error& e) {
    return e.code();
  }
  return std::nullopt;
}

// The safe API on 4 in-process ranks with `strategy`: the whole sequence has sq queries (their
// documents when q_docs) and kSk keys with documents. Every rank's outcome.
RankOutcomes cp_outcomes(int64_t sq, bool q_docs, const Strategy& strategy) {
  return run_all(4, [&](Communicator& comm) {
    SequenceSharding q_seq = SequenceSharding::of(Layout::kZigzag, sq, 4, comm.rank());
    SequenceSharding kv_seq = SequenceSharding::of(Layout::kZigzag, kSk, 4, comm.rank());
    if (q_docs) q_seq.docs.assign(static_cast<size_t>(sq), 0);
    kv_seq.docs = key_docs();
    const Tensor q({1, q_seq.local_length(), kH, kD}), kv({1, kv_seq.local_length(), kH, kD});
    AttentionParams params;
    params.causal = true;
    CpOptions options;
    options.strategy = strategy;
    const ForwardResult f = attention_forward(comm, q.view(), kv.view(), kv.view(), q_seq, kv_seq,
                                              params, {1, 0}, options);
    const Tensor dout({1, q_seq.local_length(), kH, kD});
    attention_backward(comm, dout.view(), q.view(), kv.view(), kv.view(), f, q_seq, kv_seq, params,
                       {1, 0}, options);
  });
}

TEST(TierValidity, NoQueriesWithKeyDocumentsIsValidInEveryTier) {
  ASSERT_FALSE(kernel_outcome(0, false).has_value());
  for (const auto& [name, strategy] : strategies()) {
    const RankOutcomes o = cp_outcomes(0, false, strategy);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kInternal)  // kInternal: no error
          << name << " rank " << r << ": " << o.messages[static_cast<size_t>(r)];
    }
  }
}

TEST(TierValidity, DocumentsForOneSideOnlyAreRefusedInEveryTier) {
  ASSERT_EQ(kernel_outcome(7, false), ErrorCode::kInvalidArgument);
  for (const auto& [name, strategy] : strategies()) {
    const RankOutcomes o = cp_outcomes(8, false, strategy);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kInvalidArgument) << name << " " << r;
      EXPECT_THAT(o.messages[static_cast<size_t>(r)],
                  ::testing::HasSubstr("document ids must be given for both the queries and the "
                                       "keys or for neither, got 0 for 8 queries and 12 for 12"))
          << name;
    }
  }
}

}  // namespace
}  // namespace cpattn::testing
