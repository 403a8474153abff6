// Out-of-line throw paths of the train/ size checks (kept out of the ops' inner code).
#include "train/check.h"

#include "cpattn/error.h"

namespace cpattn::train::detail {

void check_matrix(const char* op, const char* name, const char* dims, size_t got, int64_t rows,
                  int64_t cols) {
  const int64_t want = rows * cols;
  CPATTN_CHECK(static_cast<int64_t>(got) == want, ErrorCode::kShapeMismatch, op, ": ", name, " ",
               dims, " = [", rows, ", ", cols, "] needs ", want, " floats, got ", got);
}

void check_at_least(const char* op, const char* name, int64_t value, int64_t min) {
  CPATTN_CHECK(value >= min, ErrorCode::kInvalidArgument, op, ": ", name, " must be >= ", min,
               ", got ", value);
}

}  // namespace cpattn::train::detail
