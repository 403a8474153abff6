// The ring schedule: a pure function (rank, world, step) -> what to compute and whom to talk to.
#include "cpattn/detail/cp.h"
#include "cpattn/error.h"

namespace cpattn::detail {

namespace {
int mod(int a, int p) { return ((a % p) + p) % p; }
}  // namespace

RingStep ring_step(int rank, int world, int step) {
  CPATTN_CHECK(world >= 1 && rank >= 0 && rank < world && step >= 0 && step < world,
               ErrorCode::kInvalidArgument,
               "ring_step: expected 0 <= rank, step < world, got rank ", rank, ", step ", step,
               ", world ", world);
  RingStep s;
  s.kv_block = mod(rank - step, world);
  // The block computed at the last step belongs to rank + 1, so it is not relayed further.
  if (step + 1 < world) {
    s.kv_send_to = mod(rank + 1, world);
    s.kv_recv_from = mod(rank - 1, world);
    s.next_kv_block = mod(rank - step - 1, world);
  }
  if (world > 1) {
    s.grad_recv_from = step > 0 ? mod(rank - 1, world) : -1;
    s.grad_send_to = mod(rank + 1, world);
    if (step + 1 == world) s.home_grad_recv_from = mod(rank - 1, world);
  }
  return s;
}

}  // namespace cpattn::detail
