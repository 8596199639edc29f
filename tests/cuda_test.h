// For tests that need a GPU: skip visibly (with the reason: no CUDA backend built, no driver, no device)
// where there is none, and the load options of a model on cuda:0.
#pragma once

#include "models/model.h"
#include "ops/memory.h"

#include <gtest/gtest.h>

#define KAPITSA_SKIP_WITHOUT_GPU()                                                        \
  do {                                                                                    \
    if (!::kapitsa::ops::cuda_usable()) GTEST_SKIP() << "no CUDA device: " << ::kapitsa::ops::cuda_report(); \
    ASSERT_TRUE(::kapitsa::ops::select_device({::kapitsa::Device::cuda, 0}).ok());        \
  } while (0)

namespace kapitsa::testing {

inline models::LoadOptions on_cuda(models::LoadOptions o = {}) {
  o.device = Device::cuda;
  return o;
}

}  // namespace kapitsa::testing
