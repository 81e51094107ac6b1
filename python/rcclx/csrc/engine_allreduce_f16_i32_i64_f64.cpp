// AllReduce for fp16, int32, int64 and float64
// (engine_impl.hpp; nvcc compiles this file as engine_allreduce_f16_i32_i64_f64.cu).
#include "engine_impl.hpp"

namespace rcclx_torch {
namespace detail {

template struct allreduce_of<rcclx::fp16>;
template struct allreduce_of<std::int32_t>;
template struct allreduce_of<std::int64_t>;
template struct allreduce_of<double>;

}  // namespace detail
}  // namespace rcclx_torch
