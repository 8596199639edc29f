// Tests of the backend table (ops/backend.h, ops/backends.cpp): the registry, process-wide and
// per-thread selection, the argument checks in front of the table (one place for every backend), and
// the instantiation of every TEST_P(OnBackend, ...) over the registered backends other than ref.
#include "op_test_helpers.h"

#include "ops/cpu/cpu.h"

#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <thread>

namespace kapitsa::ops {
namespace {

INSTANTIATE_TEST_SUITE_P(Backends, OnBackend, ::testing::ValuesIn(test::backends_under_test()),
                         [](const ::testing::TestParamInfo<const BackendTable*>& info) {
                           return std::string(info.param->name);
                         });

TEST(Backends, RegistryListsRefFirstAndCpu) {
  ASSERT_GE(backends().size(), 2u);
  EXPECT_EQ(backends()[0]->name, "ref");
  ASSERT_NE(find_backend("cpu"), nullptr);
  EXPECT_EQ(find_backend("cpu")->name, "cpu");
  EXPECT_EQ(find_backend("no-such-backend"), nullptr);
  for (const BackendTable* b : backends()) {
    EXPECT_EQ(b, find_backend(b->name));
    // Every host backend fills every entry.
    if (b->device == Device::cpu) {
#define KAPITSA_OP(op) EXPECT_NE(b->op, nullptr) << b->name << " lacks " #op;
#include "ops/op_names.inc"
#undef KAPITSA_OP
    }
  }
}

TEST(Backends, ScopedSelectionNestsAndIsPerThread) {
  const BackendTable& outer = current_backend();
  {
    ScopedBackend a(find_backend("ref"));
    EXPECT_EQ(current_backend().name, "ref");
    {
      ScopedBackend b(*find_backend("cpu"));
      EXPECT_EQ(current_backend().name, "cpu");
      std::string seen;
      std::thread([&] { seen = current_backend().name; }).join();
      EXPECT_EQ(seen, outer.name);  // another thread keeps the process default
    }
    EXPECT_EQ(current_backend().name, "ref");
  }
  EXPECT_EQ(&current_backend(), &outer);
}

TEST(Backends, SetBackendChangesTheDefault) {
  const BackendTable& before = current_backend();
  set_backend(Backend::ref);
  EXPECT_EQ(current_backend().name, "ref");
  set_backend(before);
  EXPECT_EQ(&current_backend(), &before);
}

// A table with one entry: the others fail with a message naming the op and the backend.
TEST(Backends, MissingEntryIsAClearError) {
  test::threadsafe_death_tests();
  BackendTable partial{"partial", Device::cpu};
  partial.add = find_backend("ref")->add;
  float a[2] = {1, 2}, y[2] = {};
  const Tensor ta(DType::f32, {2}, a), ty(DType::f32, {2}, y);
  ScopedBackend on(partial);
  add(ta, ta, ty);
  EXPECT_EQ(y[1], 4.0f);
  EXPECT_DEATH(relu_squared(ta, ty), "op relu_squared is not implemented by backend partial");
}

// Checks run in front of the table, whatever the backend: a device mismatch, a wrong dtype, a wrong shape.
TEST(Backends, ArgumentsAreCheckedBeforeTheTable) {
  test::threadsafe_death_tests();
  BackendTable device_only{"gpu-like", Device::cuda};
  float a[4] = {}, y[4] = {};
  const Tensor ta(DType::f32, {2, 2}, a), ty(DType::f32, {2, 2}, y);
  {
    ScopedBackend on(device_only);
    EXPECT_DEATH(add(ta, ta, ty), "add: a is on cpu, backend gpu-like runs on cuda");
  }
  for (const BackendTable* b : backends()) {
    if (b->device != Device::cpu) continue;  // host tensors: a device backend stops at "is on cpu" first
    ScopedBackend on(b);
    EXPECT_DEATH(add(ta, Tensor(DType::f16, {2, 2}, a), ty), "add: b must be F32");
    EXPECT_DEATH(matmul(ta, Linear(Tensor(DType::f32, {3, 3}, a)), ty), "matmul: x \\[2, 2\\] does not match w \\[3, 3\\]");
    const std::vector<int32_t> ids = {0, 2};
    EXPECT_DEATH(embedding(Linear(ta), ids, ty), "embedding: id 2 at 1 outside \\[0, 2\\)");
  }
}

// The level the cpu backend runs, against an independent source: the flags the kernel lists in
// /proc/cpuinfo (what the CPU has and the OS enabled; x86-64 "flags", AArch64 "Features"), or the level
// KAPITSA_TEST_CPU_LEVEL names — what scripts/test-aarch64.sh knows of the CPU model qemu-aarch64
// emulates (qemu-user shows the host's /proc/cpuinfo).
TEST(CpuLevels, BestLevelIsWhatProcCpuinfoLists) {
  const cpu::Level top = std::end(cpu::kLevels)[-1];
  if (const char* env = std::getenv("KAPITSA_TEST_CPU_LEVEL"); env != nullptr && *env != '\0') {
    EXPECT_EQ(cpu::level_name(cpu::best_level()), env);
    EXPECT_EQ(cpu::missing_features(cpu::best_level()), "");
    if (cpu::best_level() != top) {
      EXPECT_NE(cpu::missing_features(top), "");
    }
    return;
  }
#if defined(__aarch64__)
  const char* flags_key = "Features";
#else
  const char* flags_key = "flags";
#endif
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(in, line))
    if (line.rfind(flags_key, 0) == 0) {
      flags = " " + line.substr(line.find(':') + 1) + " ";
      break;
    }
  if (flags.empty()) GTEST_SKIP() << "no " << flags_key << " line in /proc/cpuinfo";
  const auto has = [&](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (flags.find(" " + std::string(n) + " ") == std::string::npos) return false;
    return true;
  };
#if defined(__x86_64__)
  // Not "abm" (LZCNT), which the dispatcher also needs: some hypervisors' guests do not list it.
  const bool v3 = has({"avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "movbe"});
  const bool v4 = v3 && has({"avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512_vnni"});
  const bool vnni = v3 && has({"avx_vnni"});
  const auto runs = [&](cpu::Level l) {
    return l == cpu::Level::avx512 ? v4 : l == cpu::Level::avxvnni ? vnni : l == cpu::Level::avx2 ? v3 : true;
  };
  // avxvnni is not below avx512 (cpu.h): the CPU runs it exactly when it lists avx_vnni beside x86-64-v3.
  EXPECT_EQ(cpu::missing_features(cpu::Level::avxvnni).empty(), vnni) << flags;
#elif defined(__aarch64__) && defined(__linux__)
  const auto runs = [&](cpu::Level l) {
    return l == cpu::Level::i8mm ? has({"asimddp", "i8mm"}) : l == cpu::Level::dotprod ? has({"asimddp"}) : true;
  };
#else
  const auto runs = [](cpu::Level) { return true; };  // the baseline only
#endif
  // The last level in the list that this build compiled (KAPITSA_CPU_LEVELS may leave some out) and the CPU runs.
  cpu::Level want = cpu::Level::baseline;
  for (cpu::Level l : cpu::kLevels)
    if (cpu::level_compiled(l) && runs(l)) want = l;
  EXPECT_EQ(cpu::level_name(cpu::best_level()), cpu::level_name(want)) << flags_key << ":" << flags;
  EXPECT_EQ(cpu::missing_features(cpu::best_level()), "");
  if (!runs(top)) {
    EXPECT_NE(cpu::missing_features(top), "");
  }
}

// Every level the CPU runs has its own table (the selected one is "cpu"), no other level has one.
TEST(CpuLevels, EachLevelTheCpuRunsHasATable) {
  EXPECT_EQ(cpu::backend(), find_backend("cpu"));
  EXPECT_EQ(cpu::backend_for(cpu::selected_level()), cpu::backend());
  for (cpu::Level l : cpu::kLevels) {
    const BackendTable* t = cpu::backend_for(l);
    const bool runs = cpu::level_compiled(l) && cpu::missing_features(l).empty();
    ASSERT_EQ(t != nullptr, runs) << cpu::level_name(l);
    if (t == nullptr) continue;
    EXPECT_EQ(cpu::level_of(*t), l);
    EXPECT_EQ(t->name, l == cpu::selected_level() ? "cpu" : "cpu_" + std::string(cpu::level_name(l)));
    // Two levels never share a kernel: each table points into its own copy.
    if (l != cpu::Level::baseline) {
      EXPECT_NE(t->matmul, cpu::backend_for(cpu::Level::baseline)->matmul) << cpu::level_name(l);
    }
  }
  EXPECT_FALSE(cpu::level_of(*find_backend("ref")).has_value());
}

}  // namespace
}  // namespace kapitsa::ops
