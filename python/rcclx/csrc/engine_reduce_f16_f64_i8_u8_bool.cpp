// ReduceScatter and Reduce for fp16, float64, int8, uint8 and bool
// (engine_impl.hpp; nvcc compiles this file as engine_reduce_f16_f64_i8_u8_bool.cu).
#include "engine_impl.hpp"

namespace rcclx_torch {
namespace detail {

template struct reduce_of<rcclx::fp16>;
template struct reduce_of<double>;
template struct reduce_of<std::int8_t>;
template struct reduce_of<std::uint8_t>;
template struct reduce_of<bool>;

}  // namespace detail
}  // namespace rcclx_torch
