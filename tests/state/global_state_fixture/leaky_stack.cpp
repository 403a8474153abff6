// A fixture for check_no_global_state.sh: the global per-step stack of ring attention in the wild,
// which the check must find (never compiled).
#include <vector>

struct StepState {
  float lse;
};
static std::vector<StepState> saved_steps;  // forward pushes, backward pops: wrong under recompute
void forward_step(float lse) { saved_steps.push_back({lse}); }
