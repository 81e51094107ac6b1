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
// The functor must be trivially copyable (it is a kernel argument on GPUs).
#pragma once

#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "../gpu/group.hpp"
#include "../gpu/runtime.hpp"

RCCLX_NAMESPACE_BEGIN
namespace testing {

struct launch_index {
  int rank;             // emulated rank of this block
  int block;            // block index within the rank, in [0, num_blocks)
  int num_blocks;       // blocks per rank
  int num_ranks;
};

namespace detail {
// A functor may declare `static constexpr int max_threads_per_block = N;`: its kernel is then
// compiled with __launch_bounds__(N) (the register budget of N threads), as a ready-made kernel
// launched with N threads would be.
template <class F, class = void>
struct max_threads_of {
  static constexpr int value = 0;  // no bound
};
template <class F>
struct max_threads_of<F, std::void_t<decltype(F::max_threads_per_block)>> {
  static constexpr int value = F::max_threads_per_block;
};
}  // namespace detail

#if RCCLX_BACKEND_GPU
namespace detail {
template <class F>
RCCLX_DEVICE RCCLX_FORCEINLINE void emulated_body(const F& f, int num_ranks, int blocks_per_rank) {
  launch_index ix;
  ix.rank = static_cast<int>(blockIdx.x) / blocks_per_rank;
  ix.block = static_cast<int>(blockIdx.x) % blocks_per_rank;
  ix.num_blocks = blocks_per_rank;
  ix.num_ranks = num_ranks;
  f(gpu::block_group{}, ix);
}
template <class F>
RCCLX_GLOBAL void emulated_kernel(F f, int num_ranks, int blocks_per_rank) {
  emulated_body(f, num_ranks, blocks_per_rank);
}
template <class F, int MaxThreads>
RCCLX_GLOBAL void __launch_bounds__(MaxThreads) emulated_kernel_bounded(F f, int num_ranks, int blocks_per_rank) {
  emulated_body(f, num_ranks, blocks_per_rank);
}
template <class F>
inline auto emulated_kernel_of() {
  if constexpr (max_threads_of<F>::value > 0) return &emulated_kernel_bounded<F, max_threads_of<F>::value>;
  else return &emulated_kernel<F>;
}
}  // namespace detail
#endif

// Largest blocks_per_rank that keeps every block of every rank resident (GPU), or a small
// thread count on the host. Emulated ranks wait on each other inside one launch, so a block
// that is not resident would deadlock (bounded: it would time out).
template <class F>
inline int max_blocks_per_rank(int num_ranks, int threads_per_block) {
#if RCCLX_BACKEND_GPU
  const int resident = gpu::max_resident_blocks(detail::emulated_kernel_of<F>(), threads_per_block);
  return resident / num_ranks;
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
  if (detail::max_threads_of<F>::value > 0 && threads_per_block > detail::max_threads_of<F>::value)
    throw error(errc::invalid_argument, "launch_emulated: threads_per_block = " + std::to_string(threads_per_block) +
                                            " exceeds the functor's max_threads_per_block = " +
                                            std::to_string(detail::max_threads_of<F>::value));
  detail::emulated_kernel_of<F>()<<<num_ranks * blocks_per_rank, threads_per_block, 0, stream>>>(f, num_ranks,
                                                                                               blocks_per_rank);
  gpu::check_launch("launch_emulated");
#else
  (void)threads_per_block;
  (void)stream;
  std::vector<std::thread> threads;
  std::exception_ptr first;
  std::mutex m;
  threads.reserve(static_cast<std::size_t>(num_ranks) * blocks_per_rank);
  for (int r = 0; r < num_ranks; ++r) {
    for (int b = 0; b < blocks_per_rank; ++b) {
      threads.emplace_back([&, r, b] {
        try {
          f(gpu::thread_group{}, launch_index{r, b, blocks_per_rank, num_ranks});
        } catch (...) {
          std::lock_guard<std::mutex> lock(m);
          if (!first) first = std::current_exception();
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
#endif
}

}  // namespace testing
RCCLX_NAMESPACE_END
