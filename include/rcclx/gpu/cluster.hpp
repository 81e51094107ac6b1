// rcclx/gpu/cluster.hpp: thread-block clusters (NVIDIA sm_90 and later): the blocks of a cluster
// are scheduled together, reach each other's shared memory, and meet at a hardware barrier (no
// flag in global memory, no memory fence).
//
//   if (rcclx::gpu::clusters_available()) ...               // host: this device can launch them
//   // in a kernel launched in clusters (launch_clusters):
//   rcclx::gpu::cluster_sync();                              // every thread of every block
//   std::uint32_t mate = rcclx::gpu::cluster_shared_address(&my_smem[0], 2);  // block 2's copy
//   rcclx::gpu::st_async(mate, mate_bar, lo, hi);            // a message (see below)
//
// Other backends (AMD has no clusters; the host backend has no blocks) report
// clusters_available() == false, and the device functions are absent: callers keep a path without
// them.
#pragma once

#include "reduce.hpp"
#include "runtime.hpp"
#include "vendor.hpp"

#if RCCLX_BACKEND_CUDA
#  include <cooperative_groups.h>
#  include <cub/warp/warp_reduce.cuh>
#endif

#include <cstdint>
#include <utility>

RCCLX_NAMESPACE_BEGIN
namespace gpu {

// Does the current device run cluster kernels? (CUDA, compute capability 9.0 or later.)
inline bool clusters_available() {
#if RCCLX_BACKEND_CUDA
  int major = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, current_device()), "cudaDeviceGetAttribute");
  return major >= 9;
#else
  return false;
#endif
}

#if RCCLX_BACKEND_CUDA
// Compiled for a device with clusters? (Kernels built for older architectures as well keep these
// calls out of their bodies there; the host side checks clusters_available() before launching.)
#  if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#    define RCCLX_DETAIL_CLUSTERS 1
#  else
#    define RCCLX_DETAIL_CLUSTERS 0
#  endif

// Barrier of every thread of every block of the cluster, with the ordering a block barrier gives
// for shared memory, extended to the cluster's shared memory.
RCCLX_DEVICE RCCLX_FORCEINLINE void cluster_sync() {
#  if RCCLX_DETAIL_CLUSTERS
  cooperative_groups::this_cluster().sync();
#  else
  __trap();
#  endif
}

// cluster_sync in two halves, for work between them: every thread calls cluster_arrive_relaxed,
// later cluster_wait (which returns once every thread of the cluster has arrived), and never arrives
// twice without a wait between. The arrive is relaxed: it orders no memory, it only says "this
// block is running". Its use: a block must not touch a mate's shared memory before the mate has
// started; arrive first thing, wait just before the first remote access, and the wait is paid
// behind the work in between.
RCCLX_DEVICE RCCLX_FORCEINLINE void cluster_arrive_relaxed() {
#  if RCCLX_DETAIL_CLUSTERS
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#  else
  __trap();
#  endif
}

RCCLX_DEVICE RCCLX_FORCEINLINE void cluster_wait() {
#  if RCCLX_DETAIL_CLUSTERS
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
#  else
  __trap();
#  endif
}

// This block's index in its cluster.
RCCLX_DEVICE RCCLX_FORCEINLINE unsigned cluster_block_rank() {
#  if RCCLX_DETAIL_CLUSTERS
  return cooperative_groups::this_cluster().block_rank();
#  else
  return 0;
#  endif
}

// Point-to-point messages between the blocks of a cluster, without a cluster barrier: a block
// posts how many bytes it expects on one of its own mbarriers (mbarrier_expect_bytes), its mates
// write into its shared memory with st_async (each write completes its bytes on that mbarrier,
// with release semantics at cluster scope), and it waits for the phase (mbarrier_wait_parity,
// acquire at cluster scope). No fence or barrier orders anything else, unlike cluster_sync, whose
// arrive releases every earlier write of the thread, global ones included (measured on an H200:
// ~0.2 us per row of the fused AllReduce + RMSNorm cluster kernel).
//
//   __shared__ std::uint64_t bar;  float box[4];  // (gpu::block_shared in rcclx code)
//   if (threadIdx.x == 0) mbarrier_init(&bar, 1);
//   fence_mbarrier_init();  cluster_arrive_relaxed();  ...  cluster_wait();  // mates see the init
//   if (threadIdx.x == 0) mbarrier_expect_bytes(&bar, 4 * sizeof(float));   // every phase
//   if (threadIdx.x < 4) st_async(cluster_shared_address(&box[me], threadIdx.x),
//                                 cluster_shared_address(&bar, threadIdx.x), bits, 0u);
//   mbarrier_wait_parity(&bar, phase & 1);  // box[] holds every mate's value
//
// `bar` must be 8-byte aligned, st_async's target too; a cluster of one block may not use st_async.

// The 32-bit shared::cluster address of `p` (this block's shared memory) in block `rank`.
RCCLX_DEVICE RCCLX_FORCEINLINE std::uint32_t cluster_shared_address(const void* p, unsigned rank) {
#  if RCCLX_DETAIL_CLUSTERS
  std::uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(r)
               : "r"(static_cast<std::uint32_t>(__cvta_generic_to_shared(p))), "r"(rank));
  return r;
#  else
  (void)p;
  (void)rank;
  __trap();
  return 0;
#  endif
}

// One thread: an mbarrier in this block's shared memory expecting `arrivals` arrivals per phase.
RCCLX_DEVICE RCCLX_FORCEINLINE void mbarrier_init(std::uint64_t* bar, unsigned arrivals) {
#  if RCCLX_DETAIL_CLUSTERS
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(static_cast<std::uint32_t>(__cvta_generic_to_shared(bar))),
               "r"(arrivals)
               : "memory");
#  else
  (void)bar;
  (void)arrivals;
  __trap();
#  endif
}

// Orders this thread's earlier mbarrier_init before its next cluster arrive (mates may then use
// the mbarriers once their cluster_wait has returned).
RCCLX_DEVICE RCCLX_FORCEINLINE void fence_mbarrier_init() {
#  if RCCLX_DETAIL_CLUSTERS
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#  else
  __trap();
#  endif
}

// One arrival on this block's `bar`, raising the bytes its current phase waits for by `bytes`.
RCCLX_DEVICE RCCLX_FORCEINLINE void mbarrier_expect_bytes(std::uint64_t* bar, unsigned bytes) {
#  if RCCLX_DETAIL_CLUSTERS
  asm volatile(
      "{\n\t.reg .b64 state;\n\t"
      "mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n\t}" ::"r"(
          static_cast<std::uint32_t>(__cvta_generic_to_shared(bar))),
      "r"(bytes)
      : "memory");
#  else
  (void)bar;
  (void)bytes;
  __trap();
#  endif
}

// Writes the 8 bytes {lo, hi} at shared::cluster address `dst` and completes 8 bytes on the
// mbarrier at `bar` (an address in the same block as dst; cluster_shared_address).
RCCLX_DEVICE RCCLX_FORCEINLINE void st_async(std::uint32_t dst, std::uint32_t bar, std::uint32_t lo, std::uint32_t hi) {
#  if RCCLX_DETAIL_CLUSTERS
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];" ::"r"(dst),
               "r"(lo), "r"(hi), "r"(bar)
               : "memory");
#  else
  (void)dst;
  (void)bar;
  (void)lo;
  (void)hi;
  __trap();
#  endif
}

// Waits until the phase of this block's `bar` with parity `parity` has completed; acquire at cluster
// scope (the st_async writes that completed it are visible). Bounded by its senders: every caller
// in rcclx waits only for mates that send after their own bounded waits.
RCCLX_DEVICE RCCLX_FORCEINLINE void mbarrier_wait_parity(std::uint64_t* bar, unsigned parity) {
#  if RCCLX_DETAIL_CLUSTERS
  const std::uint32_t a = static_cast<std::uint32_t>(__cvta_generic_to_shared(bar));
  std::uint32_t done = 0;
  do {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
  } while (!done);
#  else
  (void)bar;
  (void)parity;
  __trap();
#  endif
}

namespace detail {
// A launch configuration with clusters of `cluster_blocks` consecutive blocks; `attr` must outlive it.
inline cudaLaunchConfig_t cluster_config(int grid, int threads, int cluster_blocks, stream_t stream,
                                         cudaLaunchAttribute& attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.stream = stream;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(cluster_blocks);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cfg;
}
}  // namespace detail

// Launches `kernel` on `grid` blocks of `threads` in clusters of `cluster_blocks` consecutive blocks
// (grid a multiple of it). Host side; the device must have clusters (clusters_available()).
template <class... Params, class... Args>
inline void launch_clusters(void (*kernel)(Params...), int grid, int threads, int cluster_blocks, stream_t stream,
                            Args&&... args) {
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = detail::cluster_config(grid, threads, cluster_blocks, stream, attr);
  check(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...), "cudaLaunchKernelEx (clusters)");
}

// Clusters of `kernel` (cluster_blocks blocks of `threads`) the device can hold at once: the bound
// for kernels whose clusters wait on each other.
template <class... Params>
inline int max_active_clusters(void (*kernel)(Params...), int threads, int cluster_blocks) {
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = detail::cluster_config(cluster_blocks, threads, cluster_blocks, stream_t{}, attr);
  int n = 0;
  check(cudaOccupancyMaxActiveClusters(&n, kernel, &cfg), "cudaOccupancyMaxActiveClusters");
  return n;
}

// A warp's sum exactly as the first phase of gpu::block_reduce<float, N>::sum computes it (CUB's
// warp reduction), valid in lane 0. block_reduce then adds the warp sums one after another in warp
// order; doing the same over the warps of several blocks gives block_reduce's bits for a block
// spread over a cluster.
RCCLX_DEVICE RCCLX_FORCEINLINE float warp_sum_as_block_reduce(float x) {
  using warp_reduce = ::cub::WarpReduce<float>;
  __shared__ typename warp_reduce::TempStorage tmp[32];  // one per warp (empty for the shuffle variant)
  return warp_reduce(tmp[threadIdx.x / 32]).Reduce(x, detail::sum_op{});
}
#endif  // RCCLX_BACKEND_CUDA

}  // namespace gpu
RCCLX_NAMESPACE_END
