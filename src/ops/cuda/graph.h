// Internal to ops: what ops/step_graph.cpp needs from the CUDA runtime to capture a decode step as a
// CUDA graph and replay it (runtime.cpp). Two pieces:
// - The step's metadata mirror: a host byte range (the step's spans: ids, positions, slots, block
//   tables) copied to one device buffer once per step; an op given a host span inside it reads the
//   device copy (runtime.h upload / HostPack) instead of copying the span itself. A captured op then
//   reads fixed device addresses, whose bytes the next step's mirror copy refreshes.
// - Capture: the ops' stream records instead of running. Anything a replay could not repeat (a host
//   copy outside the mirror, a wait, scratch growth) marks the capture unusable: end_capture then
//   returns null and the caller runs the step eagerly. generation() changes whenever memory a graph
//   may point into (scratch, the mirror's device buffer) is reallocated: graphs of an older generation
//   must not be replayed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kapitsa::ops::cuda {

void set_mirror(const void* host, size_t bytes);  // queues the copy; replaces the last mirror
void clear_mirror();
// The device copy of host bytes inside the current mirror, writable (a kernel's result a later op of
// the step reads as a host span), or null.
void* mirror_device_copy(void* host, size_t bytes);
bool capturing();
void begin_capture();
void* end_capture();  // a cudaGraphExec_t, or null when the capture is unusable
const char* capture_failure();  // why the last capture was unusable
void launch_graph(void* exec);
void destroy_graph(void* exec);
uint64_t generation();

}  // namespace kapitsa::ops::cuda
