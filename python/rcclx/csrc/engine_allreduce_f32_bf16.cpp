// AllReduce for float and bf16, the types that also build its low-precision path
// (engine_impl.hpp; nvcc compiles this file as engine_allreduce_f32_bf16.cu).
#include "engine_impl.hpp"

namespace rcclx_torch {
namespace detail {

template struct allreduce_of<float>;
template struct allreduce_of<rcclx::bf16>;

}  // namespace detail
}  // namespace rcclx_torch
