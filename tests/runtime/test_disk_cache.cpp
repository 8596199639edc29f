// The disk prefix cache (runtime/disk_cache.h) on the fixture models: a restarted engine resumes a
// conversation from disk with the same ids and logprobs as a cold engine; a corrupt byte, a truncated
// file, another model's entries, a killed writer's leftovers (simulated, and a real fork + SIGKILL) are
// never used and warned about by file name; the size cap evicts the least recently used entry; and
// state bytes round-trip exactly.
#include "models/fingerprint.h"
#include "models/model.h"
#include "models/state_bytes.h"
#include "runtime/disk_cache.h"
#include "runtime/engine.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <thread>

namespace kapitsa::runtime {
namespace {

namespace fs = std::filesystem;

// A fresh folder under the system's temporary one, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / fmt::format("kapitsa-disk-cache-{}-{}", getpid(), testing::fresh_seed());
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string fixture_dir(const std::string& fixture) { return testing::test_data_path("fixtures/" + fixture); }

std::unique_ptr<models::Model> load(const std::string& dir) {
  auto model = models::load_model(dir);
  if (!model.ok()) {
    ADD_FAILURE() << model.error().message;
    return nullptr;
  }
  return std::move(model).value();
}

DiskCacheOptions disk_options(const std::string& model_dir, const fs::path& cache_dir, size_t max_bytes = size_t{1} << 30) {
  DiskCacheOptions o;
  o.dir = cache_dir.string();
  o.max_bytes = max_bytes;
  auto fp = models::model_fingerprint(model_dir);
  EXPECT_TRUE(fp.ok()) << (fp.ok() ? "" : fp.error().message);
  o.fingerprint = fp.ok() ? *fp : 0;
  return o;
}

std::unique_ptr<Engine> engine_for(const std::string& model_dir, const fs::path& cache_dir) {
  EngineOptions options;
  if (!cache_dir.empty()) options.disk_cache = disk_options(model_dir, cache_dir);
  auto engine = Engine::create(load(model_dir), nullptr, options);
  if (!engine.ok()) {
    ADD_FAILURE() << engine.error().message;
    return nullptr;
  }
  return std::move(engine).value();
}

std::vector<int32_t> random_prompt(std::mt19937_64& rng, size_t n, int64_t V) {
  std::vector<int32_t> p(n);
  for (int32_t& x : p) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(V - 1));  // avoid the EOS id
  return p;
}

struct Outcome {
  std::vector<int32_t> ids;
  std::vector<TokenEvent> tokens;
  FinishEvent finish;
};

Outcome run(Engine& engine, std::vector<int32_t> prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt_ids = std::move(prompt);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.top_logprobs = 3;
  auto g = engine.submit(r);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message);
  Outcome o;
  if (!g.ok()) return o;
  Event e;
  while ((*g)->next(e)) {
    if (auto* t = std::get_if<TokenEvent>(&e)) {
      o.ids.push_back(t->id);
      o.tokens.push_back(*t);
    } else {
      o.finish = std::get<FinishEvent>(e);
    }
  }
  return o;
}

// Same ids, and logprobs within 1e-4 relative: the runs fold tokens in other chunks, so the f32 sums differ
// in order (qwen35-dense-tiny with seed 1796664912661948820 differs by 1.6e-5 relative on an AVX2 machine,
// 1.3e-5 at the baseline level; CI, session 43).
void expect_same_output(const Outcome& a, const Outcome& b) {
  ASSERT_EQ(a.ids, b.ids);
  ASSERT_EQ(a.tokens.size(), b.tokens.size());
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    EXPECT_NEAR(a.tokens[i].logprob, b.tokens[i].logprob, 1e-4 * std::max(1.0f, std::abs(b.tokens[i].logprob)));
    ASSERT_EQ(a.tokens[i].top.size(), b.tokens[i].top.size());
    for (size_t k = 0; k < a.tokens[i].top.size(); ++k) EXPECT_EQ(a.tokens[i].top[k].id, b.tokens[i].top[k].id);
  }
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& item : fs::directory_iterator(dir)) out.push_back(item.path());
  std::sort(out.begin(), out.end());
  return out;
}

// A conversation: turn 1 on one engine (which writes its snapshots to `cache`), then that engine is
// gone and turn 2 (turn 1 + reply + a new user message) runs on a restarted one and on a cold one.
struct Conversation {
  std::vector<int32_t> turn1, reply, turn2;
};

Conversation first_turn(const std::string& model_dir, const fs::path& cache, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Conversation c;
  auto engine = engine_for(model_dir, cache);
  if (!engine) return c;
  const int64_t V = engine->model_info().vocab_size;
  c.turn1 = random_prompt(rng, 40 + rng() % 40, V);
  c.reply = run(*engine, c.turn1, 10).ids;
  c.turn2 = c.turn1;
  c.turn2.insert(c.turn2.end(), c.reply.begin(), c.reply.end());
  const std::vector<int32_t> user = random_prompt(rng, 5 + rng() % 20, V);
  c.turn2.insert(c.turn2.end(), user.begin(), user.end());
  return c;
}

void expect_restart_resumes(const std::string& fixture) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << fixture << " seed " << seed);
  TempDir cache;
  const std::string dir = fixture_dir(fixture);
  const Conversation c = first_turn(dir, cache.path, seed);
  ASSERT_EQ(c.reply.size(), 10u);
  EXPECT_FALSE(files_in(cache.path).empty()) << "the first engine wrote no entry";

  auto restarted = engine_for(dir, cache.path);
  auto cold = engine_for(dir, "");
  ASSERT_TRUE(restarted && cold);
  const Outcome resumed = run(*restarted, c.turn2, 8);
  const Outcome fresh = run(*cold, c.turn2, 8);
  expect_same_output(resumed, fresh);
  // The deepest snapshot: turn 1 and the reply but its last token (never folded).
  const int64_t reused = static_cast<int64_t>(c.turn1.size() + c.reply.size() - 1);
  EXPECT_EQ(resumed.finish.stats.cached_prompt_tokens, reused);
  EXPECT_EQ(fresh.finish.stats.cached_prompt_tokens, 0);
  EXPECT_EQ(restarted->counters().prompt_tokens_from_disk, reused);
  EXPECT_EQ(restarted->counters().prompt_tokens_prefilled, static_cast<int64_t>(c.turn2.size()) - reused);
}

TEST(DiskCache, RestartResumesLikeAColdRunQwen35) { expect_restart_resumes("qwen35-dense-tiny"); }
TEST(DiskCache, RestartResumesLikeAColdRunNemotronH) { expect_restart_resumes("nemotron-h-tiny"); }

// Damages every entry the first turn wrote with `damage`, then expects the restarted engine to warn
// about each by name, remove it, prefill cold and answer exactly as a cold engine.
void expect_damaged_entries_unused(const std::string& fixture, const std::function<void(const fs::path&)>& damage,
                                   const std::string& warning) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << fixture << " seed " << seed);
  TempDir cache;
  const std::string dir = fixture_dir(fixture);
  const Conversation c = first_turn(dir, cache.path, seed);
  const std::vector<fs::path> entries = files_in(cache.path);
  ASSERT_FALSE(entries.empty());
  for (const fs::path& p : entries) damage(p);

  ::testing::internal::CaptureStderr();
  auto restarted = engine_for(dir, cache.path);
  ASSERT_TRUE(restarted);
  const Outcome resumed = run(*restarted, c.turn2, 8);
  const std::string log = ::testing::internal::GetCapturedStderr();
  auto cold = engine_for(dir, "");
  ASSERT_TRUE(cold);
  expect_same_output(resumed, run(*cold, c.turn2, 8));
  EXPECT_EQ(resumed.finish.stats.cached_prompt_tokens, 0);
  EXPECT_EQ(restarted->counters().prompt_tokens_from_disk, 0);
  for (const fs::path& p : entries)  // (the run then wrote sound entries under the same names)
    EXPECT_NE(log.find("removing " + p.string()), std::string::npos) << "no warning names " << p << "; log:\n" << log;
  EXPECT_NE(log.find(warning), std::string::npos) << log;
  // Removed, and the new run's own entries are sound: a second restart resumes from them.
  restarted.reset();
  auto again = engine_for(dir, cache.path);
  ASSERT_TRUE(again);
  std::vector<int32_t> turn3 = c.turn2;
  turn3.insert(turn3.end(), resumed.ids.begin(), resumed.ids.end());
  turn3.push_back(5);
  EXPECT_EQ(run(*again, turn3, 1).finish.stats.cached_prompt_tokens, static_cast<int>(c.turn2.size() + resumed.ids.size() - 1));
}

void flip_payload_byte(const fs::path& p) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  const auto offset = static_cast<std::streamoff>(fs::file_size(p) / 2 + 40);  // past header and ids
  f.seekg(offset);
  char byte = 0;
  f.read(&byte, 1);
  byte = static_cast<char>(byte ^ 0x10);
  f.seekp(offset);
  f.write(&byte, 1);
}

TEST(DiskCache, CorruptByteIsWarnedAboutAndNeverUsed) {
  for (const char* fixture : {"qwen35-dense-tiny", "nemotron-h-tiny"})
    expect_damaged_entries_unused(fixture, flip_payload_byte, "checksum mismatch");
}

TEST(DiskCache, TruncatedEntryIsWarnedAboutAndNeverUsed) {
  expect_damaged_entries_unused(
      "qwen35-dense-tiny", [](const fs::path& p) { fs::resize_file(p, fs::file_size(p) - 7); }, "torn or corrupt");
}

// Another model's entries in the same folder: skipped with a warning naming each, left in place.
TEST(DiskCache, AnotherModelsEntriesAreIgnored) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  TempDir cache;
  const Conversation c = first_turn(fixture_dir("qwen35-dense-tiny"), cache.path, seed);
  const std::vector<fs::path> entries = files_in(cache.path);
  ASSERT_FALSE(entries.empty());
  ::testing::internal::CaptureStderr();
  auto other = engine_for(fixture_dir("nemotron-h-tiny"), cache.path);
  ASSERT_TRUE(other);
  const Outcome o = run(*other, c.turn2, 4);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(o.finish.stats.cached_prompt_tokens, 0);
  for (const fs::path& p : entries) {
    EXPECT_NE(log.find("skipping " + p.string() + ": written for another model"), std::string::npos) << log;
    EXPECT_TRUE(fs::exists(p)) << "another model's entry was removed: " << p;
  }
}

// Same architecture, shapes and tensor names, other weights (two random checkpoints of one config):
// the fingerprints differ, so the second never resumes from the first's entries.
TEST(DiskCache, SameShapesOtherWeightsAreAnotherModel) {
  TempDir work;
  const std::string config = fixture_dir("qwen35-dense-tiny") + "/config.json";
  const std::string a = (work.path / "a").string(), b = (work.path / "b").string();
  ASSERT_TRUE(models::write_random_checkpoint(config, a, 1).ok());
  ASSERT_TRUE(models::write_random_checkpoint(config, b, 2).ok());
  auto fa = models::model_fingerprint(a), fb = models::model_fingerprint(b), fa2 = models::model_fingerprint(a);
  ASSERT_TRUE(fa.ok() && fb.ok() && fa2.ok());
  EXPECT_NE(*fa, *fb);
  EXPECT_EQ(*fa, *fa2);
  models::LoadOptions rounded;
  rounded.rope_bf16_frequencies = true;
  EXPECT_NE(*models::model_fingerprint(a, rounded), *fa);
  EXPECT_FALSE(models::model_fingerprint((work.path / "missing").string()).ok());

  const Conversation c = first_turn(a, work.path / "cache", testing::fresh_seed());
  auto other = engine_for(b, work.path / "cache");
  ASSERT_TRUE(other);
  EXPECT_EQ(run(*other, c.turn2, 2).finish.stats.cached_prompt_tokens, 0);
}

// A state folded by the model directly, for DiskCache-level tests.
std::unique_ptr<models::SequenceState> folded_state(const models::Model& m, std::shared_ptr<models::KvPagePool> pool,
                                                    const std::vector<int32_t>& ids) {
  auto state = m.new_state(static_cast<int64_t>(ids.size()), std::move(pool));
  Buffer logits = Buffer::allocate(DType::f32, {1, m.info().vocab_size});
  EXPECT_TRUE(m.forward(ids, *state, logits).ok());
  return state;
}

std::vector<std::byte> bytes_of(const models::SequenceState& s) {
  std::vector<std::byte> out;
  models::state_to_bytes(s, out);
  return out;
}

// Bytes → state → bytes is the identity, both families; a wrong size is an error naming both sizes.
TEST(StateBytes, RoundTripIsExact) {
  std::mt19937_64 rng(testing::fresh_seed());
  for (const char* fixture : {"qwen35-dense-tiny", "nemotron-h-tiny"}) {
    SCOPED_TRACE(fixture);
    auto m = load(fixture_dir(fixture));
    ASSERT_TRUE(m);
    auto pool = std::make_shared<models::KvPagePool>(m->kv_layout(), 16);
    const std::vector<int32_t> ids = random_prompt(rng, 37, m->info().vocab_size);  // a partly filled page
    auto state = folded_state(*m, pool, ids);
    const std::vector<std::byte> bytes = bytes_of(*state);
    auto restored = models::state_from_bytes(*m, pool, 37, 50, bytes);
    ASSERT_TRUE(restored.ok()) << restored.error().message;
    EXPECT_EQ((*restored)->n_past(), 37);
    EXPECT_EQ((*restored)->capacity(), 50);
    EXPECT_EQ(bytes_of(**restored), bytes);
    auto wrong = models::state_from_bytes(*m, pool, 36, 50, bytes);
    ASSERT_FALSE(wrong.ok());
    EXPECT_NE(wrong.error().message.find(std::to_string(bytes.size())), std::string::npos) << wrong.error().message;
  }
}

struct Fixture {
  std::string dir = fixture_dir("qwen35-dense-tiny");
  std::unique_ptr<models::Model> model = load(dir);
  std::shared_ptr<models::KvPagePool> pool = std::make_shared<models::KvPagePool>(model->kv_layout(), 16);
};

// Leftovers of a killed writer: a temporary file (its process gone) and a partial entry (as a rename
// of an unsynced file might leave after a crash) are removed with a warning naming each.
TEST(DiskCache, LeftoversOfAnInterruptedWriteAreRemoved) {
  TempDir cache;
  Fixture f;
  std::mt19937_64 rng(testing::fresh_seed());
  const std::vector<int32_t> ids = random_prompt(rng, 30, f.model->info().vocab_size);
  fs::path entry;
  {
    DiskCache disk(disk_options(f.dir, cache.path), *f.model, f.pool);
    disk.save(ids, *folded_state(*f.model, f.pool, ids));
    ASSERT_EQ(files_in(cache.path).size(), 1u);
    entry = files_in(cache.path)[0];
  }
  // A dead writer: a child that has exited (its pid is not reused this quickly).
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  const fs::path tmp = fs::path(entry.string() + ".tmp." + std::to_string(child));
  fs::copy_file(entry, tmp);
  fs::resize_file(tmp, fs::file_size(entry) / 2);
  const fs::path partial = cache.path / "0123456789abcdef.kvc";
  fs::copy_file(entry, partial);
  fs::resize_file(partial, fs::file_size(entry) / 2);
  // A live writer's temporary file (ours) is left alone.
  const fs::path live = fs::path(entry.string() + ".tmp." + std::to_string(getpid()));
  fs::copy_file(entry, live);

  ::testing::internal::CaptureStderr();
  DiskCache disk(disk_options(f.dir, cache.path), *f.model, f.pool);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("removing " + tmp.string() + ", left by an interrupted write"), std::string::npos) << log;
  EXPECT_NE(log.find("removing " + partial.string()), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_FALSE(fs::exists(partial));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_EQ(disk.entries(), 1u);
  DiskCache::Loaded loaded = disk.load_deepest(ids, 30, 0, 0);
  ASSERT_NE(loaded.state, nullptr);
  EXPECT_EQ(loaded.tokens, 30);
}

// A real kill -9 while writing: a child saves entries in a loop, the parent kills it once it has
// written a few and a temporary file shows. Afterwards no temporary file survives a restart and every entry restores.
TEST(DiskCache, WriterKilledMidWriteLeavesNoBadEntry) {
  TempDir cache;
  Fixture f;
  std::mt19937_64 rng(testing::fresh_seed());
  const std::vector<int32_t> ids = random_prompt(rng, 600, f.model->info().vocab_size);
  auto state = folded_state(*f.model, f.pool, ids);
  const DiskCacheOptions options = disk_options(f.dir, cache.path);
  std::vector<std::vector<int32_t>> names;  // the same state under 200 names
  for (int32_t i = 0; i < 200; ++i) {
    names.push_back(ids);
    names.back()[0] = i;
  }
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    DiskCache disk(options, *f.model, f.pool);
    for (const auto& n : names) disk.save(n, *state);
    _exit(0);
  }
  bool seen_tmp = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!seen_tmp && std::chrono::steady_clock::now() < deadline) {
    int written = 0;
    bool tmp = false;
    for (const auto& item : fs::directory_iterator(cache.path, std::filesystem::directory_options::skip_permission_denied)) {
      if (item.path().string().find(".tmp.") != std::string::npos) tmp = true;
      else ++written;
    }
    seen_tmp = tmp && written >= 3;
  }
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(seen_tmp) << "the writer finished before a temporary file was seen";

  DiskCache disk(options, *f.model, f.pool);
  for (const fs::path& p : files_in(cache.path)) EXPECT_EQ(p.string().find(".tmp."), std::string::npos) << p;
  const size_t entries = disk.entries();
  EXPECT_EQ(entries, files_in(cache.path).size());
  size_t restored = 0;
  for (const auto& n : names) {
    DiskCache::Loaded loaded = disk.load_deepest(n, 600, 0, 0);
    if (loaded.state == nullptr) continue;
    ++restored;
    EXPECT_EQ(bytes_of(*loaded.state), bytes_of(*state));
  }
  EXPECT_EQ(restored, entries);
  EXPECT_GE(entries, 3u);
}

// The cap evicts the least recently used entry: using A makes B the oldest, so saving C evicts B;
// recency survives a restart.
TEST(DiskCache, SizeCapEvictsLeastRecentlyUsed) {
  TempDir cache;
  Fixture f;
  std::mt19937_64 rng(testing::fresh_seed());
  const int64_t V = f.model->info().vocab_size;
  const std::vector<int32_t> a = random_prompt(rng, 40, V), b = random_prompt(rng, 40, V), c = random_prompt(rng, 40, V);
  auto sa = folded_state(*f.model, f.pool, a), sb = folded_state(*f.model, f.pool, b), sc = folded_state(*f.model, f.pool, c);
  size_t entry_bytes = 0;
  {
    DiskCache probe(disk_options(f.dir, cache.path / "probe"), *f.model, f.pool);
    probe.save(a, *sa);
    entry_bytes = probe.bytes();
  }
  ASSERT_GT(entry_bytes, 0u);
  const DiskCacheOptions capped = disk_options(f.dir, cache.path / "capped", 2 * entry_bytes + entry_bytes / 2);
  {
    DiskCache disk(capped, *f.model, f.pool);
    disk.save(a, *sa);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // distinct modification times
    disk.save(b, *sb);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_NE(disk.load_deepest(a, 40, 0, 0).state, nullptr);  // A is now the most recent
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  DiskCache disk(capped, *f.model, f.pool);  // a restart: recency from the files' times
  disk.save(c, *sc);
  EXPECT_EQ(disk.entries(), 2u);
  EXPECT_LE(disk.bytes(), capped.max_bytes);
  EXPECT_NE(disk.load_deepest(a, 40, 0, 0).state, nullptr);
  EXPECT_EQ(disk.load_deepest(b, 40, 0, 0).state, nullptr);
  EXPECT_NE(disk.load_deepest(c, 40, 0, 0).state, nullptr);
}

TEST(DiskCache, UnwritableFolderIsAnErrorNamingIt) {
  TempDir cache;
  const fs::path file = cache.path / "a-file";
  std::ofstream(file) << "x";
  EngineOptions options;
  options.disk_cache.dir = (file / "sub").string();
  auto engine = Engine::create(load(fixture_dir("qwen35-dense-tiny")), nullptr, options);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.error().message.find(options.disk_cache.dir), std::string::npos) << engine.error().message;
}

}  // namespace
}  // namespace kapitsa::runtime
