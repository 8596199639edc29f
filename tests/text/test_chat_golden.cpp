// Golden chat-template renderings: every template × conversation in data/templates/golden.json
// (rendered by transformers' own Jinja environment) must render byte-identical here, and every
// pair that raised an error there must be an error here.
#include "text/chat/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace kapitsa::text {
namespace {

const std::string kDir = std::string(KAPITSA_TEST_DATA) + "/text/data/templates/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

OrderedJson read_json(const std::string& path) { return OrderedJson::parse(read_file(path)); }

TEST(ChatGolden, EveryTemplateAndConversation) {
  OrderedJson conversations = read_json(kDir + "conversations.json");
  OrderedJson golden = read_json(kDir + "golden.json");
  std::map<std::string, OrderedJson> by_name;
  for (const auto& c : conversations) by_name[c["name"].get<std::string>()] = c;

  int total = 0, passed = 0;
  for (auto it = golden["templates"].begin(); it != golden["templates"].end(); ++it) {
    const std::string name = it.key();
    auto tmpl = ChatTemplate::from_file(kDir + name + ".jinja");
    ASSERT_TRUE(tmpl.ok()) << tmpl.error().message;
    for (const auto& expected : it.value()) {
      const std::string conv = expected["conversation"];
      SCOPED_TRACE(name + " × " + conv);
      ++total;
      ASSERT_TRUE(by_name.count(conv)) << "unknown conversation " << conv;
      auto request = chat_request_from_json(by_name[conv], conv);
      ASSERT_TRUE(request.ok()) << request.error().message;
      auto rendered = tmpl->render(*request);
      if (expected.contains("rendered")) {
        if (!rendered.ok()) {
          ADD_FAILURE() << "error: " << rendered.error().message;
          continue;
        }
        EXPECT_EQ(*rendered, expected["rendered"].get<std::string>());
        passed += *rendered == expected["rendered"].get<std::string>();
      } else {
        EXPECT_FALSE(rendered.ok()) << "expected an error like: " << expected["error"].get<std::string>();
        if (!rendered.ok()) {
          ++passed;
          std::printf("  %s × %s: error as expected: %s\n", name.c_str(), conv.c_str(), rendered.error().message.c_str());
        }
      }
    }
  }
  std::printf("golden pairs passed: %d of %d\n", passed, total);
  EXPECT_EQ(total, 60);
}

}  // namespace
}  // namespace kapitsa::text
