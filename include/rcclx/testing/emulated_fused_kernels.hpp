// rcclx/testing/emulated_fused_kernels.hpp: the fused kernels on every emulated rank in one launch,
// public for tests and code that launches and times them itself (a benchmark): AllReduce + residual
// + RMSNorm (the launchers' choice of kernel, the cluster kernel included), and the unfused
// residual + RMSNorm of every rank's AllReduce result.
//
//   namespace rt = rcclx::testing;
//   rt::fused_launch_info info;   // what was launched: blocks per rank, cluster shape
//   rt::launch_allreduce_rmsnorm<bf16, bf16, 8>(world, args, slots, rcclx::algorithm::flat, 0, stream, &info);
//   rt::launch_add_rmsnorm<bf16, bf16, 8>(num_ranks, args, 0, stream);
#pragma once

#include <algorithm>
#include <cstddef>

#include "../fused/add_rmsnorm.hpp"
#include "../fused/allreduce_rmsnorm.hpp"
#include "emulated_world.hpp"
#include "launch.hpp"

RCCLX_NAMESPACE_BEGIN
namespace testing {

// Threads per block of the emulated fused kernels (the ready-made kernels' block size).
inline constexpr int emulated_fused_threads = fused::default_rmsnorm_launch_config().threads;

template <algorithm Algo, int VPT, int BT, class T, class Out, int MaxRanks>
struct emulated_allreduce_rmsnorm {
  static constexpr int max_threads_per_block = emulated_fused_threads;  // the ready-made kernels' register budget
  const core::peer_table<T, MaxRanks>* tables;  // device memory, indexed by rank
  fused::rmsnorm_args<T, Out> args[MaxRanks];
  fused::tile_slots slots;

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, launch_index ix) const {
    (void)fused::allreduce_rmsnorm_block<Algo, VPT, BT>(g, tables[ix.rank], args[ix.rank], slots, ix.block,
                                                        ix.num_blocks);
  }
};

template <int VPT, int BT, class T, class Out, int MaxRanks>
struct emulated_add_rmsnorm {
  static constexpr int max_threads_per_block = emulated_fused_threads;
  fused::rmsnorm_args<T, Out> args[MaxRanks];

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, launch_index ix) const {
    fused::add_rmsnorm_block<VPT, BT>(g, args[ix.rank], ix.block, ix.num_blocks);
  }
};

#if RCCLX_BACKEND_CUDA
// The cluster kernel (fused/allreduce_rmsnorm_cluster.hpp) on every emulated rank in one launch:
// rank r's blocks are [r * blocks_per_rank, (r + 1) * blocks_per_rank), a multiple of the cluster.
template <class T, class Out, int MaxRanks>
struct emulated_cluster_params {
  const core::peer_table<T, MaxRanks>* tables;
  fused::rmsnorm_args<T, Out> args[MaxRanks];
  int blocks_per_rank;
};
template <int VPT, int ClusterBlocks, int KSplit, class T, class Out, int MaxRanks>
RCCLX_DEVICE RCCLX_FORCEINLINE void emulated_cluster_body(const emulated_cluster_params<T, Out, MaxRanks>& p) {
  const int rank = static_cast<int>(blockIdx.x) / p.blocks_per_rank;
  (void)fused::allreduce_rmsnorm_cluster_block<VPT, ClusterBlocks, KSplit>(
      p.tables[rank], p.args[rank], static_cast<int>(blockIdx.x) % p.blocks_per_rank, p.blocks_per_rank);
}
template <int VPT, int ClusterBlocks, int KSplit, class T, class Out, int MaxRanks>
RCCLX_GLOBAL void __launch_bounds__(emulated_fused_threads * KSplit / ClusterBlocks)
    emulated_allreduce_rmsnorm_cluster(emulated_cluster_params<T, Out, MaxRanks> p) {
  emulated_cluster_body<VPT, ClusterBlocks, KSplit>(p);
}
// One shape is compiled with an explicit minimum of 1 resident block per SM: 4 blocks of 128
// threads holding two vectors each (bf16 rows of 4104-8192). ptxas then gives it 187 registers
// instead of 164 (sm_90), so at most 2 of its blocks share an SM instead of 3, and 8 x 8192 bf16 on
// 8 emulated ranks (64 clusters of 4 on one GPU) ran in 8.0 us instead of 8.9 (docs/performance.md;
// probably the clusters spread over more SMs). Only the emulated launch has that
// many clusters on one GPU; a real job's kernel (fused/allreduce_rmsnorm_cluster.hpp) is unchanged.
// The other shapes keep the compiler's choice: the same minimum gave the one-vector shapes 160
// registers instead of 128 and fewer resident clusters (16 x 4096: 7.3 -> 8.9 us), and 4 per SM
// for the 8 x 128 shape (128 registers) did not change 8 x 8192.
template <int VPT, int ClusterBlocks, int KSplit, class T, class Out, int MaxRanks>
RCCLX_GLOBAL void __launch_bounds__(emulated_fused_threads * KSplit / ClusterBlocks, 1)
    emulated_allreduce_rmsnorm_cluster_min1(emulated_cluster_params<T, Out, MaxRanks> p) {
  emulated_cluster_body<VPT, ClusterBlocks, KSplit>(p);
}
// The emulated cluster kernel of a shape (only that one is instantiated).
template <int VPT, int ClusterBlocks, int KSplit, class T, class Out, int MaxRanks>
struct emulated_cluster_kernel {
  static constexpr auto value = emulated_allreduce_rmsnorm_cluster<VPT, ClusterBlocks, KSplit, T, Out, MaxRanks>;
};
template <class T, class Out, int MaxRanks>
struct emulated_cluster_kernel<2, 4, 1, T, Out, MaxRanks> {
  static constexpr auto value = emulated_allreduce_rmsnorm_cluster_min1<2, 4, 1, T, Out, MaxRanks>;
};
#endif

// What launch_allreduce_rmsnorm launched on every rank: the blocks per rank, and which kernel.
struct fused_launch_info {
  int blocks_per_rank = 0;   // 0: nothing was launched (no rows)
  int cluster_blocks = 0;    // the cluster kernel's blocks per cluster; 0: the tile-flag kernel (flat or tree)
  int cluster_threads = 0;   // the cluster kernel's threads per block
  int rows_per_cluster = 0;  // the cluster kernel's rows per cluster (at most; one after another)
};

// Runs the cluster kernel on every rank if the launchers' rule (fused::detail::try_rmsnorm_cluster_choices,
// with every emulated rank on this GPU) says it applies; returns what it launched (blocks_per_rank 0: not).
template <class T, class Out, int MaxRanks>
inline fused_launch_info try_launch_emulated_cluster(const emulated_world<MaxRanks>& world,
                                                     const fused::rmsnorm_args<T, Out>* args, gpu::stream_t stream) {
  fused_launch_info used;
#if RCCLX_BACKEND_CUDA
  const int n = world.num_ranks();
  const core::peer_table<T, MaxRanks> t0 = world.template table<T>(0);
  const int vecs = fused::detail::vecs_per_thread<T>(args[0].hidden, emulated_fused_threads);
  fused::detail::with_vecs_per_thread<T>(vecs, [&](auto vpt_tag) {
    constexpr int vpt = decltype(vpt_tag)::value;
    fused::detail::try_rmsnorm_cluster_choices<vpt>([&](auto cb_tag, auto split_tag, int rows) {
      constexpr int cb = decltype(cb_tag)::value, split = decltype(split_tag)::value;
      constexpr int threads = emulated_fused_threads * split / cb;
      constexpr auto kernel = emulated_cluster_kernel<vpt, cb, split, T, Out, MaxRanks>::value;
      const int groups = fused::detail::rmsnorm_cluster_plan<kernel, cb, split, T>(t0.signals, args[0].tokens,
                                                                                   args[0].hidden, n, rows);
      if (groups == 0) return false;
      emulated_cluster_params<T, Out, MaxRanks> p{};
      p.tables = world.template device_tables<T>();
      for (int r = 0; r < n; ++r) p.args[r] = args[r];
      p.blocks_per_rank = groups * cb;
      gpu::launch_clusters(kernel, n * p.blocks_per_rank, threads, cb, stream, p);
      used = {p.blocks_per_rank, cb, threads, rows};
      return true;
    });
  });
#else
  (void)world;
  (void)args;
  (void)stream;
#endif
  return used;
}

// Calls f(kernel_type_tag) with the emulated AllReduce + RMSNorm functor type for `algo` (flat or
// tree) and the row length.
template <class T, class Out, int MaxRanks, class F>
inline void with_emulated_rmsnorm(algorithm algo, std::size_t hidden, F&& f) {
  const int vecs = fused::detail::vecs_per_thread<T>(hidden, emulated_fused_threads);
  fused::detail::with_vecs_per_thread<T>(vecs, [&](auto vpt) {
    constexpr int v = decltype(vpt)::value;
    constexpr int bt = emulated_fused_threads;  // 1 on the host backend, unless its threads are emulated
    if (algo == algorithm::tree) f(emulated_allreduce_rmsnorm<algorithm::tree, v, bt, T, Out, MaxRanks>{});
    else f(emulated_allreduce_rmsnorm<algorithm::flat, v, bt, T, Out, MaxRanks>{});
  });
}

// Blocks per rank for `tokens` rows: the launcher's choice, capped so that every block of every
// emulated rank is resident (the kernels wait across ranks) and by `cap` when positive.
template <class F>
inline int emulated_fused_blocks(int num_ranks, std::size_t tokens, int cap = 0) {
  int nb = fused::rmsnorm_blocks_for(tokens);
  if (cap > 0) nb = std::min(nb, cap);
  return std::max(1, std::min(nb, max_blocks_per_rank<F>(num_ranks, emulated_fused_threads)));
}

// Runs fused::allreduce_rmsnorm on every rank of `world` (args[r]: rank r's arguments) in one
// launch; blocks_per_rank 0: the launcher's choice capped by residency. Returns the blocks used per
// rank; `info`, if given, receives what was launched (the cluster kernel or the tile-flag kernel).
template <class T, class Out, int MaxRanks>
inline int launch_allreduce_rmsnorm(const emulated_world<MaxRanks>& world, const fused::rmsnorm_args<T, Out>* args,
                                    fused::tile_slots slots, algorithm algo, int blocks_per_rank = 0,
                                    gpu::stream_t stream = {}, fused_launch_info* info = nullptr) {
  if (algo == algorithm::flat && blocks_per_rank == 0 && args[0].tokens > 0) {
    const fused_launch_info c = try_launch_emulated_cluster<T, Out, MaxRanks>(world, args, stream);
    if (c.blocks_per_rank > 0) {
      if (info) *info = c;
      return c.blocks_per_rank;
    }
  }
  int used = 0;
  with_emulated_rmsnorm<T, Out, MaxRanks>(algo, args[0].hidden, [&](auto k) {
    using kernel = decltype(k);
    kernel f{};
    f.tables = world.template device_tables<T>();
    for (int r = 0; r < world.num_ranks(); ++r) f.args[r] = args[r];
    f.slots = slots;
    used = blocks_per_rank > 0 ? blocks_per_rank : emulated_fused_blocks<kernel>(world.num_ranks(), args[0].tokens);
    if (args[0].tokens > 0) launch_emulated(world.num_ranks(), used, emulated_fused_threads, f, stream);
  });
  if (info) *info = {args[0].tokens > 0 ? used : 0, 0, 0, 0};
  return used;
}

// Runs fused::add_rmsnorm for every rank in one launch.
template <class T, class Out, int MaxRanks>
inline void launch_add_rmsnorm(int num_ranks, const fused::rmsnorm_args<T, Out>* args, int blocks_per_rank = 0,
                               gpu::stream_t stream = {}) {
  fused::detail::with_vecs_per_thread<T>(fused::detail::vecs_per_thread<T>(args[0].hidden, emulated_fused_threads),
                                         [&](auto vpt) {
    constexpr int v = decltype(vpt)::value;
    constexpr int bt = emulated_fused_threads;  // 1 on the host backend, unless its threads are emulated
    emulated_add_rmsnorm<v, bt, T, Out, MaxRanks> f{};
    for (int r = 0; r < num_ranks; ++r) f.args[r] = args[r];
    int nb = blocks_per_rank > 0 ? blocks_per_rank : fused::rmsnorm_blocks_for(args[0].tokens);
    nb = std::max(1, std::min(nb, max_blocks_per_rank<decltype(f)>(num_ranks, emulated_fused_threads)));
    if (args[0].tokens > 0) launch_emulated(num_ranks, nb, emulated_fused_threads, f, stream);
  });
}

}  // namespace testing
RCCLX_NAMESPACE_END
