// Test harness of the ring: the library's verification helper (cp/ring_case.h: shard a whole
// reference::Problem over P ranks, run the ring, gather whole-sequence Outputs) under the names
// the cp tests use.
#pragma once

#include "cp/ring_case.h"
#include "cpattn/layout.h"
#include "cpattn/ring.h"
#include "cpattn/thread_communicator.h"
#include "kernel/reference.h"

namespace cpattn::testing {

using reference::ProblemTensors;
using reference::RingRun;
using reference::run_ring;
using reference::run_ring_gathered;
using reference::run_ring_rank;
using reference::zero_outputs;

}  // namespace cpattn::testing
