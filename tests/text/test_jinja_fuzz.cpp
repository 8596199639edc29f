// Robustness: random and mutated templates (the real chat templates and the feature cases, with
// bytes flipped, Jinja tokens spliced in, ranges cut and duplicated) go through parse and render.
// Every outcome must be a rendered string or an Error with a message — never a crash, hang or
// abort. Run under -DKAPITSA_SANITIZE=ON to also catch memory errors. KAPITSA_FUZZ_SEED and
// KAPITSA_FUZZ_ITERS override the seed and the iteration count.
#include "text/jinja/template.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

namespace kapitsa::text::jinja {
namespace {

using OrderedJson = nlohmann::ordered_json;
const std::string kDir = std::string(KAPITSA_TEST_DATA) + "/text/data/templates/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const char* kTokens[] = {
    "{{", "}}", "{%", "%}", "{#", "#}", "{%-", "-%}", "{{-", "-}}", "{%+", "(", ")", "[", "]", "{", "}",
    "|", ".", ",", ":", "'", "\"", "\\", "~", "+", "-", "*", "**", "/", "//", "%", "==", "!=", "<", ">=",
    " if ", " else ", " elif ", " endif ", " for ", " in ", " endfor ", " set ", " macro ", " endmacro ",
    " call ", " endcall ", " filter ", " endfilter ", " raw ", " endraw ", " recursive ", " loop ",
    " loop(", "loop.cycle(", " not ", " and ", " or ", " is ", " none ", " true ", "namespace(", "ns.x",
    "range(99999)", "range(-5, 5)", "messages", "messages[::-1]", "[0]", "[-1]", "[1:]", "|tojson",
    "|tojson(indent=2)", "|length", "|trim", "|items", "|list", "|join(',')", "|map(attribute='role')",
    "|selectattr('role')", "|sort", "|unique", "|indent(3)", "|int", "|round(2)", "|default('x', true)",
    "|string", "|safe", "|first", "|last", "|wordcount", "|replace('a', 'bb')", "|format(1)",
    ".split()", ".strip('x')", ".startswith('<')", ".format(1, x=2)", ".items()", ".get('k')",
    "raise_exception('boom')", "strftime_now('%Y')", "caller()", "varargs", "kwargs", "0x7fffffffffffffff",
    "9223372036854775807", "-9223372036854775807 - 1", "1e308 * 10", "'a' * 100000", "[1] * 100000",
    "{% break %}", "{% continue %}", "{% generation %}", "{% endgeneration %}", "\r\n", "\n", "\t",
    "\xff", "\xc3", "\xe2\x80\xa8", "\xf0\x9f\x98\x80", "\0",
};

std::string mutate(const std::string& base, const std::vector<std::string>& corpus, std::mt19937_64& rng) {
  std::string s = base;
  int edits = 1 + static_cast<int>(rng() % 3);
  for (int e = 0; e < edits; ++e) {
    size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 6) {
      case 0:  // flip a byte
        if (!s.empty()) s[std::min(pos, s.size() - 1)] = static_cast<char>(rng() & 0xFF);
        break;
      case 1:  // insert a Jinja token
        s.insert(pos, kTokens[rng() % (sizeof(kTokens) / sizeof(kTokens[0]))]);
        break;
      case 2: {  // delete a range
        size_t len = rng() % 64;
        if (pos < s.size()) s.erase(pos, len);
        break;
      }
      case 3: {  // duplicate a range
        if (s.empty()) break;
        size_t from = rng() % s.size();
        size_t len = std::min<size_t>(rng() % 200, s.size() - from);
        s.insert(pos, s.substr(from, len));
        break;
      }
      case 4: {  // splice in a piece of another template
        const std::string& other = corpus[rng() % corpus.size()];
        if (other.empty()) break;
        size_t from = rng() % other.size();
        size_t len = std::min<size_t>(rng() % 300, other.size() - from);
        s.insert(pos, other.substr(from, len));
        break;
      }
      case 5: {  // pure random bytes
        size_t len = rng() % 16;
        std::string junk;
        for (size_t i = 0; i < len; ++i) junk.push_back(static_cast<char>(rng() & 0xFF));
        s.insert(pos, junk);
        break;
      }
    }
  }
  return s;
}

// A template built only from tokens: exercises the parser's error paths densely.
std::string random_template(std::mt19937_64& rng) {
  std::string s;
  int n = 1 + static_cast<int>(rng() % 40);
  for (int i = 0; i < n; ++i) s += kTokens[rng() % (sizeof(kTokens) / sizeof(kTokens[0]))];
  return s;
}

TEST(JinjaFuzz, MutatedTemplatesNeverCrash) {
  uint64_t seed = std::random_device{}();
  if (const char* env = std::getenv("KAPITSA_FUZZ_SEED")) seed = std::strtoull(env, nullptr, 10);
  int iters = 20000;
  if (const char* env = std::getenv("KAPITSA_FUZZ_ITERS")) iters = std::atoi(env);
  std::printf("fuzz seed %llu, %d iterations (KAPITSA_FUZZ_SEED=%llu reproduces)\n",
              static_cast<unsigned long long>(seed), iters, static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);

  std::vector<std::string> corpus;
  for (const char* name : {"qwen3", "qwen3.5", "qwen3-coder", "nemotron3-nano", "nemotron-nano-v2"})
    corpus.push_back(read_file(kDir + name + ".jinja"));
  OrderedJson cases = OrderedJson::parse(read_file(kDir + "jinja_cases.json"));
  for (const auto& c : cases["cases"]) corpus.push_back(c["template"]);
  std::vector<OrderedJson> contexts;
  for (const auto& conv : OrderedJson::parse(read_file(kDir + "conversations.json"))) {
    OrderedJson ctx = {{"messages", conv["messages"]},
                       {"tools", conv.contains("tools") ? conv["tools"] : OrderedJson()},
                       {"add_generation_prompt", conv.value("add_generation_prompt", true)}};
    for (auto& [k, v] : cases["context"].items()) ctx[k] = v;
    contexts.push_back(std::move(ctx));
  }

  Limits limits;
  limits.max_steps = 200'000;
  limits.max_output = 1 << 20;
  limits.max_string = 1 << 20;
  limits.max_range = 100'000;
  int parsed = 0, rendered = 0, errors = 0;
  for (int i = 0; i < iters; ++i) {
    std::string source = (rng() % 10 == 0) ? random_template(rng) : mutate(corpus[rng() % corpus.size()], corpus, rng);
    auto t = Template::parse(source, "fuzz");
    if (!t.ok()) {
      ++errors;
      ASSERT_EQ(t.error().message.rfind("fuzz", 0), 0u) << t.error().message;
      continue;
    }
    ++parsed;
    auto out = t->render(contexts[rng() % contexts.size()], limits);
    if (out.ok()) {
      ++rendered;
      ASSERT_LE(out->size(), limits.max_output);
    } else {
      ++errors;
      ASSERT_EQ(out.error().message.rfind("fuzz", 0), 0u) << out.error().message;
    }
  }
  std::printf("parsed %d, rendered %d, errors %d\n", parsed, rendered, errors);
  EXPECT_EQ(parsed + (errors - (parsed - rendered)), iters);
  EXPECT_GT(rendered, 0);  // the mutations are not all fatal: some reach the interpreter
}

}  // namespace
}  // namespace kapitsa::text::jinja
