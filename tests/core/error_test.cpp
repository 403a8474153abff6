// detail::quoted (cpattn/error.h): how errors quote outside input, one line of bounded length.
#include "cpattn/error.h"

#include <gtest/gtest.h>

#include <string>

#include "cpattn/layout.h"
#include "cpattn/strategy.h"

namespace cpattn {
namespace {

TEST(Quoted, EscapesControlBytesAndCutsLongText) {
  EXPECT_EQ(detail::quoted("zigzag"), "'zigzag'");
  EXPECT_EQ(detail::quoted(""), "''");
  EXPECT_EQ(detail::quoted("a\nb\tc\\d"), "'a\\nb\\tc\\\\d'");
  EXPECT_EQ(detail::quoted(std::string("\x01\x7f\0z", 4)), "'\\x01\\x7f\\x00z'");
  EXPECT_EQ(detail::quoted("h\xc3\xa9"), "'h\xc3\xa9'");  // UTF-8 kept as it is
  const std::string long_text(100, 'x');
  EXPECT_EQ(detail::quoted(long_text), "'" + std::string(64, 'x') + "...'");
}

// A flag's value with a newline (found by fuzz_specs) gives a one-line message.
TEST(Quoted, ParsersRefuseWithOneLine) {
  for (const auto& parse : {+[](std::string_view s) { parse_strategy(s); },
                            +[](std::string_view s) { parse_layout(s); }}) {
    try {
      parse("\nx");
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'\\nx'"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace cpattn
