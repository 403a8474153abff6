// The strategies' all-to-all with per-rank sizes (exchange.h).
#include "cp/exchange.h"

#include <algorithm>
#include <vector>

#include "cpattn/error.h"

namespace cpattn::detail {

void exchange(CpChannel& channel, int rank, int world, TagStream stream, int phase,
              std::span<const std::span<const float>> send, std::span<const std::span<float>> recv,
              const char* what) {
  CPATTN_CHECK(static_cast<int>(send.size()) == world && static_cast<int>(recv.size()) == world,
               ErrorCode::kInternal, "exchange: blocks for ", world, " ranks expected");
  const auto me = static_cast<size_t>(rank);
  CPATTN_CHECK(send[me].size() == recv[me].size(), ErrorCode::kInternal,
               "exchange: own block sizes differ");
  const int tag = stream_tag(stream, phase);
  std::vector<Request> recvs(static_cast<size_t>(world)), sends(static_cast<size_t>(world));
  for (int k = 1; k < world; ++k) {
    const auto j = static_cast<size_t>((rank + k) % world);
    recvs[j] = channel.recv(recv[j], static_cast<int>(j), tag);
  }
  for (int k = 1; k < world; ++k) {
    const auto j = static_cast<size_t>((rank + world - k) % world);
    sends[j] = channel.send(send[j], static_cast<int>(j), tag);
  }
  std::copy(send[me].begin(), send[me].end(), recv[me].begin());
  for (int k = 1; k < world; ++k) {
    const auto j = static_cast<size_t>((rank + k) % world);
    channel.wait_recv(recvs[j], static_cast<int64_t>(recv[j].size()), what);
  }
  for (Request& r : sends) channel.wait_if_pending(r);
}

}  // namespace cpattn::detail
