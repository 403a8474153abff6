// A downstream MPI program (cpattn::mpi): the ring over mpirun processes through the safe API.
#include <cpattn/attention.h>
#include <cpattn/mpi_communicator.h>

#include <cmath>
#include <cstdio>

int main(int argc, char** argv) {
  return cpattn::mpi_main(argc, argv, [](cpattn::MpiCommunicator& comm) {
    const int P = comm.size(), r = comm.rank();
    const int64_t S = 40, H = 2, D = 8;
    const auto seq = cpattn::SequenceSharding::of(cpattn::Layout::kZigzag, S, P, r);
    const int64_t Sr = seq.local_length();
    cpattn::Tensor q({1, Sr, H, D}), dout({1, Sr, H, D});
    for (int64_t i = 0; i < q.numel(); ++i) q.data()[i] = std::sin(static_cast<float>(i + 7 * r));
    for (float& x : dout.span()) x = 1.0f;
    cpattn::AttentionParams params;
    params.causal = true;
    const cpattn::ForwardResult f =
        cpattn::attention_forward(comm, q.view(), q.view(), q.view(), seq, params, {});
    const cpattn::AttentionGradients g = cpattn::attention_backward(
        comm, dout.view(), q.view(), q.view(), q.view(), f, seq, params, {});
    double sum = 0;
    for (float x : g.dq.span()) sum += x;
    comm.allreduce_sum(std::span<double>(&sum, 1));
    if (r == 0) std::printf("consumer_mpi: %d ranks, sum(dq) %.6f: ok\n", P, sum);
    return std::isfinite(sum) ? 0 : 1;
  });
}
