// The block geometry and names of GgmlType (ggml_type.h says why these are not inline).
#include "tensor/ggml_type.h"

namespace kapitsa {

std::optional<GgmlTypeInfo> ggml_type_info(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::f32: return GgmlTypeInfo{"F32", 1, 4};
    case GgmlType::f16: return GgmlTypeInfo{"F16", 1, 2};
    case GgmlType::bf16: return GgmlTypeInfo{"BF16", 1, 2};
    case GgmlType::f64: return GgmlTypeInfo{"F64", 1, 8};
    case GgmlType::i8: return GgmlTypeInfo{"I8", 1, 1};
    case GgmlType::i16: return GgmlTypeInfo{"I16", 1, 2};
    case GgmlType::i32: return GgmlTypeInfo{"I32", 1, 4};
    case GgmlType::i64: return GgmlTypeInfo{"I64", 1, 8};
    case GgmlType::q4_0: return GgmlTypeInfo{"Q4_0", 32, 18};
    case GgmlType::q4_1: return GgmlTypeInfo{"Q4_1", 32, 20};
    case GgmlType::q5_0: return GgmlTypeInfo{"Q5_0", 32, 22};
    case GgmlType::q5_1: return GgmlTypeInfo{"Q5_1", 32, 24};
    case GgmlType::q8_0: return GgmlTypeInfo{"Q8_0", 32, 34};
    case GgmlType::q8_1: return GgmlTypeInfo{"Q8_1", 32, 36};
    case GgmlType::q2_k: return GgmlTypeInfo{"Q2_K", 256, 84};
    case GgmlType::q3_k: return GgmlTypeInfo{"Q3_K", 256, 110};
    case GgmlType::q4_k: return GgmlTypeInfo{"Q4_K", 256, 144};
    case GgmlType::q5_k: return GgmlTypeInfo{"Q5_K", 256, 176};
    case GgmlType::q6_k: return GgmlTypeInfo{"Q6_K", 256, 210};
    case GgmlType::q8_k: return GgmlTypeInfo{"Q8_K", 256, 292};
    case GgmlType::iq2_xxs: return GgmlTypeInfo{"IQ2_XXS", 256, 66};
    case GgmlType::iq2_xs: return GgmlTypeInfo{"IQ2_XS", 256, 74};
    case GgmlType::iq3_xxs: return GgmlTypeInfo{"IQ3_XXS", 256, 98};
    case GgmlType::iq1_s: return GgmlTypeInfo{"IQ1_S", 256, 50};
    case GgmlType::iq4_nl: return GgmlTypeInfo{"IQ4_NL", 32, 18};
    case GgmlType::iq3_s: return GgmlTypeInfo{"IQ3_S", 256, 110};
    case GgmlType::iq2_s: return GgmlTypeInfo{"IQ2_S", 256, 82};
    case GgmlType::iq4_xs: return GgmlTypeInfo{"IQ4_XS", 256, 136};
    case GgmlType::iq1_m: return GgmlTypeInfo{"IQ1_M", 256, 56};
    case GgmlType::tq1_0: return GgmlTypeInfo{"TQ1_0", 256, 54};
    case GgmlType::tq2_0: return GgmlTypeInfo{"TQ2_0", 256, 66};
    case GgmlType::mxfp4: return GgmlTypeInfo{"MXFP4", 32, 17};
    case GgmlType::f8_e4m3_32: return GgmlTypeInfo{"F8_E4M3_32", 32, 36};
    case GgmlType::fp4_e2m1_32: return GgmlTypeInfo{"FP4_E2M1_32", 32, 24};
  }
  return std::nullopt;
}

std::string_view ggml_type_name(GgmlType t) {
  const auto info = ggml_type_info(static_cast<uint32_t>(t));
  return info ? info->name : "unknown";
}

}  // namespace kapitsa
