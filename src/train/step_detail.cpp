// Step options, group size, training part of the text and replica comparison (step_detail.h).
#include "train/step_detail.h"

#include <string>
#include <vector>

#include "cpattn/digest.h"
#include "cpattn/error.h"

namespace cpattn::train {

StepOptions step_options(const TrainConfig& config, int rank, bool recompute) {
  StepOptions o;
  o.seq = SequenceSharding::of(config.layout, config.seq_len, config.cp, rank);
  o.dropout = config.dropout;
  o.recompute = recompute;
  o.activations = config.dtype;
  o.cp.num_threads = config.threads;
  o.cp.strategy = config.strategy;
  return o;
}

void check_group_size(const Communicator& comm, const TrainConfig& config) {
  CPATTN_CHECK(comm.size() == config.cp, ErrorCode::kInvalidArgument, "the CP group has ",
               comm.size(), " ranks but the run is configured for --cp ", config.cp);
}

std::span<const uint8_t> training_part(const TrainConfig& config, std::span<const uint8_t> text) {
  const TextSplit split = split_text(config, static_cast<int64_t>(text.size()));
  return text.first(static_cast<size_t>(split.train_bytes));
}

void check_replicas(Communicator& comm, uint64_t digest) {
  const auto p = static_cast<size_t>(comm.size()), r = static_cast<size_t>(comm.rank());
  std::vector<double> halves(2 * p, 0.0);
  halves[2 * r] = static_cast<double>(digest >> 32);
  halves[2 * r + 1] = static_cast<double>(digest & 0xffffffffu);
  comm.allreduce_sum(std::span<double>(halves));
  const auto of = [&](size_t rank) {
    return (static_cast<uint64_t>(halves[2 * rank]) << 32) |
           static_cast<uint64_t>(halves[2 * rank + 1]);
  };
  std::string differing;
  for (size_t k = 1; k < p; ++k) {
    if (of(k) != of(0))
      differing += cpattn::detail::str_cat(" rank ", k, " ", digest_hex(of(k)), ";");
  }
  CPATTN_CHECK(differing.empty(), ErrorCode::kInternal, "replicas diverged: rank 0 weight digest ",
               digest_hex(of(0)), " but", differing);
}

}  // namespace cpattn::train
