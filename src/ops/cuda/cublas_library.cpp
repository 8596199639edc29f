// cuBLAS opened on first use (dlopen) instead of linked. Linked, libcublas and libcublasLt (~600 MB)
// are loaded and relocated at every start of every program that contains the CUDA backend — about
// 0.5 s of CPU and 2 s of wall time before main on our CI machine, for `kapitsa --help`, for a
// CPU-only run and for each of the hundreds of test processes — and a binary built with CUDA would not
// start at all on a machine without cuBLAS. The cuBLAS functions the backend calls are defined here
// with cuBLAS's own prototypes (its header checks them) and forward to the library, opened the first
// time one of them is called. A cuBLAS function used elsewhere and not forwarded here is a link error.
#include "base/check.h"
#include "ops/cuda/runtime.h"

#include <dlfcn.h>

#include <string>

namespace kapitsa::ops::cuda::detail {
namespace {

const std::string& soname() {
  static const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  return name;
}

struct Library {
  void* handle = nullptr;
  std::string error;  // why it could not be opened
};

// The soname through the loader's search path first (LD_LIBRARY_PATH, ld.so.cache), then in the
// toolkit folder this build was made with (the link-time rpath it replaces).
const Library& library() {
  static const Library lib = [] {
    Library l;
    l.handle = dlopen(soname().c_str(), RTLD_NOW | RTLD_LOCAL);
    if (l.handle) return l;
    const std::string first_error = dlerror();
    l.handle = dlopen((std::string(KAPITSA_CUDA_LIBRARY_DIR) + "/" + soname()).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!l.handle)
      l.error = fmt::format("cuBLAS ({}, from the CUDA {} toolkit) cannot be loaded: {}; install it or add its folder "
                            "to LD_LIBRARY_PATH",
                            soname(), CUBLAS_VER_MAJOR, first_error);
    return l;
  }();
  return lib;
}

template <class Function>
Function* symbol(const char* name) {
  const Library& lib = library();
  KAPITSA_CHECK(lib.handle != nullptr, "{}", lib.error);  // select_device reports this before any op runs
  void* address = dlsym(lib.handle, name);
  KAPITSA_CHECK(address != nullptr, "cuda: {} has no function {}", soname(), name);
  return reinterpret_cast<Function*>(address);
}

}  // namespace

std::string cublas_load_error() { return library().error; }

}  // namespace kapitsa::ops::cuda::detail

using kapitsa::ops::cuda::detail::symbol;

// Each looks its function up once; the names are cuBLAS's exported ones (cublas_v2.h maps
// cublasCreate to cublasCreate_v2 and so on).
extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  static auto* f = symbol<decltype(cublasCreate_v2)>("cublasCreate_v2");
  return f(handle);
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  static auto* f = symbol<decltype(cublasSetStream_v2)>("cublasSetStream_v2");
  return f(handle, stream);
}

cublasStatus_t CUBLASWINAPI cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  static auto* f = symbol<decltype(cublasSetWorkspace_v2)>("cublasSetWorkspace_v2");
  return f(handle, workspace, bytes);
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  static auto* f = symbol<decltype(cublasSetMathMode)>("cublasSetMathMode");
  return f(handle, mode);
}

const char* CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  static auto* f = symbol<decltype(cublasGetStatusName)>("cublasGetStatusName");
  return f(status);
}

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  static auto* f = symbol<decltype(cublasGetStatusString)>("cublasGetStatusString");
  return f(status);
}

cublasStatus_t CUBLASWINAPI cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                           int m, int n, int k, const float* alpha, const float* A, int lda,
                                           const float* B, int ldb, const float* beta, float* C, int ldc) {
  static auto* f = symbol<decltype(cublasSgemm_v2)>("cublasSgemm_v2");
  return f(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                         int lda, const void* B, cudaDataType Btype, int ldb, const void* beta, void* C,
                                         cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                         cublasGemmAlgo_t algo) {
  // The C function (cublas_api.h also declares a C++ overload taking cudaDataType as the compute type).
  using CFunction = cublasStatus_t(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                   const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                   cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  static auto* f = symbol<CFunction>("cublasGemmEx");
  return f(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc, computeType, algo);
}

}  // extern "C"
