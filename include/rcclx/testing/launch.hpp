// rcclx/testing/launch.hpp: run a user's device functor as N emulated ranks in one process:
// on a GPU, one launch with num_ranks x blocks_per_rank blocks (all resident at once, checked
// against the occupancy API); on the host backend, one std::thread per (rank, block).
//
//   struct my_kernel {
//     rcclx::core::peer_table<float, 8> tables[8];
//     template <class Group>
//     RCCLX_HOST_DEVICE void operator()(const Group& g, rcclx::testing::launch_index ix) const {
//       const auto& t = tables[ix.rank];   // this rank's view
//       ...
//     }
//   };
//   rcclx::testing::launch_emulated(num_ranks, blocks_per_rank, 256, my_kernel{...});
//
// The functor must be trivially copyable (it is a kernel argument on GPUs). A functor may declare
// `static constexpr int max_threads_per_block = K;`: its kernel is then compiled with
// __launch_bounds__(K), so the compiler keeps registers within what K threads can have (without a
// bound a large kernel may take more than a 512-thread block can be given, and fail to launch).
// It may also declare `static constexpr int min_blocks_per_multiprocessor = M;` (with
// max_threads_per_block): __launch_bounds__(K, M), so the compiler keeps registers low enough for M
// such blocks per SM (CUDA) / M waves per SIMD (HIP: one wave per SIMD per 256-thread block) to be
// resident, e.g. to give a fused kernel the occupancy of the plain kernel it extends.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../gpu/group.hpp"
#include "../gpu/host_blocks.hpp"
#include "../gpu/runtime.hpp"
#include "../kernel/launch.hpp"
#include "emulated_world.hpp"

RCCLX_NAMESPACE_BEGIN
namespace testing {

// Per-rank buffers of an emulated call, passed to a kernel by value: in[r] and out[r] are rank r's
// input and output (emulated_peers::device_buffers()).
template <class T, int MaxRanks>
struct rank_buffers {
  const T* in[MaxRanks];
  T* out[MaxRanks];
};

struct launch_index {
  int rank;             // emulated rank of this block
  int block;            // block index within the rank, in [0, num_blocks)
  int num_blocks;       // blocks per rank
  int num_ranks;
};

namespace detail {
// F's bounds (0: none declared): static constexpr int max_threads_per_block, min_blocks_per_multiprocessor.
template <class F>
using declared_max_threads = std::integral_constant<int, F::max_threads_per_block>;
template <class F>
using declared_min_blocks = std::integral_constant<int, F::min_blocks_per_multiprocessor>;
template <class F>
using max_threads_of = kernel::declared_or<declared_max_threads, F, 0>;
template <class F>
using min_blocks_of = kernel::declared_or<declared_min_blocks, F, 0>;


#if RCCLX_BACKEND_GPU
template <class F>
RCCLX_DEVICE RCCLX_FORCEINLINE void run_emulated_block(const F& f, int num_ranks, int blocks_per_rank) {
  launch_index ix;
  ix.rank = static_cast<int>(blockIdx.z);  // ranks in z: gridDim.x is one rank's grid
  ix.block = static_cast<int>(blockIdx.x);
  ix.num_blocks = blocks_per_rank;
  ix.num_ranks = num_ranks;
  f(gpu::block_group{}, ix);
}
template <class F>
RCCLX_GLOBAL void emulated_kernel(F f, int num_ranks, int blocks_per_rank) {
  run_emulated_block(f, num_ranks, blocks_per_rank);
}
template <class F, int MaxThreads>
RCCLX_GLOBAL void __launch_bounds__(MaxThreads) emulated_kernel_bounded(F f, int num_ranks, int blocks_per_rank) {
  run_emulated_block(f, num_ranks, blocks_per_rank);
}
template <class F, int MaxThreads, int MinBlocks>
RCCLX_GLOBAL void __launch_bounds__(MaxThreads, MinBlocks)
    emulated_kernel_occupancy(F f, int num_ranks, int blocks_per_rank) {
  run_emulated_block(f, num_ranks, blocks_per_rank);
}
// The kernel launch_emulated uses for F.
template <class F>
constexpr auto emulated_kernel_for() {
  constexpr int bound = max_threads_of<F>::value, min_blocks = min_blocks_of<F>::value;
  if constexpr (bound > 0 && min_blocks > 0) return &emulated_kernel_occupancy<F, bound, min_blocks>;
  else if constexpr (bound > 0) return &emulated_kernel_bounded<F, bound>;
  else return &emulated_kernel<F>;
}
#endif
}  // namespace detail

// Largest blocks_per_rank that keeps every block of every rank resident (GPU), or a small
// thread count on the host. Emulated ranks wait on each other inside one launch, so a block
// that is not resident would deadlock (bounded: it would time out).
template <class F>
inline int max_blocks_per_rank(int num_ranks, int threads_per_block) {
#if RCCLX_BACKEND_GPU
  constexpr int bound = detail::max_threads_of<F>::value;
  if (bound > 0 && threads_per_block > bound) return 0;  // the kernel cannot run blocks this large
  return gpu::max_resident_blocks(detail::emulated_kernel_for<F>(), threads_per_block) / num_ranks;
#else
  (void)threads_per_block;
  (void)num_ranks;
  return 4;
#endif
}

template <class F>
inline void launch_emulated(int num_ranks, int blocks_per_rank, int threads_per_block, const F& f,
                            gpu::stream_t stream = gpu::stream_t{}) {
  static_assert(std::is_trivially_copyable<F>::value, "an emulated kernel functor must be trivially copyable");
  static_assert(detail::min_blocks_of<F>::value == 0 || detail::max_threads_of<F>::value > 0,
                "min_blocks_per_multiprocessor needs max_threads_per_block");
  if (num_ranks < 1 || blocks_per_rank < 1)
    throw error(errc::invalid_argument, "launch_emulated: num_ranks and blocks_per_rank must be >= 1");
#if RCCLX_BACKEND_GPU
  const int limit = max_blocks_per_rank<F>(num_ranks, threads_per_block);
  if (blocks_per_rank > limit)
    throw error(errc::invalid_argument,
                "launch_emulated: " + std::to_string(num_ranks) + " ranks x " + std::to_string(blocks_per_rank) +
                    " blocks of " + std::to_string(threads_per_block) +
                    " threads cannot all be resident on this GPU (at most " + std::to_string(limit) +
                    " blocks per rank)");
  constexpr int bound = detail::max_threads_of<F>::value, min_blocks = detail::min_blocks_of<F>::value;
  const dim3 grid(static_cast<unsigned>(blocks_per_rank), 1u, static_cast<unsigned>(num_ranks));
  if constexpr (bound > 0 && min_blocks > 0)
    detail::emulated_kernel_occupancy<F, bound, min_blocks><<<grid, threads_per_block, 0, stream>>>(f, num_ranks,
                                                                                                  blocks_per_rank);
  else if constexpr (bound > 0)
    detail::emulated_kernel_bounded<F, bound><<<grid, threads_per_block, 0, stream>>>(f, num_ranks, blocks_per_rank);
  else
    detail::emulated_kernel<F><<<grid, threads_per_block, 0, stream>>>(f, num_ranks, blocks_per_rank);
  gpu::check_launch("launch_emulated");
#else
  (void)threads_per_block;
  (void)stream;
  // Every (rank, block) on its own pooled thread (gpu/host_blocks.hpp); only this small trampoline is
  // compiled per F, not a thread launch. The blocks are one grid of blocks_per_rank per rank, so a
  // block's gpu::block_id() and gpu::grid_blocks() are those of its own rank's grid.
  struct grid {
    const F* f;
    int num_ranks, blocks_per_rank;
  } const g{&f, num_ranks, blocks_per_rank};
  gpu::run_host_blocks(
      num_ranks * blocks_per_rank,
      [](const void* p, int i) {
        const grid& x = *static_cast<const grid*>(p);
        (*x.f)(gpu::thread_group{}, launch_index{i / x.blocks_per_rank, i % x.blocks_per_rank, x.blocks_per_rank,
                                                 x.num_ranks});
      },
      &g, blocks_per_rank);
#endif
}

// f on every rank of `world` (launch_emulated with world.num_ranks()), checked before and after:
// refuses to launch (invalid_argument "the pads still hold an earlier error ... reset them") when a
// pad holds an error record, waits for the launch, then throws every recorded error, the root cause
// first (emulated_world::throw_if_error).
//   rcclx::testing::launch_emulated(world, blocks_per_rank, 256, my_kernel{...});
template <int MaxRanks, class F>
inline void launch_emulated(const emulated_world<MaxRanks>& world, int blocks_per_rank, int threads_per_block,
                            const F& f, gpu::stream_t stream = gpu::stream_t{}) {
  world.check_clean("launch_emulated");
  launch_emulated(world.num_ranks(), blocks_per_rank, threads_per_block, f, stream);
  gpu::device_synchronize();
  world.throw_if_error();
}

// One rank of an emulated functor in a real job (a process per rank, e.g. rcclx::host::run_ranks):
// the blocks of rank `rank` only, ix.rank = rank and ix.num_ranks = num_ranks, so the functor you
// unit-tested on emulated ranks runs unchanged with one rank per process. Fills the GPU alone, so
// residency is checked for one rank (blocks_per_rank <= max_blocks_per_rank<F>(1, threads)); host
// backend: one thread per block, joined before returning.
namespace detail {
// A wrapper of F declares F's bounds (if any), so its kernel is compiled as F's would be.
template <class F, int MaxThreads = max_threads_of<F>::value, int MinBlocks = min_blocks_of<F>::value>
struct bounds_like {
  static constexpr int max_threads_per_block = MaxThreads;
  static constexpr int min_blocks_per_multiprocessor = MinBlocks;
};
template <class F, int MaxThreads>
struct bounds_like<F, MaxThreads, 0> {
  static constexpr int max_threads_per_block = MaxThreads;
};
template <class F>
struct bounds_like<F, 0, 0> {};

template <class F>
struct as_rank : bounds_like<F> {
  F f;
  int rank, num_ranks;
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void operator()(const Group& g, launch_index ix) const {
    ix.rank = rank;
    ix.num_ranks = num_ranks;
    f(g, ix);
  }
};

template <class F>
struct without_rank : bounds_like<F> {
  F f;
  int absent;
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void operator()(const Group& g, launch_index ix) const {
    if (ix.rank != absent) f(g, ix);
  }
};
}  // namespace detail

template <class F>
inline void launch_rank(int rank, int num_ranks, int blocks_per_rank, int threads_per_block, const F& f,
                        gpu::stream_t stream = gpu::stream_t{}) {
  if (num_ranks < 1 || rank < 0 || rank >= num_ranks)
    throw error(errc::invalid_argument, "launch_rank: rank = " + std::to_string(rank) + " is outside [0, num_ranks = " +
                                            std::to_string(num_ranks) + ")");
  detail::as_rank<F> w{};
  w.f = f;
  w.rank = rank;
  w.num_ranks = num_ranks;
  launch_emulated(1, blocks_per_rank, threads_per_block, w, stream);
}

// F on every emulated rank but `absent`, whose blocks return at once: the others wait for a peer
// that never arrives (its flags, packets or barrier arrivals), which is how a timeout is tested.
//   rcclx::testing::launch_emulated(n, blocks, threads, rcclx::testing::without_rank(my_kernel{...}, 2));
template <class F>
detail::without_rank<F> without_rank(const F& f, int absent) {
  detail::without_rank<F> w{};
  w.f = f;
  w.absent = absent;
  return w;
}

}  // namespace testing
RCCLX_NAMESPACE_END
