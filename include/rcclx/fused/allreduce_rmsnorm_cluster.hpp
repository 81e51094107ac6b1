// rcclx/fused/allreduce_rmsnorm_cluster.hpp: the decode-time AllReduce + residual + RMSNorm with
// each row spread over a thread-block cluster (NVIDIA sm_90+): the one-shot over LL packets (no
// flag round trip, no fence) with a row's peer loads split over ClusterBlocks SMs, and the row's
// sum of squares combined in the cluster's shared memory (st.async messages, mbarrier waits);
// with ClusterBlocks = 1 (one block of 512 threads per row) the row's sum is add_rmsnorm's block
// reduction and no cluster feature is used.
//
//   // blocks per rank = ClusterBlocks * groups; launched with cluster dims (ClusterBlocks, 1, 1):
//   rcclx::fused::allreduce_rmsnorm_cluster_block<vpt, 4>(table, args, blockIdx.x, gridDim.x);
//   // or let fused::allreduce_rmsnorm pick it (flat, CUDA sm_90+, rows that fit the LL regions)
//
// Layout. Block b of a rank is block c = b % ClusterBlocks of the cluster of row group
// q = b / ClusterBlocks; group q handles rows q, q + groups, ... With KSplit = 1, block c holds the
// vectors that threads [c * B, (c + 1) * B) of add_rmsnorm's 512-thread block hold (B = 512 /
// ClusterBlocks): vector k * 512 + c * B + tid of the row, k < VecsPerThread. With KSplit = 2 the
// cluster is two slices of ClusterBlocks / 2 blocks (B = 1024 / ClusterBlocks) and slice s holds
// the k in [s * VecsPerThread / 2, (s + 1) * VecsPerThread / 2). Per row, each block
//   1. publishes its vectors of x as LL packets in its LL region (core/ll.hpp);
//   2. sums every rank's packets in rank order in FP32 (its own from x), rounds once to T, adds the
//      residual in FP32 and rounds once to T (the new residual);
//   3. sums the squares of its values per thread and per warp exactly as gpu::block_reduce's first
//      phase does (KSplit = 2: slice 0 first hands each thread's sum to the slice-1 thread of the
//      same logical thread, one message each), sends its warp sums into the shared memory of every
//      block of the cluster, and once its own mbarrier says they all landed adds the 512 / 32 warp
//      sums of the row in warp order, as block_reduce's second phase does
//      (detail::cluster_row_total);
//   4. writes the new residual and the output.
// So the bits equal the unfused path (dda::allreduce, then add_rmsnorm) and the other fused
// kernels, on every rank. The residual, the weight and x are loaded before the exchange (their
// latency hides behind the packets'), and every peer's packet loads of a vector are issued before
// any is checked (kernel::ll_reduce_vec). Measured on one H200 with 8 emulated ranks:
// docs/performance.md. Steps: 1. Traffic per rank, S = tokens * hidden * sizeof(T): reads
// S (x) + 2(N-1)S (packets) + S (residual), writes 2S (packets) + S (residual) + S_out; LL payload
// per block: rows per group * VecsPerThread * (512 / ClusterBlocks) * 16 bytes (either KSplit). No
// symmetric buffer, no tile slots.
// A wait that expires (a peer that never arrived) is recorded (barrier_kind::ll); the failure
// travels with the warp sums, and every block of the cluster then skips its stores for that row and
// the rest: the row's residual stays as it was.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "../core/ll.hpp"
#include "../core/ops.hpp"
#include "../core/peer_table.hpp"
#include "../gpu/cluster.hpp"
#include "../gpu/group.hpp"
#include "../gpu/shared.hpp"
#include "../gpu/warp.hpp"
#include "../kernel/ll_reduce.hpp"
#include "rmsnorm_args.hpp"
#include "rmsnorm_epilogue.hpp"
#include "stages.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {

// Blocks per cluster of the launchers' cluster kernel: 4 blocks of 128 threads per row, or where
// not every row's cluster of 4 can be resident, one block of 512 (rows of one vector per thread,
// one row per block), then 2 blocks of 256 (fewer, larger blocks: more rows resident when
// registers bound them); rows of two vectors per thread first try 8 blocks of 128 threads, then 2
// blocks of 512, each thread holding one vector (with_rmsnorm_cluster_shapes). (8 blocks of 64
// threads holding two each measured no faster for 8192-element bf16 rows on one H200.)
inline constexpr int rmsnorm_cluster_blocks = 4;

namespace detail {
// Calls f(cluster blocks, KSplit) (std::integral_constant<int, ...> each) for the cluster shapes the
// launchers try for rows of VecsPerThread vectors per logical thread, in order: two vectors per
// thread first as 8 blocks of 128 threads holding one each (KSplit 2), then as 2 blocks of 512
// holding one each (KSplit 2: 128 registers, one block per SM; where 8 x 128 does not fit, e.g.
// 8 x 8192 bf16 on 8 emulated ranks of one H200, it beat 2 x 256 holding two each, 7.8 against
// 8.0 us), then 4 x 128, then (one vector per thread) one block of 512, then 2 x 256.
// The one-block "cluster" sums the row with add_rmsnorm's block reduction, no message between SMs:
// for 16 x 4096 bf16 on 8 emulated ranks of one H200, where 4 x 128 does not fit, 7.07 against
// 7.26 us on 2 x 256 (docs/performance.md; 2026-12-02); with two rows per block, or two
// vectors per thread (8 x 8192: 10.7 against 7.6 us on 2 x 512), it is slower, so it takes neither.
template <int VecsPerThread, class F>
inline void with_rmsnorm_cluster_shapes(F&& f) {
  using std::integral_constant;
  if constexpr (VecsPerThread == 2) {
    f(integral_constant<int, 2 * rmsnorm_cluster_blocks>{}, integral_constant<int, 2>{});
    f(integral_constant<int, 2>{}, integral_constant<int, 2>{});
  }
  f(integral_constant<int, rmsnorm_cluster_blocks>{}, integral_constant<int, 1>{});
  if constexpr (VecsPerThread == 1) f(integral_constant<int, 1>{}, integral_constant<int, 1>{});
  f(integral_constant<int, 2>{}, integral_constant<int, 1>{});
}
}  // namespace detail

// Rows per cluster the launchers allow for rows of VecsPerThread vectors per logical thread: one,
// or for one vector per thread two where one row per cluster cannot have all its clusters resident
// (a cluster's rows run one after another; the second row's packets have landed by then, as every
// row is published first). On one H200 with 8 emulated ranks, two rows per cluster made 32 x 4096
// bf16 faster than the tile-flag kernel (11.3 against 13.0 us) and 16 x 8192 slower (13.8 against
// 11.7 us).
template <int VecsPerThread>
inline constexpr int rmsnorm_cluster_max_rows = VecsPerThread == 1 ? 2 : 1;

// Row groups (clusters per rank) the launchers give `tokens` rows at `rows_per_group` rows each:
// ceil(tokens / rows_per_group), if that many fit the pads' `ll_blocks` LL regions and `max_groups`
// (e.g. the clusters that can be resident at once per rank); 0 otherwise.
RCCLX_HOST_DEVICE constexpr int rmsnorm_cluster_groups(std::size_t tokens, std::uint32_t ll_blocks, int max_groups,
                                                       int cluster_blocks = rmsnorm_cluster_blocks,
                                                       int rows_per_group = 1) {
  const std::size_t g = (tokens + static_cast<std::size_t>(rows_per_group) - 1) / static_cast<std::size_t>(rows_per_group);
  return g <= ll_blocks / static_cast<std::uint32_t>(cluster_blocks) &&
                 g <= static_cast<std::size_t>(max_groups > 0 ? max_groups : 0)
             ? static_cast<int>(g)
             : 0;
}

// Does the cluster kernel with `groups` row groups fit these pads' LL regions? The same answer on
// every rank (same pads layout, same arguments).
template <class T, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool rmsnorm_cluster_fits(const core::signal_pads<MaxRanks>& s, std::size_t tokens,
                                                              std::size_t hidden, int groups,
                                                              int cluster_blocks = rmsnorm_cluster_blocks) {
  if (groups < 1 || tokens == 0) return false;
  const std::size_t g = static_cast<std::size_t>(groups);
  const std::size_t logical = static_cast<std::size_t>(default_rmsnorm_launch_config().threads);
  const std::size_t vpt = (hidden / gpu::elems_per_vec16<T> + logical - 1) / logical;
  const std::size_t block_threads = logical / static_cast<std::size_t>(cluster_blocks);
  return core::ll_fits(s, groups * cluster_blocks, (tokens + g - 1) / g * vpt * block_threads * 16);
}

#if RCCLX_BACKEND_CUDA
namespace detail {
struct cluster_rmsnorm_tag;
// One message of the row exchange: a partial sum and whether its sender failed (8 bytes, one
// gpu::st_async).
struct alignas(8) cluster_row_msg {
  float value;
  std::uint32_t failed;
};
// A row's exchange of partial sums, in each block's shared memory, two rows deep (slot m % 2): the
// slice-0 threads' partials handed to the slice-1 threads (KSplit = 2: `carry`), and every sending
// warp's sum and failure pushed into every block of the cluster (`sums`). Each slot has an mbarrier
// that completes when its messages have landed (phase m / 2 of slot m % 2).
template <int ClusterBlocks, int KSplit, int BlockThreads>
struct cluster_row_sum {
  static constexpr int parts = ClusterBlocks / KSplit, warps = BlockThreads / 32;
  std::uint64_t sums_bar[2];
  std::uint64_t carry_bar[2];
  cluster_row_msg sums[2][parts * warps];
  cluster_row_msg carry[2][KSplit > 1 ? BlockThreads : 1];
};

// Every thread of the block, before the kernel's gpu::cluster_arrive_relaxed: the exchange's
// mbarriers, initialised and fenced so that mates may complete bytes on them once their
// gpu::cluster_wait (cluster_row_total's first row) has returned.
template <int ClusterBlocks, int KSplit, int BlockThreads>
RCCLX_DEVICE RCCLX_FORCEINLINE void cluster_row_init() {
  auto& tmp = gpu::block_shared<cluster_row_sum<ClusterBlocks, KSplit, BlockThreads>, cluster_rmsnorm_tag>();
  if (gpu::thread_x() == 0) {
    for (int i = 0; i < 2; ++i) {
      gpu::mbarrier_init(&tmp.sums_bar[i], 1);   // one arrival: this block's own expect
      gpu::mbarrier_init(&tmp.carry_bar[i], 1);
    }
    gpu::fence_mbarrier_init();
  }
}

// The row's sum over the cluster in gpu::block_reduce's order (see the file comment), and whether
// any block of the cluster failed. Every thread of every block of the cluster calls it, once per
// row (m: the row's index in this group), after cluster_row_init and a gpu::cluster_arrive_relaxed
// at the start of the kernel (the first row waits there: no mate's shared memory is written before
// the mate has started and initialised its mbarriers). Lane b of each sending warp writes the warp's
// sum and failure into block b with gpu::st_async; each block waits on its own mbarrier for all of
// them and adds the sums in warp order from its own shared memory. No cluster barrier: its arrive
// would release every earlier write of the thread, the LL packets and the residual included, and
// cost ~0.2 us per row on an H200 (docs/performance.md). KSplit = 2: the slice-0
// threads first hand their partials to the slice-1 threads holding the same logical threads, whose
// sums make the warps' (add_rmsnorm's thread adds its vectors' sums in k order).
// Slot reuse (row m + 2 into slot m % 2) is safe: a block sends row m + 2 only after receiving its
// mate's row m + 1 message, which the mate sent (a release, at cluster scope) after reading row m's
// slot and after row m's phase of that slot completed. Every wait is bounded by its senders, which
// send after their own bounded waits.
template <int ClusterBlocks, int KSplit, int BlockThreads>
RCCLX_DEVICE RCCLX_FORCEINLINE float cluster_row_total(float partial, bool failed, int part, int slice, std::size_t m,
                                                       bool& any_failed) {
  using sums = cluster_row_sum<ClusterBlocks, KSplit, BlockThreads>;
  static_assert(KSplit == 1 || KSplit == 2, "cluster_row_total: KSplit 1 or 2");
  static_assert(ClusterBlocks >= 2, "cluster_row_total: st.async needs a cluster of two blocks or more");
  auto& tmp = gpu::block_shared<sums, cluster_rmsnorm_tag>();
  const int par = static_cast<int>(m & 1u);
  const unsigned phase = static_cast<unsigned>((m >> 1) & 1u);
  const unsigned tid = gpu::thread_x();
  const int lane = static_cast<int>(tid % 32), warp = static_cast<int>(tid / 32);
  if (tid == 0) {  // this row's bytes, posted on the slots (a mate's bytes may land first)
    gpu::mbarrier_expect_bytes(&tmp.sums_bar[par], static_cast<unsigned>(sizeof(cluster_row_msg)) * sums::parts * sums::warps);
    if (KSplit == 2 && slice == 1)
      gpu::mbarrier_expect_bytes(&tmp.carry_bar[par], static_cast<unsigned>(sizeof(cluster_row_msg)) * BlockThreads);
  }
  if (m == 0) gpu::cluster_wait();  // every mate has started (the kernel arrived first thing)
  if constexpr (KSplit == 2) {
    if (slice == 0) {
      const unsigned mate = static_cast<unsigned>(sums::parts + part);
      gpu::st_async(gpu::cluster_shared_address(&tmp.carry[par][tid], mate),
                    gpu::cluster_shared_address(&tmp.carry_bar[par], mate), gpu::bit_cast<std::uint32_t>(partial),
                    failed ? 1u : 0u);
    } else {
      gpu::mbarrier_wait_parity(&tmp.carry_bar[par], phase);
      const cluster_row_msg c = tmp.carry[par][tid];
      partial = c.value + partial;
      failed = failed || c.failed != 0u;
    }
  }
  if (slice == KSplit - 1) {
    const float w = gpu::shuffle(gpu::warp_sum_as_block_reduce(partial), 0);  // lane 0's, in every lane
    const unsigned bad = gpu::warp_any(failed) ? 1u : 0u;
    if (lane < ClusterBlocks) {  // lane b writes into block b: one remote store per lane
      const unsigned b = static_cast<unsigned>(lane);
      gpu::st_async(gpu::cluster_shared_address(&tmp.sums[par][part * sums::warps + warp], b),
                    gpu::cluster_shared_address(&tmp.sums_bar[par], b), gpu::bit_cast<std::uint32_t>(w), bad);
    }
  }
  gpu::mbarrier_wait_parity(&tmp.sums_bar[par], phase);  // every sending warp's message has landed here
  float total = tmp.sums[par][0].value;
  std::uint32_t bad = tmp.sums[par][0].failed;
#  pragma unroll
  for (int i = 1; i < sums::parts * sums::warps; ++i) {
    total += tmp.sums[par][i].value;
    bad |= tmp.sums[par][i].failed;
  }
  any_failed = bad != 0u;
  return total;
}
}  // namespace detail

// One block of one rank, launched in clusters of ClusterBlocks consecutive blocks with
// 512 * KSplit / ClusterBlocks threads each; blocks per rank = ClusterBlocks * groups, every rank
// the same grid; VecsPerThread * 512 >= hidden / (16 / sizeof(T)); the rows must fit the LL regions
// (rmsnorm_cluster_fits). Returns false if a peer never arrived (recorded in t.signals).
// KSplit = 2 (VecsPerThread even): each physical thread holds half of a logical thread's vectors
// (slice 0 the first half, in blocks [0, ClusterBlocks / 2), slice 1 the rest), so a row's packets
// are waited for in half as many rounds per thread, for one more message per thread.
// Everything that does not depend on the peers (x, the residual, the weight, the FP8 scale) is
// loaded before the exchange, so those latencies hide behind the packets'.
template <int VecsPerThread, int ClusterBlocks, int KSplit = 1, class T, class Out, int MaxRanks>
RCCLX_DEVICE bool allreduce_rmsnorm_cluster_block(const core::peer_table<T, MaxRanks>& t, const rmsnorm_args<T, Out>& a,
                                                  int block, int num_blocks) {
  constexpr int logical = default_rmsnorm_launch_config().threads;  // add_rmsnorm's block
  static_assert(VecsPerThread % KSplit == 0 && ClusterBlocks % KSplit == 0,
                "allreduce_rmsnorm_cluster_block: KSplit divides VecsPerThread and ClusterBlocks");
  constexpr int parts = ClusterBlocks / KSplit;  // blocks per slice
  static_assert(logical % (32 * parts) == 0, "allreduce_rmsnorm_cluster_block: whole warps per block");
  constexpr int block_threads = logical / parts, held_vecs = VecsPerThread / KSplit;
  constexpr int e = gpu::elems_per_vec16<T>;
  using traits = core::value_traits<T>;
  if constexpr (ClusterBlocks > 1) {
    detail::cluster_row_init<ClusterBlocks, KSplit, block_threads>();
    gpu::cluster_arrive_relaxed();  // this block has started (waited for before the first remote store)
  }
  const gpu::block_group g;
  const core::signal_pads<MaxRanks>& s = t.signals;
  const std::size_t hidden = a.hidden, vecs = hidden / e;
  const int in_cluster = block % ClusterBlocks, group = block / ClusterBlocks, groups = num_blocks / ClusterBlocks;
  const int slice = in_cluster / parts, part = in_cluster % parts;
  const unsigned tid = gpu::thread_x();
  const std::size_t lt = static_cast<std::size_t>(part * block_threads) + tid;  // logical thread
  const std::size_t ng = static_cast<std::size_t>(groups);
  const auto held = [&](int k) {  // the vector index of this thread's k-th vector
    return static_cast<std::size_t>(slice * held_vecs + k) * logical + lt;
  };
  // 0. The weight, the scale and the first row's x and residual, before the exchange: the
  //    epilogue's operands preloaded. Its new residual is stored only after the row's sum, once no
  //    block of the cluster failed (`keep`).
  auto epi = detail::make_rmsnorm_epilogue<logical, operand_loads::preloaded, held_vecs>(a, static_cast<T*>(nullptr),
                                                                                          a.output);
  const store<T> keep{a.residual, hidden};
  gpu::vec16 xv[held_vecs];
  const auto load_row = [&](std::size_t i) {
#  pragma unroll
    for (int k = 0; k < held_vecs; ++k)
      if (held(k) < vecs) xv[k] = gpu::load16(a.input + i * hidden + held(k) * e);
    epi.preload_row(i, held, vecs);
  };
  epi.preload_shared(held, vecs);
  if (static_cast<std::size_t>(group) < a.tokens) load_row(static_cast<std::size_t>(group));
  const core::ll_session<MaxRanks> ll(g, s, block);
  unsigned char* own = ll.own();  // once: ll.write would recompute it per packet (more registers, sm_90)
  // 1. This block's vectors of its group's rows: vector k of thread tid in the group's m-th row is
  //    packet (m * held_vecs + k) * block_threads + tid.
  const auto packet = [&](std::size_t m, int k) {
    return (m * held_vecs + static_cast<std::size_t>(k)) * block_threads + tid;
  };
  for (std::size_t i = static_cast<std::size_t>(group), m = 0; i < a.tokens; i += ng, ++m)
#  pragma unroll
    for (int k = 0; k < held_vecs; ++k)
      if (held(k) < vecs)
        core::ll_write(own, packet(m, k), m == 0 ? xv[k] : gpu::load16(a.input + i * hidden + held(k) * e),
                       ll.flag(), s.ll_block_bytes);
  const core::ll_halves<MaxRanks> h = ll.halves();
  bool failed = false;
  for (std::size_t i = static_cast<std::size_t>(group), m = 0; i < a.tokens; i += ng, ++m) {
    if (m > 0) load_row(i);
    // 2. Every rank's packets of each vector this thread holds, summed in rank order in FP32, one
    //    vector after another (every vector's packets in flight at once took the registers of
    //    resident clusters and measured no faster).
    float v[held_vecs][e];
    float partial = 0.0f;
#  pragma unroll
    for (int k = 0; k < held_vecs; ++k) {
      for (float& x : v[k]) x = 0.0f;
      if (held(k) < vecs && !failed) {
        gpu::vec16 r;
        const position p{i, held(k) * e};
        failed = !kernel::ll_reduce_vec<core::op_sum, T>(s, h, packet(m, k), xv[k], ll.flag(), block, r);
        if (!failed) {
          traits::unpack(r, v[k]);     // the AllReduce result, rounded once to T
          epi.add_residual(k, p, v[k]);  // the new residual, rounded once to T
          partial += epi.row_partial(p, v[k]);
        }
      }
    }
    bool any_failed = false;
    float total;
    if constexpr (ClusterBlocks == 1) {  // the row in one block: add_rmsnorm's block reduction
      any_failed = g.sync_or(failed);
      total = epi.row_total(g, partial);
    } else {
      total = detail::cluster_row_total<ClusterBlocks, KSplit, block_threads>(partial, failed, part, slice, m, any_failed);
    }
    failed = failed || any_failed;  // every block of the cluster now agrees
    if (failed) continue;           // nothing of this row is written; later rows are skipped too
#  pragma unroll
    for (int k = 0; k < held_vecs; ++k) {
      if (held(k) >= vecs) continue;
      const position p{i, held(k) * e};
      keep(p, v[k]);
      epi.finish(k, p, v[k], total);
    }
  }
  if constexpr (ClusterBlocks > 1)
    if (static_cast<std::size_t>(group) >= a.tokens) gpu::cluster_wait();  // no row: the arrive's wait
  return !g.sync_or(failed);
}

namespace detail {
// The cluster kernel's body (kernel/launch.hpp: launched by kernel::launch_clusters).
template <int VPT, int ClusterBlocks, int KSplit, class T, class Out>
struct rmsnorm_cluster_body {
  static constexpr int max_threads = default_rmsnorm_launch_config().threads * KSplit / ClusterBlocks;
  rmsnorm_args<T, Out> a;
  template <class Group, int MaxRanks>
  RCCLX_DEVICE bool operator()(const Group&, const core::peer_table<T, MaxRanks>& t, int block, int num_blocks) const {
    return allreduce_rmsnorm_cluster_block<VPT, ClusterBlocks, KSplit>(t, a, block, num_blocks);
  }
};
}  // namespace detail
#endif  // RCCLX_BACKEND_CUDA

namespace detail {
// Flat calls take the cluster kernel where it applies (rmsnorm_cluster_plan); RCCLX_RMSNORM_CLUSTER=0
// turns it off (the tile-flag flat kernel then runs: the same bits).
inline bool rmsnorm_cluster_enabled() {
  const char* v = std::getenv("RCCLX_RMSNORM_CLUSTER");
  return !(v && v[0] == '0');
}

#if RCCLX_BACKEND_CUDA
// Row groups (clusters per rank) for a call of the cluster kernel `Kernel` (clusters of
// ClusterBlocks blocks of 512 * KSplit / ClusterBlocks threads) on pads `s`, with `ranks_per_gpu`
// ranks sharing the device (1 in a real job, every emulated rank otherwise): `rows_per_group` rows
// per cluster, every cluster of every rank resident at once (they wait for each other's packets),
// the rows within the LL regions. 0: the call does not fit. Called by try_rmsnorm_cluster_choices,
// which has checked that the cluster kernel is on and clusters exist. The occupancy query is made
// once per kernel and device, not on every call.
template <auto Kernel, int ClusterBlocks, int KSplit, class T, int MaxRanks>
inline int rmsnorm_cluster_plan(const core::signal_pads<MaxRanks>& s, std::size_t tokens, std::size_t hidden,
                                int ranks_per_gpu, int rows_per_group = 1) {
  constexpr int cb = ClusterBlocks, max_devices = 64;
  static std::atomic<int> resident[max_devices] = {};  // 0: not asked yet (a kernel that runs has >= 1)
  int d = 0;
  gpu::check(cudaGetDevice(&d), "cudaGetDevice");
  int clusters = d < max_devices ? resident[d].load(std::memory_order_relaxed) : 0;
  if (clusters == 0) {
    clusters = gpu::max_active_clusters(Kernel, default_rmsnorm_launch_config().threads * KSplit / cb, cb);
    if (d < max_devices) resident[d].store(clusters, std::memory_order_relaxed);
  }
  const int groups = rmsnorm_cluster_groups(tokens, s.ll_blocks, clusters / ranks_per_gpu, cb, rows_per_group);
  return rmsnorm_cluster_fits<T>(s, tokens, hidden, groups, cb) ? groups : 0;
}

// The cluster kernel's choices for rows of VPT vectors per thread, in the order both launchers
// (fused::allreduce_rmsnorm and the emulated one) take them: every shape of
// with_rmsnorm_cluster_shapes with one row per cluster, then with two (up to
// rmsnorm_cluster_max_rows). try_one(cb_tag, split_tag, rows) plans its kernel
// (rmsnorm_cluster_plan) and launches it if the call fits, returning whether it did; the walk stops
// there. False, without a try, when the cluster kernel is off (RCCLX_RMSNORM_CLUSTER=0) or the
// device has no clusters: checked once per launch.
template <int VPT, class F>
inline bool try_rmsnorm_cluster_choices(F&& try_one) {
  if (!rmsnorm_cluster_enabled() || !gpu::clusters_available()) return false;
  bool launched = false;
  for (int rows = 1; rows <= rmsnorm_cluster_max_rows<VPT> && !launched; ++rows)
    with_rmsnorm_cluster_shapes<VPT>([&](auto cb_tag, auto split_tag) {
      // A one-block "cluster" takes one row (two measured slower than 2 x 256 taking two).
      if (!launched && (decltype(cb_tag)::value > 1 || rows == 1)) launched = try_one(cb_tag, split_tag, rows);
    });
  return launched;
}
#endif
}  // namespace detail

}  // namespace fused
RCCLX_NAMESPACE_END
