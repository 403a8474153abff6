// OpenBLAS thread control (blas.h): the one place that calls OpenBLAS's own functions.
#include "train/blas.h"

#include <cblas.h>

#include "cpattn/error.h"

namespace cpattn::train {

void set_blas_threads(int threads) {
  CPATTN_CHECK(threads >= 1, ErrorCode::kInvalidArgument, "BLAS threads must be >= 1, got ",
               threads);
  openblas_set_num_threads(threads);
}

int blas_threads() { return openblas_get_num_threads(); }

}  // namespace cpattn::train
