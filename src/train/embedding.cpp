// Embedding gather / scatter-add.
#include "train/embedding.h"

#include <algorithm>

#include "cpattn/error.h"
#include "train/check.h"

namespace cpattn::train {

namespace {
void check_args(const char* op, int64_t vocab, int64_t d, std::span<const int32_t> tokens,
                size_t table_size, size_t rows_size, const char* rows_name) {
  detail::check_at_least(op, "vocab", vocab, 1);
  detail::check_at_least(op, "d", d, 1);
  const auto n = static_cast<int64_t>(tokens.size());
  detail::check_matrix(op, "table", "[vocab, d]", table_size, vocab, d);
  detail::check_matrix(op, rows_name, "[N, d]", rows_size, n, d);
  for (int64_t r = 0; r < n; ++r) {
    const int32_t t = tokens[static_cast<size_t>(r)];
    CPATTN_CHECK(t >= 0 && t < vocab, ErrorCode::kInvalidArgument, op, ": token ", t, " at row ", r,
                 " is outside [0, ", vocab, ")");
  }
}
}  // namespace

void embedding_forward(int64_t vocab, int64_t d, std::span<const int32_t> tokens,
                       std::span<const float> table, std::span<float> out) {
  check_args("embedding_forward", vocab, d, tokens, table.size(), out.size(), "out");
  for (size_t r = 0; r < tokens.size(); ++r) {
    const float* src = table.data() + static_cast<int64_t>(tokens[r]) * d;
    std::copy(src, src + d, out.data() + static_cast<int64_t>(r) * d);
  }
}

void embedding_backward(int64_t vocab, int64_t d, std::span<const int32_t> tokens,
                        std::span<const float> dout, std::span<float> dtable) {
  check_args("embedding_backward", vocab, d, tokens, dtable.size(), dout.size(), "dout");
  for (size_t r = 0; r < tokens.size(); ++r) {
    float* dst = dtable.data() + static_cast<int64_t>(tokens[r]) * d;
    const float* src = dout.data() + static_cast<int64_t>(r) * d;
    for (int64_t i = 0; i < d; ++i) dst[i] += src[i];
  }
}

}  // namespace cpattn::train
