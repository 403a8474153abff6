// OpenBLAS thread control (blas.h): the one place that calls OpenBLAS's own functions.
#include "train/blas.h"

#include <cblas.h>

#include <mutex>

#include "cpattn/error.h"

namespace cpattn::train {

void set_blas_threads(int threads) {
  CPATTN_CHECK(threads >= 1, ErrorCode::kInvalidArgument, "BLAS threads must be >= 1, got ",
               threads);
  openblas_set_num_threads(threads);
}

int blas_threads() { return openblas_get_num_threads(); }

void use_single_threaded_blas_once() {
  static std::once_flag once;  // process-wide configuration of BLAS, not state of any call
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace cpattn::train
