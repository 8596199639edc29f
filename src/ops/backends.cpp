// The registry of backends and the selection of one: a process-wide default (KAPITSA_BACKEND or
// set_backend, cpu otherwise) and a per-thread override (ScopedBackend). Adding a backend: one line
// in backends() below (see ops/backend.h).
#include "ops/backend.h"
#include "ops/cpu/cpu.h"
#include "ops/ref/ref.h"
#if KAPITSA_HAVE_CUDA
#include "ops/cuda/cuda.h"
#endif

#include <cstdlib>
#include <string>
#include <vector>

namespace kapitsa::ops {
namespace {

thread_local const BackendTable* t_selected = nullptr;

std::string names() {
  std::string s;
  for (const BackendTable* b : backends()) s += (s.empty() ? "" : ", ") + std::string(b->name);
  return s;
}

const BackendTable*& default_slot() {
  static const BackendTable* selected = [] {
    const char* env = std::getenv("KAPITSA_BACKEND");
    const std::string_view want = env != nullptr && *env != '\0' ? env : "cpu";
    const BackendTable* b = find_backend(want);
    KAPITSA_CHECK(b != nullptr, "KAPITSA_BACKEND={}: no such backend (registered: {})", want, names());
    return b;
  }();
  return selected;
}

}  // namespace

std::span<const BackendTable* const> backends() {
  static const std::vector<const BackendTable*> all = [] {
    std::vector<const BackendTable*> v;
    for (const BackendTable* b : {ref::backend(), cpu::backend()})  // ref first: the oracle
      if (b != nullptr) v.push_back(b);
#if KAPITSA_HAVE_CUDA
    if (const BackendTable* b = cuda::backend()) v.push_back(b);  // nullptr without a usable GPU
#endif
    return v;
  }();
  return all;
}

const BackendTable* find_backend(std::string_view name) {
  for (const BackendTable* b : backends())
    if (b->name == name) return b;
  return nullptr;
}

const BackendTable& current_backend() {
  const BackendTable* b = t_selected;
  return b != nullptr ? *b : *default_slot();
}

void set_backend(const BackendTable& b) { default_slot() = &b; }

void set_backend(Backend b) {
  const BackendTable* t = find_backend(b == Backend::ref ? "ref" : "cpu");
  KAPITSA_CHECK(t != nullptr, "set_backend: backend not registered");
  set_backend(*t);
}

ScopedBackend::ScopedBackend(const BackendTable* b) : previous_(t_selected) {
  KAPITSA_CHECK(b != nullptr, "ScopedBackend: no backend (find_backend found none?); registered: {}", names());
  t_selected = b;
}
ScopedBackend::ScopedBackend(const BackendTable& b) : ScopedBackend(&b) {}
ScopedBackend::~ScopedBackend() { t_selected = previous_; }

}  // namespace kapitsa::ops
