// GGUF reading: a file built byte by byte here (every metadata value type, tensors of several types and
// ranks) reads back as written; every way a header can be broken (bad magic or version, truncation at
// any byte, a tensor offset past the end or not aligned, a bad alignment, an unknown tensor type, rows
// that are not whole blocks, counts and string lengths the file cannot hold, dims that overflow,
// duplicate names, overlapping tensors) gives an error naming the file and the tensor or key; split
// files open as one. Files made by llama.cpp's converter: tests/models/test_gguf_model.cpp.
#include "test_util.h"
#include "weights/gguf.h"

#include <fmt/format.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace kapitsa::testing {
namespace {

namespace fs = std::filesystem;
using weights::GgufFile;
using weights::GgufValueType;

// Builds GGUF bytes: metadata first, then tensor infos, then the data section (aligned).
struct Builder {
  std::string kv;
  uint64_t n_kv = 0;
  std::string infos;
  uint64_t n_tensors = 0;
  std::string data;
  uint32_t version = 3;
  uint64_t alignment = 32;

  template <class T>
  static void put(std::string& s, T v) {
    s.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  static void put_str(std::string& s, const std::string& v) {
    put<uint64_t>(s, v.size());
    s += v;
  }
  template <class T>
  void scalar(const std::string& key, GgufValueType type, T v) {
    put_str(kv, key), put<uint32_t>(kv, static_cast<uint32_t>(type)), put<T>(kv, v), ++n_kv;
  }
  void string(const std::string& key, const std::string& v) {
    put_str(kv, key), put<uint32_t>(kv, 8), put_str(kv, v), ++n_kv;
  }
  void strings(const std::string& key, const std::vector<std::string>& v) {
    put_str(kv, key), put<uint32_t>(kv, 9), put<uint32_t>(kv, 8), put<uint64_t>(kv, v.size());
    for (const auto& s : v) put_str(kv, s);
    ++n_kv;
  }
  void floats(const std::string& key, const std::vector<float>& v) {
    put_str(kv, key), put<uint32_t>(kv, 9), put<uint32_t>(kv, 6), put<uint64_t>(kv, v.size());
    for (float f : v) put<float>(kv, f);
    ++n_kv;
  }
  // A tensor of ggml dims `ne` (innermost first) and type, its bytes appended to the data section.
  void tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, size_t nbytes) {
    while (data.size() % alignment) data += '\0';
    put_str(infos, name), put<uint32_t>(infos, static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) put<uint64_t>(infos, d);
    put<uint32_t>(infos, type), put<uint64_t>(infos, data.size()), ++n_tensors;
    for (size_t i = 0; i < nbytes; ++i) data += static_cast<char>(i * 7 + name.size());
  }
  std::string bytes() const {
    std::string s = "GGUF";
    put<uint32_t>(s, version), put<uint64_t>(s, n_tensors), put<uint64_t>(s, n_kv);
    s += kv + infos;
    while (s.size() % alignment) s += '\0';
    return s + data;
  }
};

class GgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kapitsa_gguf_" + std::to_string(fresh_seed()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  // The error opening `bytes` gives; it must name the file and every string in `parts`.
  void expect_error(const std::string& bytes, std::initializer_list<std::string> parts) {
    const std::string p = write("bad.gguf", bytes);
    auto r = GgufFile::open(p);
    ASSERT_FALSE(r.ok()) << "opening should fail";
    EXPECT_NE(r.error().message.find(p), std::string::npos) << r.error().message;
    for (const auto& part : parts) EXPECT_NE(r.error().message.find(part), std::string::npos) << r.error().message;
  }
  static Builder valid() {
    Builder b;
    b.string("general.architecture", "qwen35");
    b.scalar<uint32_t>("qwen35.block_count", GgufValueType::u32, 8);
    b.scalar<float>("qwen35.rope.freq_base", GgufValueType::f32, 1e7f);
    b.scalar<uint8_t>("flag", GgufValueType::boolean, 1);
    b.scalar<int64_t>("neg", GgufValueType::i64, -5);
    b.strings("tokenizer.ggml.tokens", {"a", "bc", ""});
    b.floats("tokenizer.ggml.scores", {0.5f, -1.0f, 2.0f});
    b.tensor("token_embd.weight", {64, 3}, 8, 3 * 2 * 34);  // Q8_0 [3, 64]
    b.tensor("blk.0.attn_norm.weight", {64}, 0, 64 * 4);     // F32 [64]
    b.tensor("blk.0.ffn_down.weight", {256, 2}, 12, 2 * 144);  // Q4_K [2, 256]
    return b;
  }
  fs::path dir_;
};

TEST_F(GgufTest, ReadsWhatWasWritten) {
  const Builder b = valid();
  const std::string p = write("ok.gguf", b.bytes());
  auto r = GgufFile::open(p);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const GgufFile& f = **r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(*f.get_string("general.architecture"), "qwen35");
  EXPECT_EQ(*f.get_int("qwen35.block_count"), 8);
  EXPECT_FLOAT_EQ(static_cast<float>(*f.get_float("qwen35.rope.freq_base")), 1e7f);
  EXPECT_EQ(f.find("flag")->i, 1);
  EXPECT_EQ(*f.get_int("neg"), -5);
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->strings, (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_EQ(f.find("tokenizer.ggml.scores")->floats, (std::vector<double>{0.5, -1.0, 2.0}));
  ASSERT_EQ(f.tensors().size(), 3u);
  const auto& e = f.tensors().at("token_embd.weight");
  EXPECT_EQ(e.type, GgmlType::q8_0);
  EXPECT_EQ(e.shape, (std::vector<int64_t>{3, 64}));  // ggml's ne reversed
  EXPECT_EQ(e.nbytes, 3u * 2 * 34);
  EXPECT_EQ(f.tensors().at("blk.0.ffn_down.weight").shape, (std::vector<int64_t>{2, 256}));
  const auto& n = f.tensors().at("blk.0.attn_norm.weight");
  EXPECT_EQ(n.begin % 32, 0u);
  EXPECT_EQ(f.data(n)[1], static_cast<uint8_t>(7 + n.name.size()));  // the bytes the builder wrote
  EXPECT_NE(f.get_int("general.architecture").error().message.find("expected an integer"), std::string::npos);
  EXPECT_NE(f.get_int("missing.key").error().message.find("'missing.key' is missing"), std::string::npos);
}

TEST_F(GgufTest, BadMagicAndVersion) {
  std::string bytes = valid().bytes();
  bytes[0] = 'X';
  expect_error(bytes, {"not a GGUF file"});
  Builder b = valid();
  b.version = 4;
  expect_error(b.bytes(), {"version 4"});
}

// Every truncation point inside the header and the data gives an error, never a crash.
TEST_F(GgufTest, TruncatedAnywhere) {
  const std::string bytes = valid().bytes();
  for (size_t n = 0; n < bytes.size(); n += (n < 400 ? 1 : 37)) {
    SCOPED_TRACE(n);
    const std::string p = write("cut.gguf", bytes.substr(0, n));
    auto r = GgufFile::open(p);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find(p), std::string::npos) << r.error().message;
  }
  expect_error(bytes.substr(0, bytes.size() - 1), {"blk.0.ffn_down.weight", "beyond the end of the file"});
}

TEST_F(GgufTest, OffsetPastEndAndMisaligned) {
  Builder b = valid();
  b.tensor("late", {32}, 0, 0);  // placed at the current end; now move its offset far away
  std::string bytes = b.bytes();
  const size_t at = b.kv.size() + 24 + b.infos.size() - 8;  // the last tensor's offset field
  uint64_t far = 1u << 20;
  std::memcpy(bytes.data() + at, &far, 8);
  expect_error(bytes, {"'late'", "beyond the end of the file"});
  uint64_t odd = 33;
  std::memcpy(bytes.data() + at, &odd, 8);
  expect_error(bytes, {"'late'", "not aligned to 32"});
}

TEST_F(GgufTest, BadAlignmentKey) {
  Builder b = valid();
  b.scalar<uint32_t>("general.alignment", GgufValueType::u32, 48);
  expect_error(b.bytes(), {"general.alignment", "power of two"});
}

TEST_F(GgufTest, UnknownTypeAndPartialBlocks) {
  Builder b = valid();
  b.tensor("weird", {32}, 77, 32);
  expect_error(b.bytes(), {"'weird'", "unknown ggml type 77"});
  // Kapitsa's own block types (F8_E4M3_32 = 1000, FP4_E2M1_32 = 1001) exist only in memory.
  for (uint32_t own : {1000u, 1001u}) {
    Builder k = valid();
    k.tensor("ours", {32}, own, 36);
    expect_error(k.bytes(), {"'ours'", fmt::format("unknown ggml type {}", own)});
  }
  Builder c = valid();
  c.tensor("ragged", {100, 2}, 12, 0);  // Q4_K rows of 100 values
  expect_error(c.bytes(), {"'ragged'", "Q4_K", "not whole blocks of 256"});
}

TEST_F(GgufTest, HugeCountsAndLengths) {
  Builder b;  // a tensor count no file of this size can hold
  std::string bytes = b.bytes();
  uint64_t huge = 1ull << 60;
  std::memcpy(bytes.data() + 8, &huge, 8);
  expect_error(bytes, {"1152921504606846976 tensors"});
  std::memcpy(bytes.data() + 8, "\0\0\0\0\0\0\0\0", 8);
  std::memcpy(bytes.data() + 16, &huge, 8);
  expect_error(bytes, {"metadata entries"});

  Builder s;  // a string longer than the file
  Builder::put_str(s.kv, "key"), Builder::put<uint32_t>(s.kv, 8), Builder::put<uint64_t>(s.kv, huge), ++s.n_kv;
  expect_error(s.bytes(), {"metadata 'key'", "claims 1152921504606846976 bytes"});

  Builder a;  // an array longer than the file
  Builder::put_str(a.kv, "arr"), Builder::put<uint32_t>(a.kv, 9), Builder::put<uint32_t>(a.kv, 4),
      Builder::put<uint64_t>(a.kv, huge), ++a.n_kv;
  expect_error(a.bytes(), {"metadata 'arr'", "1152921504606846976 elements"});

  Builder d = valid();  // dims whose product overflows
  d.tensor("wide", {1ull << 40, 1ull << 40}, 0, 0);
  expect_error(d.bytes(), {"'wide'", "overflow"});
  Builder r = valid();
  r.tensor("rank5", {1, 1, 1, 1, 1}, 0, 4);
  expect_error(r.bytes(), {"'rank5'", "5 dimensions"});
}

TEST_F(GgufTest, DuplicatesAndOverlaps) {
  Builder b = valid();
  b.scalar<uint32_t>("qwen35.block_count", GgufValueType::u32, 9);
  expect_error(b.bytes(), {"'qwen35.block_count' appears twice"});
  Builder t = valid();
  t.tensor("token_embd.weight", {32}, 0, 128);
  expect_error(t.bytes(), {"'token_embd.weight' appears twice"});
  Builder o = valid();
  o.tensor("alias", {32}, 0, 128);
  std::string bytes = o.bytes();
  const uint64_t zero = 0;  // point 'alias' at the first tensor's bytes
  std::memcpy(bytes.data() + o.kv.size() + 24 + o.infos.size() - 8, &zero, 8);
  expect_error(bytes, {"'alias'", "overlap"});
}

TEST_F(GgufTest, SplitFilesOpenTogether) {
  Builder one = valid();
  one.scalar<uint16_t>("split.count", GgufValueType::u16, 2);
  Builder two;
  two.tensor("output.weight", {64, 3}, 8, 3 * 2 * 34);
  write("m-00001-of-00002.gguf", one.bytes());
  const std::string second = write("m-00002-of-00002.gguf", two.bytes());
  auto r = weights::open_gguf_parts(second);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 2u);
  EXPECT_TRUE((*r)[0]->find("general.architecture") != nullptr);  // part 1 first
  EXPECT_EQ((*r)[1]->tensors().count("output.weight"), 1u);
  fs::remove(dir_ / "m-00001-of-00002.gguf");
  auto missing = weights::open_gguf_parts(second);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("part 1 of 2"), std::string::npos) << missing.error().message;
}

}  // namespace
}  // namespace kapitsa::testing
