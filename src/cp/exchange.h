// The variable-size all-to-all of the allgather, Ulysses and hybrid strategies: every rank sends
// one block of its choice to every rank and receives one from each, with sizes both sides know.
#pragma once

#include <span>

#include "cp/ring_detail.h"

namespace cpattn::detail {

/// send[j] goes to rank j and recv[j] comes from rank j (exactly recv[j].size() floats), for
/// every rank of the channel's group (`world` ranks, this one is `rank`); the own block is
/// copied (send[rank] and recv[rank] must have one size). Send blocks may share memory (the same
/// block to every rank). Every receive is posted before any send, all on one tag
/// (stream_tag(stream, phase)); received sizes are checked exactly (Error(kCommunication) naming
/// `what`). Messages per rank: world - 1 sends and receives; every wait has the deadline.
void exchange(CpChannel& channel, int rank, int world, TagStream stream, int phase,
              std::span<const std::span<const float>> send, std::span<const std::span<float>> recv,
              const char* what);

}  // namespace cpattn::detail
