// Calls know where they come from: the call agreement compares each call's site (the caller's
// CpOptions::call_site, else the source location of the call), so a rank that skips a
// call fails at the call that follows, on every rank, naming both sites, even when the two calls
// are otherwise identical (an evaluation forward without dropout).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "cpattn/error.h"
#include "cpattn/recompute.h"
#include "cpattn/source_location.h"
#include "state/call_agreement.h"
#include "state/stack_harness.h"
#include "support/rank_outcomes.h"

namespace cpattn::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kRanks = 2;

// Every rank throws kRankDisagreement naming the sites, the skipping rank's first.
void expect_sites_named(const RankOutcomes& o, const std::string& skipping_site,
                        const std::string& skipped_site) {
  for (int r = 0; r < kRanks; ++r) {
    const std::string& m = o.messages[static_cast<size_t>(r)];
    EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kRankDisagreement) << "rank " << r << m;
    EXPECT_THAT(m, HasSubstr("the calls come from different call sites")) << "rank " << r;
    EXPECT_THAT(m, HasSubstr(skipping_site)) << "rank " << r;
    EXPECT_THAT(m, HasSubstr(skipped_site)) << "rank " << r;
  }
}

// The repro: rank 0 makes an evaluation forward (dropout 0) that rank 1 skips; both draw
// from their own Generator, so rank 1's next call has the record of rank 0's skipped one, all but
// the site. Without sites the two calls exchanged data and rank 1's output was silently wrong.
TEST(CallSite, ASkippedEvaluationForwardFailsAtTheNextCallNamingBothSites) {
  const CausalDropoutCase c;
  AttentionParams eval = c.params;
  eval.dropout_p = 0.0f;
  int line_of_eval = 0, line_of_train = 0;
  const RankOutcomes o = run_all(kRanks, [&](Communicator& comm) {
    const int r = comm.rank();
    const SequenceSharding seq = c.p.sharding(kRanks, r);
    const Tensor x = c.p.shard(c.p.x, kRanks, r, &comm.memory());
    Generator gen(5);
    if (r == 0) {
      line_of_eval = static_cast<int>(SourceLocation::current().line) + 1;
      attention_forward(comm, x.view(), x.view(), x.view(), seq, eval, gen.next());
    }
    line_of_train = static_cast<int>(SourceLocation::current().line) + 1;
    attention_forward(comm, x.view(), x.view(), x.view(), seq, eval, gen.next());
  });
  expect_sites_named(o, "rank 1 at call_site_test.cpp:" + std::to_string(line_of_train),
                     "rank 0 at call_site_test.cpp:" + std::to_string(line_of_eval));
  EXPECT_THAT(o.messages[0], HasSubstr("did a rank skip a call"));
}

// Sites named by the caller (a layer index): the layer that one rank skipped is named.
TEST(CallSite, ASkippedLayerIsNamedByTheCallersSites) {
  const CausalDropoutCase c;
  const RankOutcomes o = run_all(kRanks, [&](Communicator& comm) {
    const int r = comm.rank();
    const SequenceSharding seq = c.p.sharding(kRanks, r);
    const Tensor x = c.p.shard(c.p.x, kRanks, r, &comm.memory());
    for (int layer = 0; layer < 3; ++layer) {
      if (r == 1 && layer == 1) continue;
      CpOptions options;
      options.call_site = "layer " + std::to_string(layer);
      attention_forward(comm, x.view(), x.view(), x.view(), seq, c.params, {9, 0}, options);
    }
  });
  expect_sites_named(o, "rank 1 at layer 2", "rank 0 at layer 1");
}

// A skipped backward: rank 1 runs layer 1's backward where rank 0 runs layer 0's... and the
// forward call numbers differ too: the field comes first, then the sites.
TEST(CallSite, ASkippedBackwardNamesTheFieldThenTheSites) {
  const CausalDropoutCase c;
  const RankOutcomes o = run_all(kRanks, [&](Communicator& comm) {
    const int r = comm.rank();
    const SequenceSharding seq = c.p.sharding(kRanks, r);
    const Tensor x = c.p.shard(c.p.x, kRanks, r, &comm.memory());
    CpOptions layer0, layer1;
    layer0.call_site = "layer 0";
    layer1.call_site = "layer 1";
    const ForwardResult f0 =
        attention_forward(comm, x.view(), x.view(), x.view(), seq, c.params, {9, 0}, layer0);
    const ForwardResult f1 =
        attention_forward(comm, x.view(), x.view(), x.view(), seq, c.params, {9, 1}, layer1);
    if (r == 0) {
      attention_backward(comm, x.view(), x.view(), x.view(), x.view(), f1, seq, c.params, {9, 1},
                         layer1);
    }
    attention_backward(comm, x.view(), x.view(), x.view(), x.view(), f0, seq, c.params, {9, 0},
                       layer0);
  });
  for (int r = 0; r < kRanks; ++r) {
    const std::string& m = o.messages[static_cast<size_t>(r)];
    EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kRankDisagreement) << m;
    EXPECT_THAT(m, HasSubstr("forward call number"));
    EXPECT_THAT(m, HasSubstr("; the calls come from different call sites: "));
    EXPECT_THAT(m, HasSubstr("at layer 0"));
    EXPECT_THAT(m, HasSubstr("at layer 1"));
  }
}

// Calls from one site agree (a loop), and a recompute takes the site it is given.
TEST(CallSite, CallsFromOneSiteAgree) {
  const CausalDropoutCase c;
  run_ranks(kRanks, [&](Communicator& comm) {
    const int r = comm.rank();
    const SequenceSharding seq = c.p.sharding(kRanks, r);
    const Tensor x = c.p.shard(c.p.x, kRanks, r, &comm.memory());
    for (uint64_t step = 0; step < 3; ++step) {
      const ForwardResult f =
          attention_forward(comm, x.view(), x.view(), x.view(), seq, c.params, {3, step});
      RecomputeOptions ropts;
      ropts.cp.call_site = "attention";
      recompute_backward(comm, make_checkpoint(f), {3, step}, x.view(), x.view(), x.view(),
                         x.view(), seq, c.params, ropts);
    }
  });
}

// What cannot be caught, and the design says so: one rank runs a loop of identical calls one
// time fewer. Its calls pair with the others' first ones and agree; the group fails only where
// the call sequences part (here the last call, whose site differs).
TEST(CallSite, ASkipBetweenIdenticalCallsOfOneSiteIsCaughtOnlyWhereTheSitesPart) {
  const CausalDropoutCase c;
  AttentionParams eval = c.params;
  eval.dropout_p = 0.0f;
  int calls_before_failure[kRanks] = {0, 0};
  const RankOutcomes o = run_all(kRanks, [&](Communicator& comm) {
    const int r = comm.rank();
    const SequenceSharding seq = c.p.sharding(kRanks, r);
    const Tensor x = c.p.shard(c.p.x, kRanks, r, &comm.memory());
    for (int i = 0; i < (r == 0 ? 3 : 2); ++i) {
      attention_forward(comm, x.view(), x.view(), x.view(), seq, eval, {3, 0});
      ++calls_before_failure[r];
    }
    CpOptions last;
    last.call_site = "the last call";
    attention_forward(comm, x.view(), x.view(), x.view(), seq, eval, {3, 0}, last);
  });
  EXPECT_EQ(calls_before_failure[0], 2);
  EXPECT_EQ(calls_before_failure[1], 2);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_THAT(o.messages[static_cast<size_t>(r)],
                AllOf(HasSubstr("rank 1 at the last call"), HasSubstr("rank 0 at call_site_test")));
  }
}

// The site text: a caller's name as given, else the file name without its directory and the
// line; long names are cut in the record and told apart by their digest.
TEST(CallSite, TextOfASite) {
  const SourceLocation here = SourceLocation::current();
  EXPECT_EQ(detail::call_site_text("", here), "call_site_test.cpp:" + std::to_string(here.line));
  EXPECT_EQ(detail::call_site_text("model.layers.3.attn", here), "model.layers.3.attn");
  const std::string long_a(80, 'a');
  const std::string long_b = std::string(79, 'a') + "b";
  const CpOptions options;
  const detail::CallRecord a =
      detail::call_record(detail::CallOp::kForward, 0, 0, 2, nullptr, options, long_a);
  const detail::CallRecord b =
      detail::call_record(detail::CallOp::kForward, 0, 0, 2, nullptr, options, long_b);
  EXPECT_STREQ(a.call_site, b.call_site);
  EXPECT_THAT(std::string(a.call_site), AllOf(HasSubstr("..."), Not(HasSubstr("b"))));
  EXPECT_NE(a.call_site_digest, b.call_site_digest);
}

}  // namespace
}  // namespace cpattn::testing
