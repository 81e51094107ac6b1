// ReduceScatter and Reduce for float, bf16, int32 and int64
// (engine_impl.hpp; nvcc compiles this file as engine_reduce_f32_bf16_i32_i64.cu).
#include "engine_impl.hpp"

namespace rcclx_torch {
namespace detail {

template struct reduce_of<float>;
template struct reduce_of<rcclx::bf16>;
template struct reduce_of<std::int32_t>;
template struct reduce_of<std::int64_t>;

}  // namespace detail
}  // namespace rcclx_torch
