// server::parse_json (simdjson converted into ordered_json) against nlohmann's own parse, the parser it
// replaced for request bodies: the same value (types, key order, duplicate keys) and the same verdict on
// what is not JSON, for the recorded agents' bodies, chosen edge cases, fresh random documents and
// random corruptions of them.
#include "server/json_body.h"
#include "agent_session.h"
#include "server_fixture.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

namespace kapitsa::server::testing {
namespace {

// Same type at every node (dump and == do not tell a signed 5 from an unsigned one); -0 aside (json_body.h).
bool same_types(const OJson& a, const OJson& b) {
  if (a.type() != b.type()) return b.is_number_integer() && b == 0 && a.is_number_unsigned() && a == 0;
  if (a.is_array())
    for (size_t i = 0; i < a.size(); ++i)
      if (!same_types(a[i], b[i])) return false;
  if (a.is_object())
    for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib)
      if (!same_types(*ia, *ib)) return false;
  return true;
}

// Same verdict; where both accept, the same value printed the same way (dump shows the key order, and
// the number types: 1 vs 1.0; -0 vs 0).
void expect_same(const std::string& text) {
  const OJson reference = OJson::parse(text, nullptr, /*allow_exceptions=*/false);
  const std::optional<OJson> ours = parse_json(text);
  ASSERT_EQ(ours.has_value(), !reference.is_discarded()) << "input: " << text.substr(0, 200);
  if (!ours) return;
  EXPECT_EQ(*ours, reference) << text.substr(0, 200);
  EXPECT_TRUE(same_types(*ours, reference)) << text.substr(0, 200);
  EXPECT_EQ(ours->dump(), reference.dump()) << text.substr(0, 200);
}

TEST(JsonBody, AgentsRecordedBodiesParseAsNlohmann) {
  int bodies = 0;
  for (const char* agent : {"pi", "codex", "opencode", "claude"})
    for (const replay::Recorded& r : replay::load_session(data_path(std::string("fixtures/agents/") + agent + ".jsonl"))) {
      expect_same(r.body.dump());
      expect_same(r.body.dump(2));
      ++bodies;
    }
  EXPECT_GT(bodies, 10);
}

TEST(JsonBody, EdgeCasesAsNlohmann) {
  for (const char* text : {
           "{}", "[]", "0", "-0", "1", "-1", "1.0", "-0.0", "1e2", "1E-2", "0.1", "123456789012345678",
           "9223372036854775807", "9223372036854775808", "18446744073709551615", "18446744073709551616",
           "-9223372036854775808", "-9223372036854775809", "1e308", "1e309", "-1e400", "4.9e-324", "1e-400",
           "true", "false", "null", "\"\"", "\"a\\u00e9\\ud83d\\ude00\\n\\t\\\"\\\\\\/\"", "\"\\ud800\"",
           "\"\\udc00\\ud800\"", "\"\xc3\xa9\"", "\"\xff\"", "\"\xc3\"", "\"\xed\xa0\x80\"", "\"a\x01\"",
           "{\"a\":1,\"b\":2,\"a\":3}", "{\"z\":1,\"a\":[1,{\"y\":null}]}", " \n\t{ \"a\" : [ ] } \r\n",
           "", " ", "{", "}", "[1,]", "{\"a\":1,}", "01", "1.", ".1", "+1", "-", "NaN", "Infinity", "tru",
           "nul", "\"abc", "{\"a\" 1}", "[1 2]", "{} {}", "[] x", "{\"a\":1}\x00", "'a'", "[\"\\x\"]",
           "\"\\u12\"", "\xef\xbb\xbf{}"}) {
    SCOPED_TRACE(text);
    expect_same(text);
  }
  std::string deep(2000, '[');  // deeper than simdjson's limit: nlohmann's verdict
  expect_same(deep + std::string(2000, ']'));
  expect_same(deep);
}

// A random document: nested objects and arrays of every scalar type, keys that repeat.
OJson random_value(std::mt19937& rng, int depth) {
  std::uniform_int_distribution<int> kind(0, depth > 4 ? 5 : 7);
  switch (kind(rng)) {
    case 0: return nullptr;
    case 1: return rng() % 2 == 0;
    case 2: return static_cast<int64_t>(rng()) - (1ll << 31) + static_cast<int64_t>(rng() % 3 == 0 ? rng() : 0) * (1ll << 30);
    case 3: return std::ldexp(static_cast<double>(rng()) / rng.max() - 0.5, static_cast<int>(rng() % 200) - 100);
    case 4: {
      std::string s;
      for (int n = rng() % 12; n > 0; --n) {
        static const char* pieces[] = {"a", "Z", " ", "\n", "\"", "\\", "\x01", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "{", "]"};
        s += pieces[rng() % 12];
      }
      return s;
    }
    case 5: return std::to_string(rng() % 1000);
    case 6: {
      OJson a = OJson::array();
      for (int n = rng() % 5; n > 0; --n) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      OJson o = OJson::object();
      for (int n = rng() % 5; n > 0; --n) o["k" + std::to_string(rng() % 6)] = random_value(rng, depth + 1);
      return o;
    }
  }
}

TEST(JsonBody, RandomDocumentsAndCorruptionsAsNlohmann) {
  const uint64_t seed = kapitsa::testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int i = 0; i < 2000; ++i) {
    const std::string text = random_value(rng, 0).dump(rng() % 2 ? -1 : 1);
    expect_same(text);
    std::string corrupt = text;  // one byte changed, removed or cut off: mostly not JSON any more
    const size_t at = rng() % corrupt.size();
    switch (rng() % 3) {
      case 0: corrupt[at] = "{}[]\",:0-.e\\ \xff"[rng() % 14]; break;
      case 1: corrupt.erase(at, 1); break;
      default: corrupt.resize(at); break;
    }
    expect_same(corrupt);
    if (::testing::Test::HasFailure()) break;
  }
}

}  // namespace
}  // namespace kapitsa::server::testing
