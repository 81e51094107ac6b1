// rcclx/core/float_types.hpp: the floating-point element types (float, rcclx::bf16, rcclx::fp16):
// what the fused stages, the tile AllReduce and the hierarchical collectives take.
//
//   static_assert(rcclx::core::is_float_type_v<T>, "T must be float, rcclx::bf16 or rcclx::fp16");
#pragma once

#include <type_traits>

#include "types.hpp"

RCCLX_NAMESPACE_BEGIN
namespace core {

template <class T>
inline constexpr bool is_float_type_v =
    std::is_same<T, float>::value || std::is_same<T, bf16>::value || std::is_same<T, fp16>::value;

}  // namespace core
RCCLX_NAMESPACE_END
