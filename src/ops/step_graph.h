// Decode steps as CUDA graphs, for the code above the ops (models): a step's ops are captured once per
// shape and replayed, so a small decode step costs one launch instead of hundreds. What this needs
// from the caller: the step's host metadata (ids, positions, slots, block tables) written into one host
// range before any op runs, mirrored to the device once per step (mirror_step_metadata), so the ops read
// fixed device addresses whose bytes change from step to step; the same workspace addresses for the
// same shape; and a key that changes whenever anything a captured op baked in changes (shape, pools'
// and workspace's memory, generation(), attention_key_bucket of the longest sequence). A capture that
// met something a replay cannot repeat (a host span outside the mirror, a wait) yields no graph: the
// caller runs that step eagerly. On cpu, or with graphs switched off, every call here is a no-op.
// Steps beyond plain decode (speculative verification: several rows a sequence, checkpoints, hidden
// rows; the MTP head's steps) are captured too unless KAPITSA_CUDA_SPEC_GRAPHS=0: faster for every
// proposer since the engine pads a GPU's drafts to one length (docs/speculative-decoding.md).
#pragma once

#include "tensor/tensor.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace kapitsa::ops {

// Whether steps on `device` may be captured: cuda only, and on unless the environment sets
// KAPITSA_CUDA_GRAPHS=0 or set_step_graphs(false) was called (tests compare both ways).
bool step_graphs_enabled(Device device);
void set_step_graphs(bool enabled);
// Whether steps beyond plain decode may be captured too: step_graphs_enabled, unless the environment sets
// KAPITSA_CUDA_SPEC_GRAPHS=0 or set_spec_step_graphs(false) was called.
bool spec_step_graphs_enabled(Device device);
void set_spec_step_graphs(bool enabled);

// What a captured step computes (the launch counters tell them apart). decode: one row a sequence,
// logits only. verify: any other trunk step of a few rows (speculative verification: several rows a
// sequence, checkpoints, hidden rows for the MTP head). mtp_head: a step of the MTP head. greedy_chain:
// a draft model's k greedy steps at once (Model::forward_greedy_chain).
enum class StepKind { decode, verify, mtp_head, greedy_chain };

// Host bytes [data, data + bytes) copied to the device now (stream-ordered); until clear_step_metadata,
// an op given a host span inside them reads that copy instead of copying the span (cpu: nothing).
void mirror_step_metadata(Device device, const void* data, size_t bytes);
void clear_step_metadata(Device device);
// Host ids inside the mirrored metadata as an i32 tensor ops may write: on cuda its device copy, on cpu
// the span itself. How one op's result becomes a later op's span argument within a step (a chained
// draft's next ids, written by argmax_rows, read by the next step's embedding) with no host round trip.
Tensor step_metadata_tensor(Device device, std::span<int32_t> ids);

// Changes whenever device memory a captured op may point into is reallocated (op scratch, the mirror).
uint64_t step_graph_generation(Device device);

// The split-K shape of batched attention depends on the longest sequence's key count only through this
// bucket (a power of two, at least 256), so it changes rarely while decoding.
inline int64_t attention_key_bucket(int64_t max_keys) {
  int64_t b = 256;
  while (b < max_keys) b *= 2;
  return b;
}

// One captured step.
class StepGraph {
 public:
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;
  void launch() const;  // queued on the ops' stream

 private:
  friend std::unique_ptr<StepGraph> end_step_capture(Device device, StepKind kind);
  StepGraph(void* exec, StepKind kind) : exec_(exec), kind_(kind) {}
  void* exec_;
  StepKind kind_;
};

// Ops called between begin and end are recorded, not run. end_step_capture returns null when the
// capture cannot be replayed (why: step_capture_failure()); the step must then be run eagerly.
void begin_step_capture(Device device);
std::unique_ptr<StepGraph> end_step_capture(Device device, StepKind kind = StepKind::decode);
const char* step_capture_failure();
// True while a capture is being recorded (code that would read device results on the host must not).
bool capturing_step(Device device);
// Graph launches so far in this process, all or of one kind (tests check that a run replayed graphs,
// or did not).
uint64_t step_graph_launches();
uint64_t step_graph_launches(StepKind kind);

}  // namespace kapitsa::ops
