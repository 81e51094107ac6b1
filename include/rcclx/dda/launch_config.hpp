// rcclx/dda/launch_config.hpp: the launch shape of the ready-made DDA kernels (threads per block,
// blocks per rank) for a process per GPU, and the block count of a call.
//
//   auto cfg = rcclx::dda::default_launch_config(bytes, rcclx::algorithm::flat, pads.max_blocks);
//   int nb = rcclx::dda::num_blocks_for<rcclx::bf16>(count, rcclx::algorithm::flat, num_ranks, cfg);
//   auto mine = rcclx::dda::launch_config_for("my launcher", bytes, algo, pads.max_blocks, 256);  // 256 threads
//
// The defaults suit a GPU of its own (a process per GPU; measured on two H200s, docs/performance.md
// "Launch shape on a GPU of its own"): the AllReduce launches up to 128 blocks per rank (the tree at
// 256 MiB: 1179 us with 32 blocks, 820 with 128; LPC 1582 -> 649 us), flat with 128 threads per
// block up to 128 KiB per rank and 256 above (the former 512 made 8 KiB and 512 KiB calls 1.3x
// slower), the tree with 512. AllGather, AlltoAll and ReduceScatter keep 512 threads and 32 blocks
// (one_shot_launch_config: not measured on a GPU of its own yet). Ranks emulated on one GPU need
// smaller grids (every block of every rank resident at once): testing::emulated_launch_config.
// Why the pads appear: a call's block count must be the same on every rank and fit the signal
// pads' max_blocks; every rank's pads have the same max_blocks (their layout depends on it), so
// the cap min(128, max_blocks) is the same everywhere. A launcher that cannot read the pads (a table
// in device memory) caps at 128: pass num_blocks, or size the pads for it.
#pragma once

#include <cstddef>
#include <string>

#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../gpu/memory.hpp"
#include "../kernel/launch.hpp"

RCCLX_NAMESPACE_BEGIN
namespace dda {

// Threads per block and the block-count caps of the ready-made kernels.
struct launch_config {
  int threads;          // threads per block (1 on the host backend: a block is a thread; the GPU's
                        // with RCCLX_EMULATE_THREADS=1)
  int flat_max_blocks;  // blocks per rank, at most
  int tree_max_blocks;
};

// Blocks per rank, at most, of an AllReduce on a GPU of its own (the host backend: 4; CI machines
// have two cores, and the partition logic is the same at any count).
inline constexpr int default_max_blocks = RCCLX_BACKEND_GPU ? 128 : 4;

// Threads per block of an AllReduce of `bytes` per rank: flat 128 up to 128 KiB (tiles of 2 KiB: a
// small message spread over many blocks, each within an LL region), 256 above; tree 512.
RCCLX_HOST_DEVICE constexpr int default_threads(std::size_t bytes, algorithm a) {
#if RCCLX_GPU_BLOCKS
  return a == algorithm::flat ? (bytes <= (std::size_t{128} << 10) ? 128 : 256) : 512;
#else
  return (void)bytes, (void)a, 1;
#endif
}

// The AllReduce's shape for `bytes` per rank (algorithm flat or tree) on pads of `pad_blocks` blocks.
RCCLX_HOST_DEVICE constexpr launch_config default_launch_config(std::size_t bytes, algorithm a,
                                                                int pad_blocks = default_max_blocks) {
  const int cap = pad_blocks < default_max_blocks ? (pad_blocks > 1 ? pad_blocks : 1) : default_max_blocks;
  return {default_threads(bytes, a), cap, cap};
}

// AllGather, AlltoAll and ReduceScatter: 512 threads, at most 32 blocks (the host backend: 1, 4;
// with emulated threads 512, 4).
RCCLX_HOST_DEVICE constexpr launch_config one_shot_launch_config() {
#if RCCLX_BACKEND_GPU
  return {512, 32, 32};
#elif RCCLX_EMULATE_THREADS
  return {512, 4, 4};
#else
  return {1, 4, 4};
#endif
}

// Refuses threads per block that are not 0 (the default) or a multiple of 32 in [32, 512] (the
// tile size: ranks with different tiles would pair up wrong vectors, so it must be the same on
// every rank; above 512 the kernels, compiled with __launch_bounds__(512), could not run). Every
// backend checks it, although the host backend runs a block as one thread.
inline void check_threads(const std::string& who, int threads) {
  kernel::check_threads(who, threads, kernel::default_max_threads);
  if (threads != 0 && (threads < 32 || threads % 32 != 0))
    throw error(errc::invalid_argument, who + ": threads = " + std::to_string(threads) +
                                            " must be 0 (default) or a multiple of 32 in [32, " +
                                            std::to_string(kernel::default_max_threads) + "]");
}

// default_launch_config with `threads` per block instead of the default (0: the default), checked.
inline launch_config launch_config_for(const std::string& who, std::size_t bytes, algorithm a,
                                       int pad_blocks = default_max_blocks, int threads = 0) {
  check_threads(who, threads);
  launch_config cfg = default_launch_config(bytes, a, pad_blocks);
#if RCCLX_GPU_BLOCKS
  if (threads > 0) cfg.threads = threads;
#endif
  return cfg;
}

// Blocks per rank of a call: a pure function of its arguments, so it is identical on every rank.
// flat: one tile (threads x 16 bytes) per block up to the cap; tree: one tile of each rank's chunk
// per block up to the cap (so the reduce-scatter keeps every block busy).
template <class T>
RCCLX_HOST_DEVICE constexpr int num_blocks_for(std::size_t count, algorithm algo, int num_ranks,
                                               const launch_config& cfg) {
  const std::size_t e = static_cast<std::size_t>(gpu::elems_per_vec16<T>);
  const std::size_t vecs = (count + e - 1) / e;
  const std::size_t tiles = (vecs + static_cast<std::size_t>(cfg.threads) - 1) / static_cast<std::size_t>(cfg.threads);
  std::size_t want = tiles;
  int cap = cfg.flat_max_blocks;
  if (algo == algorithm::tree) {
    want = (tiles + static_cast<std::size_t>(num_ranks) - 1) / static_cast<std::size_t>(num_ranks);
    cap = cfg.tree_max_blocks;
  }
  if (want < 1) want = 1;
  return want > static_cast<std::size_t>(cap) ? cap : static_cast<int>(want);
}
// The same with the default shape for this size (pads of default_max_blocks or more).
template <class T>
RCCLX_HOST_DEVICE constexpr int num_blocks_for(std::size_t count, algorithm algo, int num_ranks) {
  return num_blocks_for<T>(count, algo, num_ranks, default_launch_config(count * sizeof(T), algo));
}

}  // namespace dda
RCCLX_NAMESPACE_END
