// The strategy planner (plan.h): the formulas of docs/strategies.md, evaluated on the visible
// pairs of every rank (MaskRule) and the ring's document-aware relay (RelayPlan).
#include "cpattn/plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "cp/ring_detail.h"
#include "cp/transpose.h"
#include "cpattn/error.h"
#include "cpattn/mask.h"

namespace cpattn {

namespace {

constexpr double kFloat = 4.0;  // bytes

// The ring's buffers of the largest block besides the caller's tensors (src/cp/ring_backward.cpp,
// its backward peak): 2 k|v relay buffers, 2 dk|dv accumulators, the home accumulator.
constexpr double kRingBlocks = 5.0;

// The ring's own copies of a forward + backward, read and write each: packing the own k|v into
// the relay in both passes, and unpacking the finished dk|dv (merges and relayed share additions
// happen inside the kernel; a direct block's at most kMaxDirect share additions are not counted).
double ring_copy_seconds(double block_bytes, const KernelModel& kernel) {
  return 2 * 3 * block_bytes / kernel.copy_bytes_per_s;
}

// The sequence of the problem on rank `rank` (documents as ids 0, 1, ...).
SequenceSharding sharding(const PlanProblem& p, const std::vector<int64_t>& docs, int rank) {
  SequenceSharding s = SequenceSharding::of(p.layout, p.S, p.cp_size, rank);
  s.docs = docs;
  return s;
}

// The (query, key) pairs a kernel call computes: those of its 128 x 128 tiles (the kernel's
// tiling rule, tile_spans, in the call's token order) that the mask does not hide entirely
// (MaskRule::classify of the tiles' ranges, the kernel's own tile skipping), so partially
// visible tiles count whole.
constexpr int64_t kTile = 128;
struct Tiles {
  std::vector<BlockRange> ranges;
  std::vector<int64_t> sizes;
};
Tiles tiles_of(std::span<const int64_t> pos, std::span<const int64_t> doc) {
  Tiles t;
  for (const TileSpan& span : tile_spans(pos, doc, kTile)) {
    const size_t at = static_cast<size_t>(span.begin), n = static_cast<size_t>(span.size);
    t.ranges.push_back(block_range(pos.subspan(at, n), doc.empty() ? doc : doc.subspan(at, n)));
    t.sizes.push_back(span.size);
  }
  return t;
}
double computed_pairs(const MaskRule& rule, const Tiles& q, const Tiles& k) {
  double n = 0;
  for (size_t i = 0; i < q.ranges.size(); ++i)
    for (size_t j = 0; j < k.ranges.size(); ++j)
      if (rule.classify(q.ranges[i], k.ranges[j]) != BlockVisibility::kHidden)
        n += static_cast<double>(q.sizes[i] * k.sizes[j]);
  return n;
}

// A ring rank's traffic (forward + backward) on block tables of `heads` kv heads with the
// document-aware routing: the bytes and messages it sends; the largest block; the blocks of
// buffer a direct own block adds (its packed k|v, one dk|dv share per rank that needs it).
struct RingTraffic {
  double bytes = 0;
  int64_t messages = 0;
  int64_t max_block = 0;
  int64_t direct_buffers = 0;
};
RingTraffic rank_traffic(const PlanProblem& p, const detail::RelayPlan& plan,
                         const detail::BlockTable& kv, int64_t heads, int rank) {
  const int P = kv.size();
  RingTraffic t;
  const double per_token = static_cast<double>(p.B * heads * (p.Dqk + p.Dv)) * kFloat;
  for (int s = 0; s < P; ++s) {
    const int b = ((rank - s) % P + P) % P;
    if (!plan.on_path(rank, s)) continue;
    const double bytes = per_token * static_cast<double>(kv.length(b));
    if (plan.direct(b)) {
      const auto needers = static_cast<int64_t>(plan.direct_steps(b).size());
      if (s == 0) {  // k/v to each rank that needs it, in forward and backward
        t.bytes += 2 * static_cast<double>(needers) * bytes;
        t.messages += 2 * needers;
        t.direct_buffers = 1 + needers;
      } else {  // the share goes home
        t.bytes += bytes;
        t.messages += 1;
      }
    } else if (s < plan.reach(b)) {  // k/v relayed in forward and backward, accumulator on
      t.bytes += 3 * bytes;
      t.messages += 3;
    } else if (s > 0) {  // the last rank of the path: the accumulator goes home
      t.bytes += bytes;
      t.messages += 1;
    }
  }
  return t;
}

// t <- the elementwise maximum of t and a rank's traffic `tr`.
void take_max(RingTraffic& t, const RingTraffic& tr) {
  t.bytes = std::max(t.bytes, tr.bytes);
  t.messages = std::max(t.messages, tr.messages);
  t.direct_buffers = std::max(t.direct_buffers, tr.direct_buffers);
}

// Compute and transfers that overlap as far as the link does (LinkModel::overlap): from their
// sum (no overlap) down to the larger of the two (full overlap).
double overlapped(double compute_s, double transfer_s, const LinkModel& link) {
  return compute_s + transfer_s - link.overlap * std::min(compute_s, transfer_s);
}

int busiest(const std::vector<double>& x) {
  return static_cast<int>(std::max_element(x.begin(), x.end()) - x.begin());
}

// The largest rate or latency a model may state (finite, so predicted times stay finite).
constexpr double kMaxModelFigure = 1e30;

void check_problem(const PlanProblem& p, const LinkModel& link, const KernelModel& kernel) {
  constexpr auto kArg = ErrorCode::kInvalidArgument;
  CPATTN_CHECK(p.S >= 0 && p.cp_size >= 1 && p.B >= 1 && p.Hq >= 1 && p.Hkv >= 1 &&
                   p.Hq % p.Hkv == 0 && p.Dqk >= 1 && p.Dv >= 1,
               kArg,
               "plan: expected S >= 0, P >= 1, B, Dqk, Dv >= 1 and Hq a multiple of Hkv >= 1");
  resolve_params(p.params, p.Dqk, p.Hq);
  if (!p.doc_lengths.empty()) {
    int64_t sum = 0;
    for (const int64_t l : p.doc_lengths) {
      CPATTN_CHECK(l >= 1, kArg, "plan: document lengths must be >= 1, got ", l);
      sum += l;
    }
    CPATTN_CHECK(sum == p.S, kArg, "plan: the document lengths sum to ", sum, ", not S = ", p.S);
  }
  // Rates of at least 1 per second and finite figures keep every predicted time finite.
  const auto rate = [](double x) { return x >= 1 && x <= kMaxModelFigure; };
  CPATTN_CHECK(rate(link.bandwidth_bytes_per_s) && rate(kernel.flops_per_s) &&
                   rate(kernel.copy_bytes_per_s) && link.latency_s >= 0 &&
                   link.latency_s <= kMaxModelFigure && kernel.concurrent_ranks >= 0,
               kArg,
               "plan: the link and kernel models need rates in [1, 1e30] per second and a latency "
               "in [0, 1e30] s, got bandwidth ",
               link.bandwidth_bytes_per_s, " B/s, latency ", link.latency_s, " s, kernel ",
               kernel.flops_per_s, " FLOP/s, copies ", kernel.copy_bytes_per_s,
               " B/s, concurrent ranks ", kernel.concurrent_ranks);
  CPATTN_CHECK(link.overlap >= 0 && link.overlap <= 1, kArg,
               "plan: the link's overlap is a fraction in [0, 1], got ", link.overlap);
}

}  // namespace

std::vector<Strategy> candidate_strategies(int cp_size) {
  std::vector<Strategy> s = {Strategy::ring(), Strategy::allgather(), Strategy::ulysses()};
  for (int u = 2; u < cp_size; ++u) {
    if (cp_size % u == 0) s.push_back(Strategy::hybrid(u, cp_size / u));
  }
  return s;
}

namespace {

// What every strategy's estimate reads, computed once per problem: the sizes, the mask rule,
// each rank's shard, tokens and tiles, the computed pairs of the ring (each rank's queries
// against every block) and of allgather (against the whole sequence), and the busiest rank.
struct PlanContext {
  const PlanProblem& p;
  const LinkModel& link;
  const KernelModel& kernel;
  int P = 1;
  std::vector<int64_t> docs;
  MaskRule rule;
  double slowdown = 1;  // the kernel rate's share each rank gets (concurrent_ranks)
  double flops_per_pair_head = 0;
  double B = 0, Hq = 0, Hkv = 0, Dqk = 0, Dv = 0, S = 0;
  std::vector<SequenceSharding> shards{};
  std::vector<double> tokens{};
  std::vector<Tiles> shard_tiles{};
  Tiles whole_tiles{};
  std::vector<double> pairs{}, gathered{};
  int hot = 0;          // the rank with the most computed ring pairs
  double Sr = 0;        // its tokens
  double kv_token = 0;  // bytes of one token's k|v
};

std::vector<int64_t> document_ids(const PlanProblem& p) {
  std::vector<int64_t> docs;
  for (size_t d = 0; d < p.doc_lengths.size(); ++d) {
    docs.insert(docs.end(), static_cast<size_t>(p.doc_lengths[d]), static_cast<int64_t>(d));
  }
  return docs;
}

PlanContext plan_context(const PlanProblem& p, const LinkModel& link, const KernelModel& kernel) {
  std::vector<int64_t> docs = document_ids(p);
  const MaskRule rule(p.params, !docs.empty());
  PlanContext c{p, link, kernel, p.cp_size, std::move(docs), rule};
  const int P = c.P;
  c.slowdown = kernel.concurrent_ranks == 0 || kernel.concurrent_ranks >= P
                   ? 1.0
                   : static_cast<double>(kernel.concurrent_ranks) / P;
  c.flops_per_pair_head = 7.0 * static_cast<double>(p.B * (p.Dqk + p.Dv));
  c.B = static_cast<double>(p.B);
  c.Hq = static_cast<double>(p.Hq);
  c.Hkv = static_cast<double>(p.Hkv);
  c.Dqk = static_cast<double>(p.Dqk);
  c.Dv = static_cast<double>(p.Dv);
  c.S = static_cast<double>(p.S);
  for (int r = 0; r < P; ++r) {
    c.shards.push_back(sharding(p, c.docs, r));
    c.tokens.push_back(static_cast<double>(c.shards.back().local_length()));
    c.shard_tiles.push_back(
        tiles_of(c.shards.back().local_positions(), c.shards.back().local_docs()));
  }
  std::vector<int> all(static_cast<size_t>(P));
  std::iota(all.begin(), all.end(), 0);
  const detail::TokenUnion whole = detail::token_union(c.shards[0], all);
  c.whole_tiles = tiles_of(whole.pos, whole.doc);
  for (int r = 0; r < P; ++r) {
    double n = 0;
    for (int b = 0; b < P; ++b) {
      n += computed_pairs(rule, c.shard_tiles[static_cast<size_t>(r)],
                          c.shard_tiles[static_cast<size_t>(b)]);
    }
    c.pairs.push_back(n);
    c.gathered.push_back(
        computed_pairs(rule, c.shard_tiles[static_cast<size_t>(r)], c.whole_tiles));
  }
  c.hot = busiest(c.pairs);
  c.Sr = c.tokens[static_cast<size_t>(c.hot)];
  c.kv_token = c.B * c.Hkv * (c.Dqk + c.Dv) * kFloat;
  return c;
}

// Bytes of rank r's sequence-side tensors: q (or dq), k|v (or dk|dv), out, and one float per
// row and query head (lse, delta). The estimates' memory is, per rank, the live bytes at the
// peak of its backward (the larger pass: it holds the forward's out and lse besides its own
// buffers) from the sizes the strategy allocates on that rank; peak_bytes is the largest.
struct ShardBytes {
  double q = 0, kv = 0, o = 0, rows = 0;
};
ShardBytes shard_bytes(const PlanContext& c, int r) {
  const double t = c.tokens[static_cast<size_t>(r)];
  return {c.B * t * c.Hq * c.Dqk * kFloat, t * c.kv_token, c.B * t * c.Hq * c.Dv * kFloat,
          c.B * t * c.Hq * kFloat};
}

// How an estimate's time is made of its compute and its transfers: `hidden_s` of transfer that
// overlaps the compute as far as the link does, `exposed_s` that does not; `overlapped_s`, when
// set, is the compute-with-hidden-transfer time already taken rank by rank (the ring: the
// slowest rank's), instead of overlapped(compute, hidden_s).
struct Timing {
  double hidden_s = 0;
  double exposed_s = 0;
  std::optional<double> overlapped_s;
};

// The estimate of the ring: each rank's queries against every block, the busiest rank's sends.
StrategyEstimate estimate_ring(const PlanContext& c, Timing& timing) {
  StrategyEstimate e;
  const detail::BlockTable table = detail::BlockTable::of(c.shards[0]);
  // The slowest rank: its own compute or its own sends (the relay is pruned unevenly).
  RingTraffic t;
  t.max_block = table.max_length();
  const std::optional<detail::RelayPlan> plan =
      c.P > 1 ? std::optional<detail::RelayPlan>(std::in_place, c.p.params, table, table, true)
              : std::nullopt;
  const double block = static_cast<double>(t.max_block) * c.kv_token;
  double slowest = 0;
  for (int r = 0; r < c.P; ++r) {
    const RingTraffic tr = plan ? rank_traffic(c.p, *plan, table, c.p.Hkv, r) : RingTraffic{};
    take_max(t, tr);
    const double compute = c.pairs[static_cast<size_t>(r)] * c.Hq * c.flops_per_pair_head /
                           (c.kernel.flops_per_s * c.slowdown);
    slowest =
        std::max(slowest, overlapped(compute, tr.bytes / c.link.bandwidth_bytes_per_s, c.link));
    // Backward: dq, dk|dv, delta, 2 relay buffers, 2 accumulators, home (and a direct own
    // block's buffers); the state.
    const ShardBytes s = shard_bytes(c, r);
    const double ring_blocks = kRingBlocks + static_cast<double>(tr.direct_buffers);
    e.peak_bytes = std::max(
        e.peak_bytes, s.q + s.kv + s.rows + (c.P > 1 ? ring_blocks * block : 0) + s.o + s.rows);
  }
  e.flops = c.pairs[static_cast<size_t>(c.hot)] * c.Hq * c.flops_per_pair_head;
  e.bytes_sent = t.bytes;
  e.messages = t.messages;
  e.copy_seconds = c.P > 1 ? ring_copy_seconds(block, c.kernel) : 0;
  timing.hidden_s = e.bytes_sent / c.link.bandwidth_bytes_per_s;
  timing.overlapped_s = slowest;
  return e;
}

// The estimate of allgather: the busiest rank's queries against the whole sequence.
StrategyEstimate estimate_allgather(const PlanContext& c, Timing& timing) {
  StrategyEstimate e;
  const int P = c.P;
  e.flops = *std::max_element(c.gathered.begin(), c.gathered.end()) * c.Hq * c.flops_per_pair_head;
  // Grows with the own shard: the largest shard's rank sends the most.
  const double S_max = *std::max_element(c.tokens.begin(), c.tokens.end());
  e.bytes_sent = (2 * (P - 1) * S_max + (c.S - S_max)) * c.kv_token;
  e.messages = 3 * (P - 1);
  // Backward: dq, dk|dv and the state; dk|dv of every key; and either the gathered k|v with the
  // staging it arrives in (the own block packed once for every peer, the others' received: S
  // tokens, none at P = 1) or the reduce-scatter's staging of dk|dv (the others' tokens sent,
  // P - 1 slices of the own tokens received).
  const double whole = c.S * c.kv_token;
  const double gather_staging = P > 1 ? whole : 0;
  for (int r = 0; r < P; ++r) {
    const ShardBytes s = shard_bytes(c, r);
    const double scatter_staging = whole + (P - 2) * s.kv;
    e.peak_bytes = std::max(e.peak_bytes, s.q + s.kv + s.o + s.rows + whole +
                                              std::max(whole + gather_staging, scatter_staging));
  }
  e.copy_seconds = 2 * (3 * c.S + c.Sr) * c.kv_token / c.kernel.copy_bytes_per_s;
  timing.exposed_s = e.bytes_sent / c.link.bandwidth_bytes_per_s;
  return e;
}

// The block tables of a hybrid's rows: row j holds the tokens of ranks j U .. j U + U - 1.
detail::BlockTable row_table(const PlanContext& c, int U, int rows) {
  detail::BlockTable t;
  for (int j = 0; j < rows; ++j) {
    std::vector<int> m(static_cast<size_t>(U));
    std::iota(m.begin(), m.end(), j * U);
    detail::TokenUnion u = detail::token_union(c.shards[0], m);
    t.pos.push_back(std::move(u.pos));
    t.doc.push_back(std::move(u.doc));
  }
  return t;
}

// The estimate of Ulysses (U = P, one row) and of the U x R hybrid (Ulysses in rows of U ranks,
// the ring across the R rows on the head-sharded rows).
StrategyEstimate estimate_heads(const PlanContext& c, const Strategy& strategy, Timing& timing) {
  StrategyEstimate e;
  const int P = c.P;
  const bool hybrid = strategy.kind == Strategy::Kind::kHybrid;
  const int U = hybrid ? strategy.ulysses_size : P;
  const int R = hybrid ? strategy.ring_size : 1;
  const double hq = c.Hq / U;
  const double kvl = c.p.Hkv % U == 0 ? c.Hkv / U : 1.0;
  const double kv_head_token = c.B * kvl * (c.Dqk + c.Dv) * kFloat;
  // The tokens of rank m's row (the whole group for ulysses).
  const auto row_tokens_of = [&](int m) {
    double n = 0;
    for (int x = m / U * U; x < m / U * U + U; ++x) n += c.tokens[static_cast<size_t>(x)];
    return n;
  };
  // The busiest rank's row: its tokens; the busiest row's computed pairs (ulysses: one call over
  // the whole sequence; hybrid: its row against every row).
  const double row_tokens = row_tokens_of(hybrid ? c.hot : 0);
  double row_pairs = 0;
  const detail::BlockTable rows = row_table(c, U, R);
  if (hybrid) {
    std::vector<Tiles> row_tiles;
    for (int j = 0; j < R; ++j) {
      row_tiles.push_back(
          tiles_of(rows.pos[static_cast<size_t>(j)], rows.doc[static_cast<size_t>(j)]));
    }
    for (const Tiles& q : row_tiles) {
      double n = 0;
      for (const Tiles& k : row_tiles) n += computed_pairs(c.rule, q, k);
      row_pairs = std::max(row_pairs, n);
    }
  } else {
    row_pairs = computed_pairs(c.rule, c.whole_tiles, c.whole_tiles);
  }
  e.flops = row_pairs * hq * c.flops_per_pair_head;
  // A rank's all-to-all bytes, for its own tokens and its row's: to each peer the inputs of its
  // own tokens (forward q heads and kv heads; backward q, k|v, dout, lse, delta), and back to
  // each peer the results of that peer's tokens (out + lse; dq, dk|dv).
  const double in_per_token = c.B * hq * (2 * c.Dqk + c.Dv + 2) * kFloat + 2 * kv_head_token;
  const double out_per_token = c.B * hq * (c.Dv + 1 + c.Dqk) * kFloat + kv_head_token;
  std::vector<double> rank_a2a(static_cast<size_t>(P));
  for (int m = 0; m < P; ++m) {
    const double own = c.tokens[static_cast<size_t>(m)];
    rank_a2a[static_cast<size_t>(m)] =
        (U - 1) * own * in_per_token + (row_tokens_of(m) - own) * out_per_token;
  }
  const double a2a_max = *std::max_element(rank_a2a.begin(), rank_a2a.end());
  e.bytes_sent = a2a_max;
  e.messages = 4 * (U - 1);
  const double q_h = c.B * row_tokens * hq * c.Dqk * kFloat, kv_h = row_tokens * kv_head_token,
               o_h = c.B * row_tokens * hq * c.Dv * kFloat;
  // Each rank's row ring (hybrid with R > 1): its largest block and the blocks of buffer a
  // direct own block adds.
  double ring_block = 0;
  std::vector<int64_t> direct_buffers(static_cast<size_t>(P), 0);
  e.copy_seconds = 2 * (e.bytes_sent + 2 * (q_h + kv_h + o_h)) / c.kernel.copy_bytes_per_s;
  timing.exposed_s = a2a_max / c.link.bandwidth_bytes_per_s;
  if (R > 1) {
    // Each rank's all-to-all in its row plus its row ring's traffic (the busiest rank); t: the
    // busiest row ring's, for the time.
    PlanProblem row_problem = c.p;
    row_problem.Hkv = static_cast<int64_t>(kvl);
    RingTraffic t;
    t.max_block = rows.max_length();
    const detail::RelayPlan plan(row_problem.params, rows, rows, true);
    double busiest_total = 0;
    int64_t busiest_messages = 0;
    for (int m = 0; m < P; ++m) {
      const RingTraffic tr = rank_traffic(row_problem, plan, rows, row_problem.Hkv, m / U);
      take_max(t, tr);
      busiest_total = std::max(busiest_total, rank_a2a[static_cast<size_t>(m)] + tr.bytes);
      busiest_messages = std::max(busiest_messages, tr.messages);
      direct_buffers[static_cast<size_t>(m)] = tr.direct_buffers;
    }
    e.bytes_sent = busiest_total;
    e.messages += busiest_messages;
    ring_block = static_cast<double>(t.max_block) * kv_head_token;
    e.copy_seconds += ring_copy_seconds(ring_block, c.kernel);
    // The ring's transfers hide under compute as far as the link overlaps; the row all-to-alls
    // do not.
    timing.hidden_s = t.bytes / c.link.bandwidth_bytes_per_s;
  }
  // The backward's peak on rank m, the largest of its phases, each with the head side's dq, dk|dv
  // and the forward's out and lse (the state; delta too until the heads have it):
  //  - in: the head-side q, k|v, dout, lse, delta and the all-to-all's staging: the own tokens'
  //    slices for the U - 1 other members and the others' tokens of the own slice (the own block
  //    moves straight across);
  //  - compute (hybrid with R > 1): the head-side inputs and the row ring's buffers;
  //  - out: the sequence-side dq, dk|dv and the staging of the head-side gradients (the same
  //    tokens the other way).
  // Per token of the row, one rank's head side holds these bytes of inputs and of gradients.
  const double in_token = c.B * hq * (c.Dqk + c.Dv + 2) * kFloat + kv_head_token;
  const double grad_token = c.B * hq * c.Dqk * kFloat + kv_head_token;
  for (int m = 0; m < P; ++m) {
    const ShardBytes s = shard_bytes(c, m);
    const double row_t = row_tokens_of(m), own = c.tokens[static_cast<size_t>(m)];
    const double staged = (U - 1) * own + (row_t - own);
    const double in_phase = (row_t + staged) * in_token + s.rows;
    const double ring_phase =
        R > 1 ? row_t * in_token +
                    (kRingBlocks + static_cast<double>(direct_buffers[static_cast<size_t>(m)])) *
                        ring_block
              : 0;
    const double out_phase = s.q + s.kv + staged * grad_token;
    e.peak_bytes = std::max(e.peak_bytes, row_t * grad_token + s.o + s.rows +
                                              std::max({in_phase, ring_phase, out_phase}));
  }
  return e;
}

// The times every estimate derives the same way from its flops, messages, copies and Timing.
void finish_times(const PlanContext& c, const Timing& timing, StrategyEstimate& e) {
  e.compute_seconds = e.flops / (c.kernel.flops_per_s * c.slowdown);
  const double latency = static_cast<double>(e.messages) * c.link.latency_s;
  e.comm_seconds = timing.hidden_s + timing.exposed_s + latency;
  const double with_hidden = timing.overlapped_s
                                 ? *timing.overlapped_s
                                 : overlapped(e.compute_seconds, timing.hidden_s, c.link);
  e.seconds = timing.exposed_s + with_hidden + latency + e.copy_seconds;
}

}  // namespace

std::vector<StrategyEstimate> plan_strategies(const PlanProblem& p, const LinkModel& link,
                                              const KernelModel& kernel) {
  check_problem(p, link, kernel);
  const PlanContext c = plan_context(p, link, kernel);
  std::vector<StrategyEstimate> out;
  for (const Strategy& strategy : candidate_strategies(c.P)) {
    try {
      check_strategy(strategy, c.P, p.Hq, p.Hkv);
    } catch (const Error& err) {
      StrategyEstimate e;
      e.strategy = strategy;
      e.feasible = false;
      e.reason = err.what();
      out.push_back(e);
      continue;
    }
    Timing timing;
    StrategyEstimate e = strategy.kind == Strategy::Kind::kRing ? estimate_ring(c, timing)
                         : strategy.kind == Strategy::Kind::kAllGather
                             ? estimate_allgather(c, timing)
                             : estimate_heads(c, strategy, timing);
    e.strategy = strategy;
    finish_times(c, timing, e);
    out.push_back(e);
  }
  return out;
}

const StrategyEstimate& recommend(const std::vector<StrategyEstimate>& estimates) {
  const StrategyEstimate* best = nullptr;
  for (const StrategyEstimate& e : estimates) {
    if (e.feasible && (best == nullptr || e.seconds < best->seconds)) best = &e;
  }
  CPATTN_CHECK(best != nullptr, ErrorCode::kInvalidArgument,
               "plan: no strategy can run this problem on this group");
  return *best;
}

}  // namespace cpattn
