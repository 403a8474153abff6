// Size checks shared by the train/ ops: a span must hold exactly the [rows, cols] matrix an op
// was told about, and the error names the op, the argument and both sizes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cpattn::train::detail {

/// Throws Error(kShapeMismatch) "<op>: <name> <dims> = [rows, cols] needs rows*cols floats, got
/// <got>" unless got == rows * cols. `dims` names the axes, e.g. "[N, in]".
void check_matrix(const char* op, const char* name, const char* dims, size_t got, int64_t rows,
                  int64_t cols);

/// Throws Error(kInvalidArgument) "<op>: <name> must be >= <min>, got <value>".
void check_at_least(const char* op, const char* name, int64_t value, int64_t min);

}  // namespace cpattn::train::detail
