// GGUF files made by llama.cpp's own tools from the qwen35-dense-tiny fixture (tools/gguf/
// make_test_files.sh: convert_hf_to_gguf.py to BF16 and Q8_0, llama-quantize for one tensor of each
// block type in blocks.gguf): every tensor's values as Kapitsa reads them against gguf-py's numpy
// dequantization (reference.json, written by that script, not by Kapitsa); the BF16 file gives the
// safetensors fixture's logits, as do BF16 files of the Qwen3-Next and Nemotron-H fixtures; the Q8_0
// file stays close; files with the multi-token-prediction head the converter appends (Qwen3.5 and
// Nemotron 3) give the same head as the safetensors folder; and broken model files (unknown
// architecture, a missing tensor, a block type Kapitsa does not decode, an MTP tensor it does not read)
// are errors naming them.
#include "cli_runner.h"
#include "fixture_reference.h"
#include "model_logits.h"
#include "base/json.h"
#include "models/model.h"
#include "models/mtp_fixture.h"
#include "ops/ref/ref.h"
#include "test_util.h"
#include "weights/gguf.h"
#include "weights/safetensors.h"
#include "weights/safetensors_writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace kapitsa::testing {
namespace {

namespace fs = std::filesystem;

std::string gguf_path(const std::string& name) { return test_data_path("fixtures/gguf/" + name); }

// Every value of a tensor as f32: block types through ref's dequantization, float types converted.
std::vector<float> values_of(const weights::GgufFile& f, const weights::GgufTensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  const int64_t K = t.shape.back(), rows = t.numel() / K;
  if (t.type == GgmlType::f32 || t.type == GgmlType::f16 || t.type == GgmlType::bf16) {
    const DType dt = t.type == GgmlType::f32 ? DType::f32 : t.type == GgmlType::f16 ? DType::f16 : DType::bf16;
    weights::convert_to_f32(Tensor(dt, {t.numel()}, const_cast<uint8_t*>(f.data(t))), v.data());
    return v;
  }
  const size_t row_bytes = t.nbytes / static_cast<size_t>(rows);
  for (int64_t r = 0; r < rows; ++r) ops::ref::dequantize_ggml(t.type, f.data(t) + r * row_bytes, K, v.data() + r * K);
  return v;
}

TEST(GgufFiles, ValuesMatchGgufPy) {
  auto ref = read_json_file(gguf_path("reference.json"));
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  size_t checked = 0;
  std::set<std::string> types;
  for (const auto& [file, tensors] : ref->items()) {
    auto opened = weights::GgufFile::open(gguf_path(file));
    ASSERT_TRUE(opened.ok()) << opened.error().message;
    const weights::GgufFile& f = **opened;
    EXPECT_EQ(f.tensors().size(), tensors.size()) << file;
    for (const auto& [name, want] : tensors.items()) {
      SCOPED_TRACE(file + ": " + name);
      ASSERT_TRUE(f.tensors().contains(name));
      const weights::GgufTensor& t = f.tensors().at(name);
      EXPECT_EQ(ggml_type_name(t.type), want["type"].get<std::string>());
      const std::vector<float> v = values_of(f, t);
      ASSERT_EQ(static_cast<int64_t>(v.size()), want["count"].get<int64_t>());
      double sum = 0, sumsq = 0, sumabs = 0;
      for (float x : v) sum += x, sumsq += static_cast<double>(x) * x, sumabs += std::abs(x);
      EXPECT_NEAR(sum, want["sum"].get<double>(), 1e-9 * sumabs + 1e-12);
      EXPECT_NEAR(sumsq, want["sumsq"].get<double>(), 1e-9 * sumsq + 1e-12);
      for (size_t k = 0; k < want["index"].size(); ++k) {
        const double w = want["values"][k].get<double>();
        EXPECT_NEAR(v[want["index"][k].get<size_t>()], w, 1e-6 * std::abs(w)) << "index " << want["index"][k];
      }
      types.insert(want["type"].get<std::string>());
      ++checked;
    }
  }
  EXPECT_GT(checked, 200u);
  for (const char* t : {"F32", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                        "IQ4_NL", "IQ4_XS", "MXFP4"})
    EXPECT_TRUE(types.contains(t)) << t << " not covered by the reference files";
}

// The converter writes the fixture's bf16 matrices as they are, norms as 1 + w in f32, A_log as
// -exp(A_log), conv1d squeezed and the GDN V heads reordered; read back, the model computes the same
// logits as from the safetensors folder up to f32 rounding: out_proj keeps the file's column order and
// its input's heads are permuted instead, so its sums run in another order (measured 1.6e-6; a wrong
// permutation moves the logits by O(1)).
TEST(GgufModel, Bf16FileGivesTheFixtureLogits) {
  const std::string src = test_data_path("fixtures/qwen35-dense-tiny");
  FixtureReference ref = load_fixture_reference(src);
  const Buffer st = prompt_logits(src, ref.prompt_ids);
  const Buffer gg = prompt_logits(gguf_path("qwen35-dense-tiny-BF16.gguf"), ref.prompt_ids);
  ASSERT_FALSE(st.tensor().empty() || gg.tensor().empty());
  const double e = relative_error(gg, st);
  std::printf("BF16 GGUF vs safetensors: rel. error %.2e\n", e);
  EXPECT_LE(e, 1e-5);
  EXPECT_EQ(top1_agreement(gg, st), 1.0);
}

// The other architectures as the converter writes them (tools/gguf/make_test_files.sh: BF16, no MTP):
// Qwen3-Next (qwen3next: in_proj_qkvz split into qkv + z, in_proj_ba kept packed, norms 1 + w),
// Nemotron-H with MoE (nemotron_h_moe: Mamba-2's A as -exp(A_log), D and the grouped norm reshaped,
// experts stacked, attention q/k rows permuted for RoPE it does not use) and its LatentMoE variant
// (ffn_latent_down / up, group-limited routing from expert_group_count / expert_group_used_count).
// Their logits against transformers' reference logits for the fixture, at the fixtures' f32 bound
// (tests/fixtures/README.md), and against the same model read from the safetensors folder.
class GgufArchitecture : public ::testing::TestWithParam<const char*> {};

// Prompt logits [T, V] with RoPE frequencies rounded to bf16, as transformers computed the fixtures'
// references (tests/models/test_fixtures.cpp).
Buffer fixture_logits(const std::string& path, std::span<const int32_t> ids) {
  auto model = models::load_model(path, models::LoadOptions{/*rope_bf16_frequencies=*/true});
  EXPECT_TRUE(model.ok()) << (model.ok() ? "" : model.error().message);
  if (!model.ok()) return Buffer();
  const int64_t T = static_cast<int64_t>(ids.size());
  auto state = (*model)->new_state(T);
  Buffer logits = Buffer::allocate(DType::f32, {T, (*model)->info().vocab_size});
  const Status s = (*model)->forward(ids, *state, logits);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return logits;
}

TEST_P(GgufArchitecture, Bf16FileGivesTheFixtureLogits) {
  const std::string name = GetParam();
  const std::string src = test_data_path("fixtures/" + name);
  FixtureReference ref = load_fixture_reference(src);
  const Buffer st = fixture_logits(src, ref.prompt_ids);
  const Buffer gg = fixture_logits(gguf_path(name + "-BF16.gguf"), ref.prompt_ids);
  ASSERT_FALSE(st.tensor().empty() || gg.tensor().empty());
  const double e_ref = relative_error(gg, ref.prompt_logits), e_st = relative_error(gg, st);
  std::printf("%s BF16 GGUF: rel. error %.2e vs transformers, %.2e vs the safetensors folder\n", name.c_str(), e_ref,
              e_st);
  EXPECT_LE(e_ref, 1e-4);
  EXPECT_LE(e_st, 1e-5);
  EXPECT_EQ(top1_agreement(gg, ref.prompt_logits), 1.0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufArchitecture,
                         ::testing::Values("qwen3-next-tiny", "qwen35-moe-tiny", "nemotron-h-tiny", "nemotron-h-latent-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// Q8_0 (the converter's own quantization) against the bf16 fixture. Random weights make the logits
// nearly flat and sensitive (see docs/quantization.md); measured: rel. error 6.2e-2, top-1 0.85 over
// the fixture's prompt, the same as MLX 8-bit on this fixture.
TEST(GgufModel, Q8_0FileIsCloseToBf16) {
  const std::string src = test_data_path("fixtures/qwen35-dense-tiny");
  FixtureReference ref = load_fixture_reference(src);
  int64_t dense_bytes = 0, q8_bytes = 0;
  const Buffer st = prompt_logits(src, ref.prompt_ids, &dense_bytes);
  const Buffer q8 = prompt_logits(gguf_path("qwen35-dense-tiny-Q8_0.gguf"), ref.prompt_ids, &q8_bytes);
  ASSERT_FALSE(st.tensor().empty() || q8.tensor().empty());
  const double e = relative_error(q8, st), a = top1_agreement(q8, st), kl = mean_kl(q8, st);
  std::printf("Q8_0 GGUF vs bf16: rel. error %.2e, top-1 %.3f, mean KL %.2e; weight bytes %ld vs %ld\n", e, a, kl,
              static_cast<long>(q8_bytes), static_cast<long>(dense_bytes));
  EXPECT_LE(e, 0.12);
  EXPECT_GE(a, 0.75);
  EXPECT_GT(e, 1e-4);  // the codes are really used, not a float copy
  EXPECT_LT(q8_bytes, dense_bytes * 0.6);  // 8.5 bits per weight instead of 16
}

// tools/gguf/mtp_folders.py's Qwen head, built again here for the folder to compare with: copies of the
// fixture's trunk tensors (its full-attention layer 3 as the head's layer, that layer's o_proj [H, 2H] as
// fc, the input norms of layers 0, 1, 2 as the embedding, hidden and final norms).
std::string folder_with_copied_head(const ScratchDir& dir, const std::string& fixture) {
  const fs::path src = test_data_path("fixtures/" + fixture);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(src / f, dir.path(f));
  auto trunk = weights::Checkpoint::open(src.string());
  EXPECT_TRUE(trunk.ok());
  const std::string p = trunk->contains("model.language_model.norm.weight") ? "model.language_model.layers." : "model.layers.";
  std::vector<weights::NamedTensor> head;
  auto copy = [&](const std::string& to, const std::string& from) { head.push_back({to, *trunk->get_any_shape(from)}); };
  for (const auto& name : trunk->names())
    if (name.starts_with(p + "3.")) copy("mtp.layers.0." + name.substr(p.size() + 2), name);
  copy("mtp.fc.weight", p + "3.self_attn.o_proj.weight");
  copy("mtp.pre_fc_norm_embedding.weight", p + "0.input_layernorm.weight");
  copy("mtp.pre_fc_norm_hidden.weight", p + "1.input_layernorm.weight");
  copy("mtp.norm.weight", p + "2.input_layernorm.weight");
  EXPECT_TRUE(weights::write_safetensors(dir.path("model-mtp.safetensors"), head).ok());
  return dir.path();
}

// The converter appends the head as block n_layers ("nextn_predict_layers" 1): Qwen3.5's and Qwen3-Next's
// fc / enorm / hnorm / shared_head_norm as nextn.* beside the decoder layer's tensors (norms stored 1 + w;
// Qwen3-Next's layer with its MoE: stacked experts, shared expert and gate), Nemotron 3's two head layers
// folded into one block (attention, then MoE with post_attention_norm). Each file's head gives the
// folder's within 1e-5; Nemotron's also its float64 reference (tools/fixtures/nemotron_mtp_reference.py)
// at the folder test's 1e-4.
TEST(GgufModel, MtpHeadsMatchTheFolders) {
  for (const std::string fixture : {"qwen35-dense-tiny", "qwen3-next-tiny"}) {
    ScratchDir dir;
    const HeadRows folder = head_over_prompt(folder_with_copied_head(dir, fixture), fixture);
    const HeadRows gguf = head_over_prompt(gguf_path(fixture + "-mtp-BF16.gguf"), fixture);
    ASSERT_FALSE(folder.logits.tensor().empty() || gguf.logits.tensor().empty());
    const double e = relative_error(gguf.logits, folder.logits), e_rows = relative_error(gguf.rows, folder.rows);
    std::printf("%s MTP head, GGUF vs folder: logits %.2e, rows %.2e\n", fixture.c_str(), e, e_rows);
    EXPECT_LE(e, 1e-5);
    EXPECT_LE(e_rows, 1e-5);
    EXPECT_EQ(top1_agreement(gguf.logits, folder.logits), 1.0);
  }
  {
    // The trunk is the same model with or without the appended block.
    const FixtureReference ref = load_fixture_reference(test_data_path("fixtures/qwen35-dense-tiny"));
    const Buffer with_head = prompt_logits(gguf_path("qwen35-dense-tiny-mtp-BF16.gguf"), ref.prompt_ids);
    const Buffer without = prompt_logits(gguf_path("qwen35-dense-tiny-BF16.gguf"), ref.prompt_ids);
    ASSERT_FALSE(with_head.tensor().empty() || without.tensor().empty());
    EXPECT_EQ(relative_error(with_head, without), 0.0);
  }
  {
    const fs::path root = fs::temp_directory_path() / ("kapitsa_gguf_mtp_" + std::to_string(::getpid()));
    struct Cleanup {
      fs::path p;
      ~Cleanup() { fs::remove_all(p); }
    } cleanup{root};
    const HeadRows folder = head_over_prompt(nemotron_with_mtp(root), "nemotron-h-tiny");
    const HeadRows gguf = head_over_prompt(gguf_path("nemotron-h-tiny-mtp-BF16.gguf"), "nemotron-h-tiny");
    ASSERT_FALSE(folder.logits.tensor().empty() || gguf.logits.tensor().empty());
    auto ref = weights::Checkpoint::open(test_data_path("fixtures/nemotron-h-tiny-mtp/mtp_reference.safetensors"));
    auto mtp_hidden = ref->get_any_shape("mtp_hidden", {DType::f32});
    ASSERT_TRUE(mtp_hidden.ok());
    const double e = relative_error(gguf.logits, folder.logits), e_ref = relative_error(gguf.rows, *mtp_hidden);
    std::printf("nemotron_h MTP head, GGUF: logits %.2e vs folder, rows %.2e vs float64 reference\n", e, e_ref);
    EXPECT_LE(e, 1e-5);
    EXPECT_LE(e_ref, 1e-4);
  }
}

// A copy of a committed file with `from` replaced by `to` (same length) in its header.
std::string patched(const ScratchDir& dir, const std::string& name, const std::string& from, const std::string& to,
                    std::initializer_list<uint8_t> after = {}, size_t skip = 0) {
  std::ifstream in(gguf_path(name), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = bytes.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  bytes.replace(at, from.size(), to);
  size_t k = at + from.size() + skip;
  for (uint8_t b : after) bytes[k++] = static_cast<char>(b);
  const std::string out = dir.path("m.gguf");
  std::ofstream(out, std::ios::binary) << bytes;
  return out;
}

void expect_load_error(const std::string& path, std::initializer_list<std::string> parts) {
  auto m = models::load_model(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find(path), std::string::npos) << m.error().message;
  for (const auto& p : parts) EXPECT_NE(m.error().message.find(p), std::string::npos) << m.error().message;
}

TEST(GgufModel, BrokenFilesAreNamed) {
  ScratchDir dir;
  expect_load_error(patched(dir, "qwen35-dense-tiny-Q8_0.gguf", "qwen35", "qwen99"),
                    {"GGUF architecture 'qwen99' is not loaded yet"});
  expect_load_error(patched(dir, "qwen35-dense-tiny-Q8_0.gguf", "blk.2.ffn_up.weight", "blk.2.ffn_up.weighX"),
                    {"model.layers.2.mlp.up_proj.weight"});
  // The tensor info after the name: u32 rank 2, two u64 dims, then the u32 type: Q8_0 (8) → IQ2_XXS (16),
  // a type Kapitsa does not decode whose 256-value blocks (66 bytes) take less room than Q8_0's.
  expect_load_error(patched(dir, "qwen35-dense-tiny-Q8_0.gguf", "blk.2.ffn_down.weight", "blk.2.ffn_down.weight",
                            {16, 0, 0, 0}, 4 + 16),
                    {"model.layers.2.mlp.down_proj.weight", "IQ2_XXS", "does not decode"});
  // In the MTP block every tensor must be one the head reads (a dedicated embedding would go unused);
  // one missing (renamed into a trunk block, where unread names are skipped) is named as the folder would.
  expect_load_error(patched(dir, "qwen35-dense-tiny-mtp-BF16.gguf", "blk.8.nextn.enorm.weight", "blk.8.nextn.enorX.weight"),
                    {"blk.8.nextn.enorX.weight", "MTP head"});
  expect_load_error(patched(dir, "qwen35-dense-tiny-mtp-BF16.gguf", "blk.8.nextn.hnorm.weight", "blk.7.nextn.hnorm.weight"),
                    {"mtp.pre_fc_norm_hidden.weight"});
  // A tensor whose V rows are reordered, with its first dimension 0 (found by fuzz_gguf: the row arithmetic
  // divided by it).
  expect_load_error(patched(dir, "qwen35-dense-tiny-Q8_0.gguf", "blk.0.attn_gate.weight", "blk.0.attn_gate.weight",
                            {0, 0, 0, 0, 0, 0, 0, 0}, 4),
                    {"blk.0.attn_gate.weight", "dimension of size 0"});
}

}  // namespace
}  // namespace kapitsa::testing
