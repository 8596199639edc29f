// GBNF parsing (errors with line:col, validation) and GrammarMatcher accept/reject on hand-written
// grammars: literals, classes (negated, UTF-8 ranges), repetition bounds, recursion, text-until rules.
#include "text/grammar/grammar.h"
#include "text/grammar/matcher.h"

#include <gtest/gtest.h>

namespace kapitsa::text {
namespace {

std::shared_ptr<const Grammar> must(std::string_view src) {
  auto g = parse_gbnf(src);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message) << "\n" << src;
  return g.ok() ? *g : nullptr;
}

// Whether the whole of `text` is in the grammar's language.
bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text) && m.can_end();
}
// Whether `text` is a prefix of some string of the language.
bool prefix(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text);
}

TEST(GrammarGbnf, ErrorsNameLineAndColumn) {
  struct Case {
    const char* src;
    const char* where;
  };
  for (const Case& c : {Case{"root ::= \"a\" foo", "gbnf:1:14"}, Case{"root ::= \"a\"\nx ::= [a-", "gbnf:2:7"},
                        Case{"root ::= (\"a\"", "gbnf:1:10"}, Case{"root ::= \"a\n", "gbnf:1:10"},
                        Case{"root ::= \"a\" \\q", "gbnf:1:14"}, Case{"root ::= \"\\xZ1\"", "gbnf:1:11"},
                        Case{"root ::= [z-a]", "gbnf:1:10"}, Case{"root ::= \"a\"{3,1}", "gbnf:1:13"},
                        Case{"a ::= \"x\"", "gbnf:1:1"}, Case{"root ::= \"a\"\nroot ::= \"b\"", "gbnf:2:1"},
                        Case{"root ::= \"a\" @", "gbnf:1:14"}}) {
    auto g = parse_gbnf(c.src);
    ASSERT_FALSE(g.ok()) << c.src;
    EXPECT_NE(g.error().message.find(c.where), std::string::npos) << c.src << " → " << g.error().message;
  }
}

TEST(GrammarGbnf, RejectsLeftRecursionAndUnproductiveRules) {
  auto a = parse_gbnf("root ::= root \"a\" | \"b\"");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message.find("left-recursive"), std::string::npos) << a.error().message;
  auto b = parse_gbnf("root ::= (\"a\"?)*");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("left-recursive"), std::string::npos) << b.error().message;
  auto c = parse_gbnf("root ::= \"a\" root");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("never finish"), std::string::npos) << c.error().message;
}

TEST(GrammarGbnf, LiteralsAlternativesAndEscapes) {
  auto g = must("# a comment\nroot ::= \"yes\" | \"no\" # trailing\n  | \"tab\\there\" | \"\\x41\\u00e9\\\"\"");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "yes"));
  EXPECT_TRUE(matches(g, "no"));
  EXPECT_TRUE(matches(g, "tab\there"));
  EXPECT_TRUE(matches(g, "A\xc3\xa9\""));
  EXPECT_FALSE(matches(g, "ye"));
  EXPECT_TRUE(prefix(g, "ye"));
  EXPECT_FALSE(prefix(g, "yess"));
  EXPECT_FALSE(prefix(g, "x"));
}

TEST(GrammarGbnf, ClassesAndUtf8) {
  auto g = must("root ::= [a-c0-9]+ [^a-z\\n]");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "ab9Z"));
  EXPECT_TRUE(matches(g, "a\xe2\x82\xac"));        // €
  EXPECT_TRUE(matches(g, "a\xf0\x9f\x98\x80"));    // 😀
  EXPECT_FALSE(matches(g, "ab9z"));
  EXPECT_FALSE(matches(g, "a\n"));
  EXPECT_FALSE(prefix(g, "a\xed\xa0\x80"));        // a surrogate is not a character
  EXPECT_FALSE(prefix(g, "a\xc0\xaf"));            // overlong
  EXPECT_FALSE(prefix(g, "a\x80"));                // stray continuation byte
  auto u = must("root ::= [α-ω]{2} \".\"");
  ASSERT_TRUE(u);
  EXPECT_TRUE(matches(u, "αβ."));
  EXPECT_FALSE(matches(u, "αA."));
  EXPECT_FALSE(matches(u, "α."));
  auto any = must("root ::= . .");
  EXPECT_TRUE(matches(any, "\n\xe4\xb8\xad"));
  EXPECT_FALSE(matches(any, "abc"));
}

TEST(GrammarGbnf, RepetitionBounds) {
  auto g = must("root ::= \"x\"{2,4} \"-\" (\"ab\"){3} \"-\" [0-9]{2,} \"-\" \"q\"?");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "xx-ababab-12-"));
  EXPECT_TRUE(matches(g, "xxxx-ababab-123456-q"));
  EXPECT_FALSE(matches(g, "x-ababab-12-"));
  EXPECT_FALSE(prefix(g, "xxxxx"));
  EXPECT_FALSE(matches(g, "xx-abab-12-"));
  EXPECT_FALSE(matches(g, "xx-ababab-1-"));
}

TEST(GrammarGbnf, RecursionMultiLineRulesAndState) {
  auto g = must("root ::= list\nlist ::= \"[\" (\n  item (\",\" item)*\n)? \"]\"\nitem ::= list | [0-9]");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "[]"));
  EXPECT_TRUE(matches(g, "[1,[2,[]],3]"));
  EXPECT_FALSE(matches(g, "[1,]"));
  EXPECT_FALSE(matches(g, "[[1]"));
  GrammarMatcher m(g);
  EXPECT_FALSE(m.can_end());
  EXPECT_TRUE(m.accept_bytes("[1,[2]"));
  EXPECT_FALSE(m.accept_bytes("]]"));  // rejected as a whole: the state is unchanged
  EXPECT_TRUE(m.accept_bytes("]"));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.is_complete());
  m.reset();
  EXPECT_FALSE(m.can_end());
  EXPECT_TRUE(m.accept_bytes("["));
}

TEST(GrammarGbnf, NullableAlternativesSideBySideStayCheap) {
  // 40 groups of two nullable alternatives: 2^40 paths to the final "x" if expansion repeated work.
  std::string src = "root ::=";
  for (int i = 0; i < 40; ++i) src += " (\"a\"? | \"b\"?)";
  auto g = must(src + " \"x\"");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "x"));
  EXPECT_TRUE(matches(g, "abbax"));
  EXPECT_FALSE(matches(g, std::string(41, 'a') + "x"));
}

TEST(GrammarGbnf, CanEndVersusComplete) {
  auto g = must("root ::= [0-9]+");
  GrammarMatcher m(g);
  EXPECT_TRUE(m.accept_bytes("12"));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.is_complete());
}

TEST(GrammarGbnf, LongOutputsCompactTheTablesAndKeepTheirState) {
  // Every position of [a-z]{0,6000} is its own DFA state: past the table limit the matcher rebuilds
  // its tables from the current state, which must not change what is accepted.
  auto g = must("root ::= [a-z]{0,6000} \"!\"");
  ASSERT_TRUE(g);
  GrammarMatcher m(g);
  for (int i = 0; i < 6000; ++i) ASSERT_TRUE(m.accept_bytes(std::string(1, static_cast<char>('a' + i % 26)))) << i;
  EXPECT_FALSE(m.accept_bytes("a"));  // the 6001st letter
  EXPECT_FALSE(m.can_end());
  EXPECT_TRUE(m.accept_bytes("!"));
  EXPECT_TRUE(m.is_complete());
}

TEST(GrammarGbnf, TextUntilExcludesLiterals) {
  std::string src = "root ::= \"<\" body \"!\"\n" + gbnf_text_until("body", "</p>", {"<p=", "</f>"});
  auto g = must(src);
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "<</p>!"));
  EXPECT_TRUE(matches(g, "<a < /p </ </p </P> \xc3\xa9 <p </f </p>!"));
  EXPECT_TRUE(matches(g, "<<</</p>!"));
  EXPECT_FALSE(prefix(g, "<ab</p>x"));  // the first </p> ends the text
  EXPECT_FALSE(prefix(g, "<a<p="));     // forbidden inside
  EXPECT_FALSE(prefix(g, "<a</f>"));
  EXPECT_FALSE(prefix(g, "<\xff"));     // not UTF-8
  GrammarStart start;
  start.in_reasoning = true;
  std::string r = "root ::= think \"{}\"\n";
  gbnf_reasoning_prefix("think", start, r);
  auto t = must(r);
  EXPECT_TRUE(matches(t, "let me think </thin </think>\n\n{}"));
  EXPECT_FALSE(prefix(t, "x</think> x"));
  start = {};
  start.may_open_reasoning = true;
  r = "root ::= think \"{}\"\n";
  gbnf_reasoning_prefix("think", start, r);
  auto o = must(r);
  EXPECT_TRUE(matches(o, "{}"));
  EXPECT_TRUE(matches(o, "<think>\nhm</think>\n{}"));
  EXPECT_FALSE(prefix(o, "hm"));
}

TEST(GrammarGbnf, DumpNamesRules) {
  auto g = must("root ::= greet \" \" [a-z]\ngreet ::= \"hi\" | \"\"");
  ASSERT_TRUE(g);
  const std::string d = g->to_string();
  EXPECT_NE(d.find("root ::= greet [\\x20] [a-z]"), std::string::npos) << d;
  EXPECT_NE(d.find("greet ::= [h] [i] | \"\""), std::string::npos) << d;
}

}  // namespace
}  // namespace kapitsa::text
