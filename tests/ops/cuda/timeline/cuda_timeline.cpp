// cuda_timeline: a kernel timeline of any CUDA process, for the GPU machine, which has no Nsight Systems.
// Built as a shared library and loaded by the CUDA driver through its injection hook:
//   CUDA_INJECTION64_PATH=libcuda_timeline.so KAPITSA_TIMELINE=trace.csv kapitsa run --device cuda …
// It records, through CUPTI's activity API, every kernel, memcpy and memset as the GPU ran them (inside
// CUDA graphs too: each record names its graph and node), and writes them at exit as CSV rows
//   kind,start_ns,end_ns,graph_id,graph_node_id,stream,name
// Nsight Compute times kernels one at a time; this shows the gaps between them in a real run
// (tests/ops/cuda/cuda_timeline.py reads the file).
#include <cupti.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Row {
  char kind;  // 'K' kernel, 'C' memcpy, 'S' memset
  uint64_t start, end, graph_node;
  uint32_t graph, stream;
  std::string name;
};

std::mutex rows_mu;
std::vector<Row>* rows = nullptr;  // never freed: written by the atexit hook
constexpr size_t kBufferBytes = size_t{8} << 20;

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  std::fprintf(stderr, "cuda_timeline: %s failed: %s\n", what, text ? text : "?");
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<Row> got;
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        got.push_back({'K', k->start, k->end, k->graphNodeId, k->graphId, k->streamId, k->name ? k->name : "?"});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        got.push_back({'C', m->start, m->end, m->graphNodeId, m->graphId, m->streamId,
                       "memcpy kind " + std::to_string(m->copyKind) + " " + std::to_string(m->bytes) + " B"});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        got.push_back({'S', m->start, m->end, m->graphNodeId, m->graphId, m->streamId,
                       "memset " + std::to_string(m->bytes) + " B"});
        break;
      }
      default: break;
    }
  }
  std::free(buffer);
  std::lock_guard lock(rows_mu);
  for (Row& r : got) rows->push_back(std::move(r));
}

void write_rows() {
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("KAPITSA_TIMELINE");
  FILE* f = std::fopen(path ? path : "cuda_timeline.csv", "w");
  if (f == nullptr) {
    std::perror("cuda_timeline: cannot write the timeline");
    return;
  }
  std::lock_guard lock(rows_mu);
  std::fprintf(f, "kind,start_ns,end_ns,graph_id,graph_node_id,stream,name\n");
  for (const Row& r : *rows)
    std::fprintf(f, "%c,%llu,%llu,%u,%llu,%u,\"%s\"\n", r.kind, static_cast<unsigned long long>(r.start),
                 static_cast<unsigned long long>(r.end), r.graph, static_cast<unsigned long long>(r.graph_node),
                 r.stream, r.name.c_str());
  std::fclose(f);
  std::fprintf(stderr, "cuda_timeline: %zu records written to %s\n", rows->size(), path ? path : "cuda_timeline.csv");
}

}  // namespace

// Called by the CUDA driver when CUDA_INJECTION64_PATH names this library.
extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  rows = new std::vector<Row>();
  rows->reserve(1 << 20);
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernels");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable memcpy");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable memset");
  std::atexit(write_rows);
  return 1;
}
