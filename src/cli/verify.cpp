// `cpattn verify`: runs a sweep of kernel cases (or, with --cp, of ring cases) against the float64
// reference (the slow oracle of verify/reference.h) and prints a table, or JSON with --json;
// exits 1 if any case fails.
#include "cli/verify.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>

#include "cli/commands.h"
#include "cli/docs_spec.h"
#include "cli/job.h"
#include "cli/slices_spec.h"
#include "cli/verify_report.h"
#include "cli/verify_ring.h"
#include "cpattn/digest.h"
#include "cpattn/error.h"
#include "cpattn/isa.h"
#include "cpattn/stopwatch.h"
#include "train/agreement.h"
#include "train/files.h"
#ifdef CPATTN_HAVE_MPI
#include "cpattn/mpi_communicator.h"
#endif

namespace cpattn::cli {

namespace {
using reference::CaseSpec;
using reference::MaskKind;
using reference::PositionKind;
using L = MemoryLayout;

CaseSpec spec(MaskKind mask, reference::Dims dims, PositionKind positions, float p, L layout,
              uint64_t seed) {
  CaseSpec s;
  s.mask = mask;
  s.dims = dims;
  s.positions = positions;
  s.dropout_p = p;
  s.layout = layout;
  s.seed = seed;
  return s;
}

struct VerifyOptions {
  int threads = 1;
  bool json = false;
  // Ring mode (--cp or --backend mpi); shape options replace the default sweep by one shape.
  int cp = 0;          // 0: not given
  std::string layout;  // empty: every layout (doc_zigzag only with documents)
  std::string backend = "threads";
  std::string strategy;  // empty: every strategy the group allows (sweep_strategies)
  RingShape shape;
  bool shape_given = false;
  std::string varlen;  // --varlen: document lengths of a varlen call ("" none)
  double timeout_s = 300;
  std::string dtype = "fp32";  // --dtype: of q, k, v, dout and the results
  // --sink, --softcap, --alibi; the slices are read from slices_arg (resolve_features).
  CaseFeatures features;
  bool softcap_given = false;  // --softcap X must then be > 0 (0 is "off" only by default)
  bool slices_given = false;
  std::string slices_arg;  // --slices FILE|SPEC as given
};

// The most bytes a --slices file may have (16 MiB).
constexpr int64_t kMaxSlicesFileBytes = int64_t{1} << 24;

// --slices FILE|SPEC: the slices of the file `arg` names when it exists, else of the text `arg`.
std::vector<MaskSlice> read_slices(const std::string& arg) {
  std::error_code ec;
  if (std::filesystem::exists(arg, ec)) {
    const std::vector<uint8_t> bytes =
        train::read_regular_file(arg, kMaxSlicesFileBytes, "--slices");
    const std::string text(bytes.begin(), bytes.end());
    return parse_slices(text, "--slices " + detail::quoted(arg));
  }
  // Every slice has a ':'; without one the argument is a file name that names nothing.
  CPATTN_CHECK(arg.find(':') != std::string::npos, ErrorCode::kInvalidArgument, "--slices ",
               detail::quoted(arg), ": no such file, and not slices either; expected a file or ",
               kSlicesGrammar);
  return parse_slices(arg, "--slices");
}

// The options' features with the slices read, checked by the library's one validation of
// AttentionParams (overlapping slices, reversed ranges, the softcap) before any case runs.
CaseFeatures resolve_features(const VerifyOptions& o) {
  CaseFeatures f = o.features;
  CPATTN_CHECK(!o.softcap_given || (std::isfinite(f.softcap) && f.softcap > 0.0f),
               ErrorCode::kInvalidArgument, "--softcap: expected a finite number > 0, got ",
               f.softcap);
  if (o.slices_given) f.slices = read_slices(o.slices_arg);
  AttentionParams params;
  params.softcap = f.softcap;
  params.slices = f.slices;
  try {
    resolve_params(params, 1, 1);
  } catch (const Error& e) {
    throw Error(e.code(), std::string(f.slices.empty() ? "" : "--slices: ") + e.what());
  }
  return f;
}

#ifdef CPATTN_HAVE_MPI
// The --slices value ranks compare: the slices' canonical text, or for a long list its length and
// digest.
std::string slices_field(const std::vector<MaskSlice>& slices) {
  if (slices.empty()) return "none";
  const std::string text = format_slices(slices);
  if (text.size() <= 200) return text;
  return std::to_string(slices.size()) + " slices, digest " +
         digest_hex(Digest().string(text).finish());
}

// The settings every rank of `verify --backend mpi` must share (the features resolved), and
// `numerics`, the kernel arithmetic of the path this rank runs (ranks on other arithmetic would
// pass each against the reference, but not run one problem).
std::vector<train::ConfigField> verify_fields(const VerifyOptions& o, const std::string& numerics) {
  const RingShape& s = o.shape;
  const auto num = [](auto v) { return std::to_string(v); };
  return {{"--cp", num(o.cp), ""},
          {"--layout", o.layout.empty() ? "all" : o.layout, ""},
          {"--strategy", o.strategy.empty() ? "all" : o.strategy, ""},
          {"--causal", s.causal ? "on" : "off", ""},
          {"--window-left", num(s.window_left), ""},
          {"--window-right", num(s.window_right), ""},
          {"--dropout", train::format_value(s.dropout_p), ""},
          {"--docs", s.docs ? "on" : "off", ""},
          {"--varlen", o.varlen.empty() ? "off" : o.varlen, ""},
          {"--seq", num(s.dims.Sq), ""},
          {"--batch", num(s.dims.B), ""},
          {"--heads-q", num(s.dims.Hq), ""},
          {"--heads-kv", num(s.dims.Hkv), ""},
          {"--dqk", num(s.dims.Dqk), ""},
          {"--dv", num(s.dims.Dv), ""},
          {"--seed", num(s.seed), ""},
          {"--threads", num(o.threads), ""},
          {"--dtype", o.dtype, ""},
          {"--sink", o.features.sink ? "on" : "off", ""},
          {"--softcap", train::format_value(o.features.softcap), ""},
          {"--alibi", o.features.alibi ? "on" : "off", ""},
          {"--slices", slices_field(o.features.slices), ""},
          {"--json", o.json ? "on" : "off", ""},
          {"--timeout", train::format_value(o.timeout_s), ""},
          {"kernel.numerics", numerics, ""}};
}
#endif

// Prints results as the table or JSON and returns the exit status (1 if any failed).
int report(const std::string& title, const std::vector<VerifyResult>& results, bool json) {
  if (json) {
    std::printf("%s\n", verify_json(title, results).dump(2).c_str());
  } else {
    print_verify_table(stdout, title, results);
  }
  return all_passed(results) ? 0 : 1;
}

int run_kernel_sweep(const VerifyOptions& o) {
  std::vector<VerifyResult> results;
  for (CaseSpec s : default_kernel_cases()) {
    s.dtype = parse_dtype(o.dtype.c_str());
    add_features(o.features, s);
    results.push_back(verify_kernel_case(s, o.threads));
  }
  const std::string dtype = o.dtype == "fp32" ? "" : o.dtype + ", ";
  return report("cpattn verify: kernel vs float64 reference, " + dtype + std::to_string(o.threads) +
                    " thread(s), " + isa_summary(),
                results, o.json);
}

// The cases the options ask for: one shape or the default sweep, over one or all layouts, for
// one strategy or every one the group allows. Without --strategy and --layout the ring gets every
// layout and the other strategies one each (rotating), so the sweep stays a few seconds; a
// varlen run (--varlen) takes the document-balanced layout unless --layout names one.
std::vector<RingCase> ring_cases(const VerifyOptions& o, int cp_size) {
  // doc_zigzag is the zigzag without documents: it joins the sweep when there are some.
  std::vector<Layout> all = {Layout::kContiguous, Layout::kZigzag, Layout::kStriped};
  if (o.shape.docs) all.push_back(Layout::kDocZigzag);
  if (!o.shape.varlen.empty()) all = {Layout::kDocZigzag};
  const DType dtype = parse_dtype(o.dtype.c_str());
  const std::vector<Strategy> strategies =
      o.strategy.empty() ? sweep_strategies(cp_size, o.shape.dims.Hq, o.shape.dims.Hkv, dtype)
                         : std::vector<Strategy>{parse_strategy(o.strategy)};
  std::vector<RingCase> cases;
  for (size_t i = 0; i < strategies.size(); ++i) {
    const Strategy& s = strategies[i];
    std::vector<Layout> layouts = all;
    if (!o.layout.empty()) {
      layouts = {parse_layout(o.layout)};
    } else if (o.strategy.empty() && s != Strategy::ring()) {
      layouts = {all[i % all.size()]};
    }
    check_strategy_dtype(s, dtype);  // an explicit --strategy that refuses the dtype
    if (!o.shape_given) {
      for (RingCase& c : default_ring_cases(cp_size, layouts, s)) {
        c.shape.dtype = dtype;
        c.shape.features = o.features;
        c.shape.varlen = o.shape.varlen;
        c.shape.dims.Sq = o.shape.dims.Sq;
        cases.push_back(std::move(c));
      }
      continue;
    }
    RingShape shape = o.shape;
    shape.dtype = dtype;
    shape.features = o.features;
    for (const Layout layout : layouts) cases.push_back({shape, layout, cp_size, s});
  }
  return cases;
}

// Runs the ring cases on `world` (null: in-process ranks); rank 0 (or the only process) reports.
int run_ring_cases(const VerifyOptions& o, int cp_size, Communicator* world) {
  std::vector<VerifyResult> results;
  for (const RingCase& c : ring_cases(o, cp_size)) {
    for (VerifyResult& r : verify_ring_case(c, world, o.threads, deadline(o.timeout_s))) {
      results.push_back(std::move(r));
    }
  }
  int status = 0;
  if (world == nullptr || world->rank() == 0) {
    const std::string varlen = o.shape.varlen.empty()
                                   ? ""
                                   : "varlen (" + std::to_string(o.shape.varlen.size()) +
                                         " documents, " + std::to_string(o.shape.dims.Sq) +
                                         " tokens) on ";
    const std::string title =
        "cpattn verify: " + varlen + "CP strategies over " + std::to_string(cp_size) +
        " rank(s) (" +
        (world == nullptr ? std::string("in-process threads") : std::string("MPI processes")) +
        ") vs float64 reference and vs the single-rank kernel (" + std::to_string(o.threads) +
        " thread(s)), " + isa_summary();
    status = report(title, results, o.json);
  }
  if (world == nullptr) return status;
  double failed = status;  // every process exits with rank 0's verdict
  world->allreduce_sum(std::span<double>(&failed, 1));
  return failed > 0 ? 1 : 0;
}

// Reads --varlen into the shape: the document lengths and their sum as the sequence length (an
// explicit --seq must be that sum; mean:N covers --seq). No --docs with it: the documents are the
// varlen call's.
void set_varlen(VerifyOptions& o, bool seq_given) {
  RingShape& s = o.shape;
  CPATTN_CHECK(!s.docs, ErrorCode::kInvalidArgument,
               "verify: --varlen gives the documents; --docs goes without it");
  s.varlen = parse_docs(o.varlen, s.dims.Sq, 0, "--varlen");
  int64_t total = 0;
  for (const int64_t l : s.varlen) total += l;
  CPATTN_CHECK(!seq_given || total == s.dims.Sq, ErrorCode::kInvalidArgument, "verify: --varlen ",
               detail::quoted(o.varlen), " holds ", total, " tokens but --seq is ", s.dims.Sq);
  CPATTN_CHECK(total >= 1, ErrorCode::kInvalidArgument, "verify: --varlen ",
               detail::quoted(o.varlen), " holds no token");
  s.dims.Sq = total;
}

int run_verify(const VerifyOptions& given) {
  refuse_mpirun_without_mpi("verify", given.backend);
  deadline(given.timeout_s);  // validates --timeout
  VerifyOptions o = given;
  if (o.backend == "threads") {
    o.features = resolve_features(given);
    if (o.cp == 0 && o.shape.varlen.empty()) return run_kernel_sweep(o);
    return run_ring_cases(o, std::max(o.cp, 1), nullptr);  // --varlen alone: one rank
  }
#ifdef CPATTN_HAVE_MPI
  MpiSession session(nullptr, nullptr);
  MpiCommunicator world;
  world.set_timeout(deadline(o.timeout_s));
  return run_mpi_job(world, [&] {
    // Every process parsed its own command line: agree on it first (a rank started with another
    // --causal or --dropout would otherwise verify another problem).
    std::optional<Error> failed;
    std::string numerics;
    try {
      // Under mpirun the ring is the MPI world: --cp, when given, must agree with -n.
      CPATTN_CHECK(o.cp == 0 || o.cp == world.size(), ErrorCode::kInvalidArgument, "--cp ", o.cp,
                   " differs from the ", world.size(),
                   " MPI processes (--backend mpi uses one rank per process)");
      o.features = resolve_features(given);  // a rank that cannot read --slices fails them all
      numerics = kernel_numerics_name(       // a rank with a bad CPATTN_ISA fails them all too
          kernel_numerics(resolve_isa(Isa::kAuto), parse_dtype(o.dtype.c_str())));
    } catch (const Error& e) {
      failed = e;
    }
    train::share_startup_errors(world, failed);
    train::agree_on_fields(world, verify_fields(o, numerics), "cpattn verify");
    return run_ring_cases(o, world.size(), &world);
  });
#else
  throw Error(ErrorCode::kInvalidArgument,
              "--backend mpi: this cpattn was built without MPI (OpenMPI not found at configure)");
#endif
}
}  // namespace

std::vector<CaseSpec> default_kernel_cases() {
  // dims: {B, Sq, Sk, Hq, Hkv, Dqk, Dv}
  return {
      spec(MaskKind::kNone, {1, 7, 7, 1, 1, 8, 8}, PositionKind::kContiguous, 0.0f, L::kBSHD, 1),
      spec(MaskKind::kCausal, {1, 97, 1025, 4, 2, 192, 128}, PositionKind::kContiguous, 0.1f,
           L::kBHSD, 2),
      spec(MaskKind::kCausal, {1, 97, 97, 4, 1, 64, 64}, PositionKind::kZigzag, 0.0f, L::kBSHD, 3),
      spec(MaskKind::kWindow, {1, 1025, 97, 2, 2, 40, 40}, PositionKind::kStriped, 0.1f, L::kSBHD,
           4),
      spec(MaskKind::kCausalWindow, {1, 97, 97, 4, 2, 128, 128}, PositionKind::kContiguous, 0.5f,
           L::kBHSD, 5),
      spec(MaskKind::kDocs, {1, 97, 97, 4, 1, 64, 64}, PositionKind::kStriped, 0.1f, L::kBSHD, 6),
      spec(MaskKind::kDocsCausal, {1, 257, 257, 2, 2, 64, 64}, PositionKind::kZigzag, 0.0f,
           L::kSBHD, 7),
      spec(MaskKind::kCausal, {1, 1, 1025, 1, 1, 128, 128}, PositionKind::kContiguous, 0.0f,
           L::kBSHD, 8),
      spec(MaskKind::kNone, {1, 1025, 1, 8, 2, 8, 8}, PositionKind::kContiguous, 0.5f, L::kBHSD, 9),
      spec(MaskKind::kCausal, {1, 1025, 1025, 1, 1, 64, 64}, PositionKind::kZigzag, 0.1f, L::kBSHD,
           10),
      spec(MaskKind::kNone, {3, 7, 97, 4, 1, 24, 8}, PositionKind::kContiguous, 0.1f, L::kBSHD, 11),
      spec(MaskKind::kWindow, {3, 97, 7, 4, 1, 192, 128}, PositionKind::kContiguous, 0.0f, L::kSBHD,
           12),
      spec(MaskKind::kCausalWindow, {1, 97, 1025, 1, 1, 40, 40}, PositionKind::kStriped, 0.5f,
           L::kBSHD, 13),
      spec(MaskKind::kDocsCausal, {1, 97, 97, 8, 2, 8, 8}, PositionKind::kZigzag, 0.5f, L::kBHSD,
           14),
      spec(MaskKind::kCausal, {2, 33, 65, 8, 1, 96, 64}, PositionKind::kStriped, 0.1f, L::kSBHD,
           15),
      spec(MaskKind::kNone, {1, 113, 211, 3, 3, 59, 59}, PositionKind::kContiguous, 0.0f, L::kBHSD,
           16),
  };
}

void add_features(const CaseFeatures& features, CaseSpec& spec) {
  spec.sink = features.sink;
  spec.softcap = features.softcap;
  spec.alibi = features.alibi;
  spec.slices.insert(spec.slices.end(), features.slices.begin(), features.slices.end());
}

VerifyResult verify_kernel_case(const CaseSpec& case_spec, int threads) {
  const Stopwatch watch;
  reference::ErrorRow row = reference::check_kernel_case(case_spec, threads);
  // The kernel returns dsink whenever the case has sinks (reference::run_kernel).
  return {std::move(row), watch.seconds(), case_spec.sink, case_spec.sink};
}

Command verify_command() {
  return {"verify", [](CLI::App& app) -> std::function<int()> {
            CLI::App* sub = app.add_subcommand(
                "verify",
                "Check the attention kernel against a float64 reference on a sweep of cases "
                "(masks, GQA, dropout, layouts, odd sizes); with --cp P, check the CP strategies "
                "over P ranks against the reference and the single-rank kernel instead; exit "
                "status 1 if any case fails");
            auto o = std::make_shared<VerifyOptions>();
            sub->add_option("--threads", o->threads, "Kernel worker threads per case")
                ->check(CLI::Range(1, 1024))
                ->capture_default_str();
            sub->add_flag("--json", o->json, "Print the results as JSON");
            sub->add_option("--dtype", o->dtype,
                            "dtype of q, k, v, dout and out, dq, dk, dv (lse is fp32): fp32 | "
                            "bf16 | fp16 (bf16 / fp16: kernel and ring strategy only)")
                ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
                ->capture_default_str();
            add_timeout_option(sub, o->timeout_s);
            // Features of every case, the kernel sweep's and the CP cases' alike.
            sub->add_flag("--sink", o->features.sink,
                          "Attention sinks: one random logit per query head (from the case's "
                          "seed) in every softmax denominator; the report adds dsink");
            sub->add_option("--softcap", o->features.softcap,
                            "Logit softcap X > 0: scores become X tanh(s / X)");
            sub->add_flag(
                "--alibi", o->features.alibi,
                "ALiBi: scores minus slope_h |q_pos - k_pos|, slopes 2^(-8 (h + 1) / Hq)");
            sub->add_option(
                "--slices", o->slices_arg,
                "Mask slices, with each case's own mask: SPEC is "
                "q_begin:q_end,k_begin:k_end,type[;...] on global positions [begin, end), type "
                "full | causal | inv_causal | bi_causal (MagiAttention's), e.g. "
                "'0:197,0:65,full;65:197,65:197,causal' (prefix-LM); FILE (read when the "
                "argument names a file) has one slice per line, '#' starts a comment");
            CLI::Option* cp = sub->add_option(
                "--cp", o->cp,
                "CP mode over P ranks (no shape option: sweep causal/not x dropout 0/0.1, every "
                "strategy)");
            cp->check(CLI::Range(1, 1024));
            sub->add_option("--backend", o->backend,
                            "Ring ranks: threads (in-process) | mpi (one per mpirun process)")
                ->check(CLI::IsMember({"threads", "mpi"}))
                ->capture_default_str();
            sub->add_option("--strategy", o->strategy,
                            "CP mode: ring | allgather | ulysses | hybrid:UxR (default: every "
                            "strategy the group and heads allow)");
            sub->add_option("--layout", o->layout,
                            "Ring split: contiguous | zigzag | striped | doc_zigzag (default: "
                            "the first three, doc_zigzag too with --docs; doc_zigzag alone "
                            "with --varlen)")
                ->check(CLI::IsMember(layout_choices()));
            CLI::Option* varlen = sub->add_option(
                "--varlen", o->varlen,
                "Varlen call (flash-attn's cu_seqlens): the document lengths L1,L2,... of the "
                "whole sequence (0 allowed; or mean:N with --seq), every CP strategy on the "
                "document-balanced layout, against the reference, the kernel and each document "
                "alone; without --cp on one rank");
            // Shape options: any of them replaces the default sweep by this one shape.
            RingShape& s = o->shape;
            const std::vector<CLI::Option*> shape_options = {
                sub->add_flag("--causal", s.causal, "Ring: causal mask"),
                sub->add_option("--window-left", s.window_left,
                                "Ring: sliding window, keys at most N before the query (-1: none)")
                    ->check(CLI::Range(int64_t{-1}, int64_t{1} << 40)),
                sub->add_option("--window-right", s.window_right,
                                "Ring: sliding window, keys at most N after the query (-1: none)")
                    ->check(CLI::Range(int64_t{-1}, int64_t{1} << 40)),
                sub->add_option("--dropout", s.dropout_p, "Ring: dropout probability in [0, 0.999]")
                    ->check(CLI::Range(0.0f, 0.999f)),
                sub->add_flag("--docs", s.docs, "Ring: packed documents (block-diagonal mask)"),
                sub->add_option("--seq", s.dims.Sq, "Ring: sequence length S")
                    ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
                    ->capture_default_str(),
                sub->add_option("--batch", s.dims.B, "Ring: batch size B")
                    ->check(CLI::Range(int64_t{1}, int64_t{1024}))
                    ->capture_default_str(),
                sub->add_option("--heads-q", s.dims.Hq, "Ring: query heads")
                    ->check(CLI::Range(int64_t{1}, int64_t{1024}))
                    ->capture_default_str(),
                sub->add_option("--heads-kv", s.dims.Hkv, "Ring: key/value heads (divides heads-q)")
                    ->check(CLI::Range(int64_t{1}, int64_t{1024}))
                    ->capture_default_str(),
                sub->add_option("--dqk", s.dims.Dqk, "Ring: head dim of q and k")
                    ->check(CLI::Range(int64_t{1}, int64_t{1024}))
                    ->capture_default_str(),
                sub->add_option("--dv", s.dims.Dv, "Ring: head dim of v")
                    ->check(CLI::Range(int64_t{1}, int64_t{1024}))
                    ->capture_default_str(),
                add_seed_option(sub, s.seed, "Ring: seed of the inputs and dropout"),
            };
            return [o, cp, varlen, shape_options, sub] {
              for (CLI::Option* opt : shape_options) o->shape_given |= opt->count() > 0;
              o->softcap_given = sub->count("--softcap") > 0;
              o->slices_given = sub->count("--slices") > 0;
              if (varlen->count() > 0) set_varlen(*o, sub->count("--seq") > 0);
              // Ring options without ring mode would be silently ignored: refuse them instead.
              const bool ring = cp->count() > 0 || o->backend == "mpi" || varlen->count() > 0;
              CPATTN_CHECK(ring || (!o->shape_given && sub->count("--layout") == 0 &&
                                    sub->count("--strategy") == 0),
                           ErrorCode::kInvalidArgument,
                           "verify: ring options (--layout, --strategy and the shape options) need "
                           "--cp P, --varlen or --backend mpi");
              if (!o->strategy.empty()) parse_strategy(o->strategy);  // fails before any run
              return run_verify(*o);
            };
          }};
}

}  // namespace cpattn::cli
