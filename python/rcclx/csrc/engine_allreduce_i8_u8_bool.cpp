// AllReduce for int8, uint8 and bool
// (engine_impl.hpp; nvcc compiles this file as engine_allreduce_i8_u8_bool.cu).
#include "engine_impl.hpp"

namespace rcclx_torch {
namespace detail {

template struct allreduce_of<std::int8_t>;
template struct allreduce_of<std::uint8_t>;
template struct allreduce_of<bool>;

}  // namespace detail
}  // namespace rcclx_torch
