// OpenBLAS thread control for the training job: BLAS runs single-threaded inside rank threads.
#pragma once

namespace cpattn::train {

/// Sets OpenBLAS's (process-global) thread count. The training job runs one thread per rank, so
/// it calls set_blas_threads(1) before starting them: nested BLAS threads would oversubscribe the
/// cores and make timings meaningless. Throws Error(kInvalidArgument) when threads < 1.
void set_blas_threads(int threads);
/// OpenBLAS's current thread count.
int blas_threads();

/// Makes OpenBLAS single-threaded once per process, before the training job's first BLAS call
/// (linear_forward/linear_backward call it): the job's parallelism is its ranks, and BLAS worker
/// threads started inside rank threads would oversubscribe the cores (and, under
/// ThreadSanitizer, report OpenBLAS's own unsynchronised thread pool). A later set_blas_threads
/// still takes effect.
void use_single_threaded_blas_once();

}  // namespace cpattn::train
