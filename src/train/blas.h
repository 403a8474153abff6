// OpenBLAS thread control for the training job: BLAS runs single-threaded inside rank threads.
#pragma once

namespace cpattn::train {

/// Sets OpenBLAS's (process-global) thread count. The training job runs one thread per rank, so
/// it calls set_blas_threads(1) before starting them: nested BLAS threads would oversubscribe the
/// cores and make timings meaningless. Throws Error(kInvalidArgument) when threads < 1.
void set_blas_threads(int threads);
/// OpenBLAS's current thread count.
int blas_threads();

}  // namespace cpattn::train
