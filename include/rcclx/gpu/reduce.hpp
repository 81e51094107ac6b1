// rcclx/gpu/reduce.hpp: warp and block sums/maxes across the threads of a group.
// rocPRIM on AMD, CUB on NVIDIA, a no-op on the single-thread host group.
//
//   using reduce = rcclx::gpu::block_reduce<float, 256>;
//   __shared__ reduce::storage_type tmp;
//   float total = reduce().sum(x, tmp);   // valid in every thread (broadcast)
#pragma once

#include "group.hpp"

#if RCCLX_BACKEND_HIP
#  include <rocprim/block/block_reduce.hpp>
#elif RCCLX_BACKEND_CUDA
#  include <cub/block/block_reduce.cuh>
#endif

RCCLX_NAMESPACE_BEGIN
namespace gpu {

namespace detail {
struct sum_op {
  template <class T>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE T operator()(const T& a, const T& b) const { return a + b; }
};
struct max_op {
  template <class T>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE T operator()(const T& a, const T& b) const { return a < b ? b : a; }
};
}  // namespace detail

#if RCCLX_BACKEND_GPU

// Reduction across a whole block of BlockThreads threads, result broadcast to every thread.
// storage_type goes in shared memory (the caller owns it, so primitives compose in one kernel).
template <class T, int BlockThreads>
class block_reduce {
#  if RCCLX_BACKEND_HIP
  using impl = ::rocprim::block_reduce<T, BlockThreads>;
  struct storage_impl {
    typename impl::storage_type reduce;
    T result;
  };
#  else
  using impl = ::cub::BlockReduce<T, BlockThreads>;
  struct storage_impl {
    typename impl::TempStorage reduce;
    T result;
  };
#  endif

 public:
  using storage_type = storage_impl;

  template <class Op>
  RCCLX_DEVICE T reduce(T x, storage_type& s, Op op) const {
    const int tid = block_group{}.thread_rank();
#  if RCCLX_BACKEND_HIP
    T out;
    impl().reduce(x, out, s.reduce, op);
#  else
    T out = impl(s.reduce).Reduce(x, op);
#  endif
    if (tid == 0) s.result = out;
    __syncthreads();
    out = s.result;
    __syncthreads();  // storage may be reused right after
    return out;
  }
  RCCLX_DEVICE T sum(T x, storage_type& s) const { return reduce(x, s, detail::sum_op{}); }
  RCCLX_DEVICE T max(T x, storage_type& s) const { return reduce(x, s, detail::max_op{}); }
};

#endif  // RCCLX_BACKEND_GPU

// Host backend: a block is one thread, so the reduction is the value itself.
template <class T>
struct thread_reduce {
  struct storage_type {};
  template <class Op>
  RCCLX_HOST_DEVICE T reduce(T x, storage_type&, Op) const { return x; }
  RCCLX_HOST_DEVICE T sum(T x, storage_type& s) const { return x; }
  RCCLX_HOST_DEVICE T max(T x, storage_type& s) const { return x; }
};

}  // namespace gpu
RCCLX_NAMESPACE_END
