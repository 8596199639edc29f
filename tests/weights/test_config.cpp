// Lenient JSON (Infinity / NaN / {"__float__": ...}) and HfConfig's typed access with errors that
// name the file and the dotted field.
#include "base/json.h"
#include "weights/hf_config.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kapitsa::testing {
namespace {

TEST(LenientJson, AcceptsNonFiniteLiteralsOutsideStrings) {
  auto j = parse_json_lenient(R"({"a": [0.0, Infinity, -Infinity, NaN], "s": "Infinity NaN", "b": {"__float__": "Infinity"}})",
                              "test.json");
  ASSERT_TRUE(j.ok()) << j.error().message;
  EXPECT_EQ(*json_number((*j)["a"][0], "a"), 0.0);
  EXPECT_TRUE(std::isinf(*json_number((*j)["a"][1], "a")) && *json_number((*j)["a"][1], "a") > 0);
  EXPECT_TRUE(std::isinf(*json_number((*j)["a"][2], "a")) && *json_number((*j)["a"][2], "a") < 0);
  EXPECT_TRUE(std::isnan(*json_number((*j)["a"][3], "a")));
  EXPECT_EQ((*j)["s"].get<std::string>(), "Infinity NaN");  // strings untouched
  EXPECT_TRUE(std::isinf(*json_number((*j)["b"], "b")));
  EXPECT_FALSE(json_number((*j)["s"], "s").ok());
}

TEST(LenientJson, MalformedJsonNamesTheFile) {
  auto j = parse_json_lenient(R"({"a": [1, 2)", "dir/config.json");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.error().message.find("dir/config.json"), std::string::npos);
}

TEST(HfConfig, TypedFieldsAndErrors) {
  auto json = parse_json_lenient(R"({"model_type": "x", "n": 4, "f": 1e-6, "text_config": {"h": "wide"}, "list": [1, "a"]})",
                                 "config.json");
  ASSERT_TRUE(json.ok());
  const auto c = weights::HfConfig::from_json(*json, "m/config.json");
  EXPECT_EQ(*c.get_int("n"), 4);
  EXPECT_EQ(*c.get_int("absent", 7), 7);
  EXPECT_DOUBLE_EQ(*c.get_float("f"), 1e-6);
  auto missing = c.get_int("hidden_size");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("m/config.json: field 'hidden_size' is required but missing"), std::string::npos)
      << missing.error().message;
  auto text = c.section("text_config");
  ASSERT_TRUE(text.ok());
  auto wrong = text->get_int("h");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("'text_config.h' must be an integer"), std::string::npos) << wrong.error().message;
  EXPECT_FALSE(c.get_int_list("list").ok());
}

}  // namespace
}  // namespace kapitsa::testing
