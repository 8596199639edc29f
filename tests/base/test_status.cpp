// Error kinds: error(...) without a kind is invalid_argument, a kind given where the error is made
// survives KAPITSA_TRY and KAPITSA_RETURN_IF_ERROR up the stack (callers branch on it, not on text).
#include "base/status.h"

#include <gtest/gtest.h>

namespace kapitsa {
namespace {

Expected<int> too_long(int n) { return error(ErrorKind::context_too_long, "prompt is {} tokens", n); }

Expected<int> passes_on(int n) {
  KAPITSA_TRY(int v, too_long(n));
  return v + 1;
}

Status passes_status_on() {
  KAPITSA_RETURN_IF_ERROR(Status(error(ErrorKind::unavailable, "loading")));
  return ok_status();
}

TEST(Status, ErrorWithoutAKindIsAnInvalidArgument) {
  Expected<int> e = error("bad flag {}", "--x");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().kind, ErrorKind::invalid_argument);
  EXPECT_EQ(e.error().message, "bad flag --x");
  EXPECT_EQ(Error{"plain"}.kind, ErrorKind::invalid_argument);
}

TEST(Status, KindSurvivesPropagation) {
  Expected<int> e = passes_on(9);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().kind, ErrorKind::context_too_long);
  EXPECT_EQ(e.error().message, "prompt is 9 tokens");
  Status s = passes_status_on();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::unavailable);
}

}  // namespace
}  // namespace kapitsa
