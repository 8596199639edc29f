// Safetensors reading: round trips of every dtype, sharded folders, and every way a file can be
// broken (truncated, offsets beyond the file, overlaps, holes, bad JSON, shape × dtype ≠ bytes,
// unknown dtype), each giving an error that names the file and the tensor.
#include "test_util.h"
#include "weights/safetensors.h"
#include "weights/safetensors_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace kapitsa::testing {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kapitsa_st_" + std::to_string(fresh_seed()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes a raw safetensors file from a header JSON string and `data_bytes` bytes of data.
  std::string write_raw(const std::string& name, const std::string& header, size_t data_bytes) {
    const std::string p = path(name);
    std::ofstream out(p, std::ios::binary);
    const uint64_t n = header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header;
    out << std::string(data_bytes, '\x01');
    return p;
  }

  static std::string open_error(const std::string& p) {
    auto r = weights::SafetensorsFile::open(p);
    EXPECT_FALSE(r.ok()) << "opening " << p << " should fail";
    return r.ok() ? std::string() : r.error().message;
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, RoundTripsEveryDtype) {
  std::mt19937_64 rng(fresh_seed());
  const DType dtypes[] = {DType::f32, DType::f16,  DType::bf16, DType::f8_e4m3, DType::u8, DType::i8,
                          DType::u16, DType::i16, DType::u32, DType::i32,     DType::i64};
  std::vector<Buffer> buffers;
  std::vector<weights::NamedTensor> tensors;
  for (DType t : dtypes) {
    Buffer b = Buffer::allocate(t, {3, 5});
    for (size_t i = 0; i < b.tensor().nbytes(); ++i) b.tensor().data_as<uint8_t>()[i] = static_cast<uint8_t>(rng());
    tensors.push_back({std::string("t_") + std::string(dtype_name(t)), b.tensor()});
    buffers.push_back(std::move(b));
  }
  ASSERT_TRUE(weights::write_safetensors(path("all.safetensors"), tensors).ok());
  auto file = weights::SafetensorsFile::open(path("all.safetensors"));
  ASSERT_TRUE(file.ok()) << file.error().message;
  ASSERT_EQ((*file)->entries().size(), std::size(dtypes));
  auto ckpt = weights::Checkpoint::open(path("all.safetensors"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.error().message;
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto t = ckpt->get(tensors[i].name, {3, 5}, {dtypes[i]});
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ(t->dtype(), dtypes[i]);
    EXPECT_EQ(std::memcmp(t->data(), buffers[i].tensor().data(), t->nbytes()), 0) << tensors[i].name;
  }
}

TEST_F(SafetensorsTest, ConvertsFloatFormatsToF32) {
  const float values[] = {0.0f, 1.0f, -2.5f, 0.15625f, 448.0f};
  Buffer bf = Buffer::allocate(DType::bf16, {5}), h = Buffer::allocate(DType::f16, {5}), f8 = Buffer::allocate(DType::f8_e4m3, {5});
  const uint8_t e4m3[] = {0x00, 0x38, 0xC2, 0x22, 0x7E};  // 0, 1, -2.5, 0.15625, 448 in E4M3
  for (int i = 0; i < 5; ++i) {
    bf.tensor().data_as<uint16_t>()[i] = f32_to_bf16(values[i]);
    h.tensor().data_as<uint16_t>()[i] = f32_to_f16(values[i]);
    f8.tensor().data_as<uint8_t>()[i] = e4m3[i];
  }
  for (const Buffer* b : {&bf, &h, &f8}) {
    float out[5];
    weights::convert_to_f32(b->tensor(), out);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(out[i], values[i]) << dtype_name(b->tensor().dtype()) << " element " << i;
  }
}

TEST_F(SafetensorsTest, TruncatedFilesAreRejected) {
  EXPECT_NE(open_error(write_raw("short.safetensors", "", 0)).find("short.safetensors"), std::string::npos);
  // header length claims more bytes than the file has
  const std::string p = path("claims.safetensors");
  {
    std::ofstream out(p, std::ios::binary);
    const uint64_t n = 1000;
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << "{}";
  }
  EXPECT_NE(open_error(p).find("truncated"), std::string::npos);
  // data cut short: the tensor reaches beyond the end
  const std::string cut = write_raw("cut.safetensors", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 10);
  const std::string message = open_error(cut);
  EXPECT_NE(message.find("'w'"), std::string::npos) << message;
  EXPECT_NE(message.find("beyond the end"), std::string::npos) << message;
}

// Found by fuzz_safetensors: a number too large for a double made the JSON parser throw out_of_range,
// which escaped the loader (only parse_error was caught) and ended the process.
TEST_F(SafetensorsTest, NumberTooLargeInTheHeaderIsAnError) {
  const std::string message =
      open_error(write_raw("huge.safetensors", R"({"w":{"dtype":"F32","shape":[2e12111111111111111],"data_offsets":[0,0]}})", 0));
  EXPECT_NE(message.find("huge.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find("malformed header JSON"), std::string::npos) << message;
}

TEST_F(SafetensorsTest, OverlapsHolesAndSizeMismatchesAreRejected) {
  std::string m = open_error(write_raw(
      "overlap.safetensors",
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12));
  EXPECT_NE(m.find("overlap"), std::string::npos) << m;
  EXPECT_NE(m.find("'a'"), std::string::npos) << m;
  EXPECT_NE(m.find("'b'"), std::string::npos) << m;

  m = open_error(write_raw("hole.safetensors", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12));
  EXPECT_NE(m.find("hole"), std::string::npos) << m;

  m = open_error(write_raw("size.safetensors", R"({"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})", 8));
  EXPECT_NE(m.find("'a'"), std::string::npos) << m;
  EXPECT_NE(m.find("needs 6 bytes"), std::string::npos) << m;

  m = open_error(write_raw("dtype.safetensors", R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,2]}})", 2));
  EXPECT_NE(m.find("unsupported dtype 'Q7'"), std::string::npos) << m;

  m = open_error(write_raw("json.safetensors", R"({"a":{"dtype":"F32","shape":[2],)", 0));
  EXPECT_NE(m.find("malformed header JSON"), std::string::npos) << m;

  m = open_error(write_raw("overflow.safetensors",
                           R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8));
  EXPECT_NE(m.find("overflows"), std::string::npos) << m;
}

TEST_F(SafetensorsTest, CheckpointGetNamesTheProblem) {
  Buffer b = Buffer::zeros(DType::bf16, {4, 2});
  ASSERT_TRUE(weights::write_safetensors(path("model.safetensors"), {{"layer.weight", b.tensor()}}).ok());
  auto ckpt = weights::Checkpoint::open(dir_.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.error().message;
  auto missing = ckpt->get("other.weight", {4, 2});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("missing tensor 'other.weight'"), std::string::npos);
  auto shape = ckpt->get("layer.weight", {2, 4});
  ASSERT_FALSE(shape.ok());
  EXPECT_NE(shape.error().message.find("has shape [4, 2], expected [2, 4]"), std::string::npos) << shape.error().message;
  auto dtype = ckpt->get("layer.weight", {4, 2}, {DType::f32});
  ASSERT_FALSE(dtype.ok());
  EXPECT_NE(dtype.error().message.find("dtype BF16"), std::string::npos) << dtype.error().message;
  EXPECT_NE(dtype.error().message.find("model.safetensors"), std::string::npos);
}

TEST_F(SafetensorsTest, ShardedCheckpointFollowsTheIndex) {
  Buffer a = Buffer::zeros(DType::f32, {2}), b = Buffer::zeros(DType::f32, {3});
  a.f32()[1] = 7, b.f32()[2] = 9;
  ASSERT_TRUE(weights::write_safetensors(path("model-00001-of-00002.safetensors"), {{"a", a.tensor()}}).ok());
  ASSERT_TRUE(weights::write_safetensors(path("model-00002-of-00002.safetensors"), {{"b", b.tensor()}}).ok());
  std::ofstream(path("model.safetensors.index.json"))
      << R"({"metadata":{"total_size":20},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})";
  auto ckpt = weights::Checkpoint::open(dir_.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.error().message;
  EXPECT_EQ(ckpt->get("a", {2})->f32()[1], 7.0f);
  EXPECT_EQ(ckpt->get("b", {3})->f32()[2], 9.0f);

  std::ofstream(path("model.safetensors.index.json")) << R"({"weight_map":{"a":"../escape.safetensors"}})";
  auto escaped = weights::Checkpoint::open(dir_.string());
  ASSERT_FALSE(escaped.ok());
  EXPECT_NE(escaped.error().message.find("outside the folder"), std::string::npos);
}

}  // namespace
}  // namespace kapitsa::testing
