// --kv-dtype (the flag run/chat/serve/logits share): the three names parse to their DTypes through CLI11,
// any other value is refused naming the flag and the allowed names; the memory line `kapitsa serve`
// prints at start, on hand-computed numbers.
#include "cli/kv_dtype_option.h"

#include <gtest/gtest.h>

namespace kapitsa::testing {
namespace {
using namespace cli;

// Parses `args` (after the program name) into a fresh app with --kv-dtype defaulting to `value`.
std::string parse(std::vector<std::string> args, std::string value, std::string* error = nullptr) {
  CLI::App app("test");
  add_kv_dtype_option(&app, value);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them back to front
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    if (error) *error = e.what();
    return "";
  }
  return value;
}

TEST(KvDtypeOption, ParsesTheThreeNamesAndKeepsTheDefault) {
  EXPECT_EQ(parse({}, "bf16"), "bf16");
  EXPECT_EQ(parse({}, "f32"), "f32");
  EXPECT_EQ(parse({"--kv-dtype", "f16"}, "bf16"), "f16");
  EXPECT_EQ(parse({"--kv-dtype=f32"}, "bf16"), "f32");
  EXPECT_EQ(kv_dtype_from_name("f32"), DType::f32);
  EXPECT_EQ(kv_dtype_from_name("bf16"), DType::bf16);
  EXPECT_EQ(kv_dtype_from_name("f16"), DType::f16);
  for (DType d : {DType::f32, DType::bf16, DType::f16}) EXPECT_EQ(kv_dtype_from_name(kv_dtype_name(d)), d);
}

TEST(KvDtypeOption, OtherValuesAreRefusedByName) {
  for (const std::string bad : {"fp8", "BF16x", "int8"}) {
    std::string error;
    EXPECT_EQ(parse({"--kv-dtype", bad}, "bf16", &error), "") << bad;
    EXPECT_NE(error.find("--kv-dtype"), std::string::npos) << error;
    EXPECT_NE(error.find("bf16"), std::string::npos) << error;
  }
}

TEST(KvDtypeOption, ServeMemoryLine) {
  runtime::EngineCounters c;
  c.kv_bytes_per_token = 8 * 1024;                  // 8 KiB
  c.state_bytes_per_sequence = 3 * 512 * 1024;      // 1.5 MiB
  runtime::EngineOptions o;
  o.kv_dtype = DType::bf16;
  o.context_tokens = 32768;                         // × 8 KiB = 256 MiB
  EXPECT_EQ(memory_summary(c, o),
            "KV cache bf16: 8.0 KiB per token, 256.0 MiB per sequence at 32768 tokens; recurrent state 1.5 MiB per sequence");
  c.kv_bytes_per_token = 0;  // a model without attention layers
  c.state_bytes_per_sequence = 100;
  o.kv_dtype = DType::f32;
  o.context_tokens = 16;
  EXPECT_EQ(memory_summary(c, o), "KV cache f32: 0 B per token, 0 B per sequence at 16 tokens; recurrent state 100 B per sequence");
}

}  // namespace
}  // namespace kapitsa::testing
