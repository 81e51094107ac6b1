// rcclx/gpu/reduce.hpp: warp and block sums/maxes across the threads of a group.
// rocPRIM on AMD, CUB on NVIDIA, a no-op on the single-thread host group.
//
//   using reduce = rcclx::gpu::block_reduce<float, 256>;
//   __shared__ reduce::storage_type tmp;
//   float total = reduce().sum(x, tmp);   // valid in every thread (broadcast)
#pragma once

#include "group.hpp"

#if RCCLX_EMULATE_THREADS
#  include <string>

#  include "../core/error.hpp"
#endif

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

#elif RCCLX_EMULATE_THREADS

// Emulated threads (host backend): every thread's value in storage, folded in thread order by
// thread 0, broadcast. The block must have exactly BlockThreads threads, as CUB's and rocPRIM's
// block reductions assume: any other size is refused (an rcclx::error naming both), never summed.
template <class T, int BlockThreads>
class block_reduce {
 public:
  struct storage_type {
    T v[BlockThreads];
    T result;
  };

  template <class Op>
  T reduce(T x, storage_type& s, Op op) const {
    const block_group g;
    const int n = g.size(), tid = g.thread_rank();
    if (n != BlockThreads)
      throw error(errc::invalid_argument, "rcclx::gpu::block_reduce<T, BlockThreads = " + std::to_string(BlockThreads) +
                                              ">: the block has " + std::to_string(n) +
                                              " threads (BlockThreads must be the launch's block size)");
    s.v[tid] = x;
    g.sync();
    if (tid == 0) {
      T a = s.v[0];
      for (int i = 1; i < BlockThreads; ++i) a = op(a, s.v[i]);
      s.result = a;
    }
    g.sync();
    const T out = s.result;
    g.sync();  // storage may be reused right after
    return out;
  }
  T sum(T x, storage_type& s) const { return reduce(x, s, detail::sum_op{}); }
  T max(T x, storage_type& s) const { return reduce(x, s, detail::max_op{}); }
};

#endif  // RCCLX_BACKEND_GPU / RCCLX_EMULATE_THREADS

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
