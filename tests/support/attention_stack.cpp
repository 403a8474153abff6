// Residual attention stack for lifecycle tests and benchmarks (see attention_stack.h).
#include "support/attention_stack.h"

#include "cpattn/error.h"

namespace cpattn::testing {

void fill_uniform(Tensor& t, uint64_t seed) {
  uint64_t state = seed;
  for (float& x : t.span()) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    x = static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  }
}

namespace {
// a += b elementwise (same shapes, dense).
void add_into(Tensor& a, const Tensor& b) {
  CPATTN_CHECK_EQ(b.numel(), a.numel(), ErrorCode::kShapeMismatch, "add_into numel");
  float* pa = a.data();
  const float* pb = b.data();
  for (int64_t i = 0; i < a.numel(); ++i) pa[i] += pb[i];
}
}  // namespace

StackActivations stack_forward(Communicator& comm, const StackConfig& config, ConstView x,
                               const SequenceSharding& seq, Generator& generator, bool recompute) {
  StackActivations acts;
  acts.first_rng = generator.state();
  Tensor current = dense_copy(x, MemoryLayout::kBSHD, &comm.memory());
  for (int l = 0; l < config.layers; ++l) {
    const ConstView xl = current.view();
    ForwardResult state =
        attention_forward(comm, xl, xl, xl, seq, config.params, generator.next(), config.cp);
    Tensor next = current.clone();
    add_into(next, state.out);
    if (recompute) {
      acts.checkpoints.push_back(make_checkpoint(state));
    } else {
      acts.states.emplace_back(std::move(state));
    }
    acts.inputs.push_back(std::move(current));
    current = std::move(next);
  }
  acts.output = std::move(current);
  return acts;
}

Tensor stack_backward(Communicator& comm, const StackConfig& config, StackActivations& acts,
                      ConstView dy, const SequenceSharding& seq,
                      std::optional<RngState> replay_override) {
  Tensor grad = dense_copy(dy, MemoryLayout::kBSHD, &comm.memory());
  const bool recompute = !acts.checkpoints.empty();
  for (int l = config.layers - 1; l >= 0; --l) {
    const ConstView xl = acts.inputs[static_cast<size_t>(l)].view();
    AttentionGradients g;
    // The state layer l drew (or the override: misuse tests).
    const RngState replay = replay_override.value_or(
        RngState{acts.first_rng.seed, acts.first_rng.offset + static_cast<uint64_t>(l)});
    if (recompute) {
      RecomputeOptions options = config.recompute_options;
      options.cp = config.cp;
      g = recompute_backward(comm, acts.checkpoints[static_cast<size_t>(l)], replay, grad.view(),
                             xl, xl, xl, seq, config.params, options);
    } else {
      auto& state = acts.states[static_cast<size_t>(l)];
      g = attention_backward(comm, grad.view(), xl, xl, xl, *state, seq, config.params, replay,
                             config.cp);
      state.reset();
    }
    // x_{l+1} = x_l + attn(x_l, x_l, x_l): the residual passes grad through; q, k, v all read x_l.
    add_into(grad, g.dq);
    add_into(grad, g.dk);
    add_into(grad, g.dv);
    acts.inputs[static_cast<size_t>(l)] = Tensor();
  }
  return grad;
}

}  // namespace cpattn::testing
