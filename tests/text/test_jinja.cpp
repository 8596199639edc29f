// Jinja engine against Jinja2 itself: data/templates/jinja_cases.json holds small templates that
// exercise one feature each, rendered by Jinja2 3.1 configured like transformers'
// apply_chat_template (make_jinja_cases.py regenerates it). Each must render byte-identical here,
// or fail here where Jinja2 raised. Plus positions in error messages and the sandbox limits.
#include "text/jinja/template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace kapitsa::text::jinja {
namespace {

using OrderedJson = nlohmann::ordered_json;

OrderedJson load_cases() {
  std::ifstream in(std::string(KAPITSA_TEST_DATA) + "/text/data/templates/jinja_cases.json", std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return OrderedJson::parse(ss.str());
}

Expected<std::string> render(std::string_view source, const OrderedJson& context = OrderedJson::object(),
                             const Limits& limits = {}) {
  KAPITSA_TRY(Template t, Template::parse(source, "t"));
  return t.render(context, limits);
}

TEST(Jinja, MatchesJinja2OnEveryCase) {
  OrderedJson data = load_cases();
  int total = 0, passed = 0;
  for (const auto& c : data["cases"]) {
    const std::string source = c["template"];
    SCOPED_TRACE("template: " + source);
    ++total;
    auto out = render(source, data["context"]);
    if (c.contains("rendered")) {
      if (!out.ok()) {
        ADD_FAILURE() << "unexpected error: " << out.error().message;
        continue;
      }
      EXPECT_EQ(*out, c["rendered"].get<std::string>());
      passed += *out == c["rendered"].get<std::string>();
    } else {
      EXPECT_FALSE(out.ok()) << "Jinja2 raised " << c["error"].get<std::string>() << " but we rendered: " << *out;
      passed += !out.ok();
    }
  }
  std::printf("jinja cases matching Jinja2: %d of %d\n", passed, total);
  EXPECT_GT(total, 100);
}

TEST(Jinja, ErrorsCarryLineAndColumn) {
  auto out = render("line one\n{{ 1 +  }}");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("t:2:"), std::string::npos) << out.error().message;

  out = render("a\nb\n   {{ x.y }}");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("t:3:"), std::string::npos) << out.error().message;
  EXPECT_NE(out.error().message.find("'x' is undefined"), std::string::npos) << out.error().message;

  out = render("{% if true %}\n{{ raise_exception('bad input: ' ~ 42) }}{% endif %}");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("bad input: 42"), std::string::npos) << out.error().message;
}

TEST(Jinja, RecursionIsBounded) {
  auto out = render("{% macro r(k) %}{{ r(k + 1) }}{% endmacro %}{{ r(0) }}");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("recursion"), std::string::npos) << out.error().message;
}

TEST(Jinja, WorkAndOutputAreBounded) {
  Limits limits;
  limits.max_steps = 100000;
  auto out = render("{% for i in range(1000) %}{% for j in range(1000) %}x{% endfor %}{% endfor %}", OrderedJson::object(), limits);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("budget"), std::string::npos) << out.error().message;

  limits = Limits{};
  limits.max_output = 1000;
  out = render("{% for i in range(100) %}0123456789abcdef{% endfor %}", OrderedJson::object(), limits);
  ASSERT_FALSE(out.ok());

  out = render("{{ 'x' * 1000000000000 }}");
  ASSERT_FALSE(out.ok());
  out = render("{{ range(10000000000) | length }}");
  ASSERT_FALSE(out.ok());
  limits = Limits{};
  limits.max_string = 1 << 20;
  out = render("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
               OrderedJson::object(), limits);
  ASSERT_FALSE(out.ok());
}

TEST(Jinja, DeepNestingIsAnErrorNotACrash) {
  std::string deep(100000, '(');
  auto out = render("{{ " + deep + " }}");
  ASSERT_FALSE(out.ok());
  std::string chain = "{{ a";
  for (int i = 0; i < 100000; ++i) chain += ".b";
  out = render(chain + " }}");
  ASSERT_FALSE(out.ok());
  std::string sum = "{{ 1";
  for (int i = 0; i < 100000; ++i) sum += "+1";
  out = render(sum + " }}");
  ASSERT_FALSE(out.ok());
  std::string ifs;
  for (int i = 0; i < 10000; ++i) ifs += "{% if true %}";
  out = render(ifs);
  ASSERT_FALSE(out.ok());
  out = render("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}");
  ASSERT_FALSE(out.ok());
  OrderedJson deep_json = OrderedJson::array();
  for (int i = 0; i < 1000; ++i) deep_json = OrderedJson::array({deep_json});
  out = render("{{ x }}", OrderedJson{{"x", deep_json}});
  ASSERT_FALSE(out.ok());
}

TEST(Jinja, NamespaceCyclesAreFreed) {
  // LeakSanitizer (KAPITSA_SANITIZE=ON) fails the run if the self-reference leaks.
  auto out = render("{% set ns = namespace(me=none) %}{% set ns.me = ns %}{% set ns.l = [ns, [ns]] %}{{ ns.me.me.l | length }}");
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(*out, "2");
}

TEST(Jinja, TemplateIsReusable) {
  auto t = Template::parse("{{ a }}-{% for x in b %}{{ x }}{% endfor %}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->render(OrderedJson{{"a", 1}, {"b", {1, 2}}}), "1-12");
  EXPECT_EQ(*t->render(OrderedJson{{"a", "z"}, {"b", OrderedJson::array()}}), "z-");
}

TEST(Jinja, StrftimeNowFormatsTheCurrentDate) {
  auto out = render("{{ strftime_now('%Y') }}");
  ASSERT_TRUE(out.ok()) << out.error().message;
  ASSERT_EQ(out->size(), 4u);
  EXPECT_GE(std::stoi(*out), 2024);
}

TEST(Jinja, GenerationBlockRendersItsBody) {
  auto out = render("{% generation %}A{{ 1 }}{% endgeneration %}B");
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(*out, "A1B");
}

}  // namespace
}  // namespace kapitsa::text::jinja
