// Kernels of the elementwise ops (add, SwiGLU, sigmoid gate, relu²): grid-stride loops, one element per
// step; every output element depends only on inputs at its own index, so in place is safe.
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void add_kernel(const float* a, const float* b, float* y, int64_t n) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = a[i] + b[i];
}

__global__ void silu_mul_kernel(const float* gate, const float* up, float* y, int64_t n) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float g = gate[i];
    y[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void mul_sigmoid_kernel(const float* x, const float* gate, float* y, int64_t R, int64_t C, bool broadcast) {
  pdl_trigger();
  pdl_wait();
  const int64_t n = R * C;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float g = broadcast ? gate[i / C] : gate[i];
    y[i] = x[i] / (1.0f + expf(-g));
  }
}

__global__ void relu_squared_kernel(const float* x, float* y, int64_t n) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = relu_squared_of(x[i]);
}

}  // namespace

void add(const float* a, const float* b, float* y, int64_t n, cudaStream_t s) {
  if (n > 0) launch(add_kernel, grid_for(n, kThreads), kThreads, s, a, b, y, n);
}
void silu_mul(const float* gate, const float* up, float* y, int64_t n, cudaStream_t s) {
  if (n > 0) launch(silu_mul_kernel, grid_for(n, kThreads), kThreads, s, gate, up, y, n);
}
void mul_sigmoid(const float* x, const float* gate, float* y, int64_t R, int64_t C, bool broadcast, cudaStream_t s) {
  if (R * C > 0) launch(mul_sigmoid_kernel, grid_for(R * C, kThreads), kThreads, s, x, gate, y, R, C, broadcast);
}
void relu_squared(const float* x, float* y, int64_t n, cudaStream_t s) {
  if (n > 0) launch(relu_squared_kernel, grid_for(n, kThreads), kThreads, s, x, y, n);
}

}  // namespace kapitsa::ops::cuda::kernels
