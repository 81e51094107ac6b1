// rcclx/gpu/cluster.hpp: thread-block clusters (NVIDIA sm_90 and later): the blocks of a cluster
// are scheduled together, reach each other's shared memory, and meet at a hardware barrier (no
// flag in global memory, no memory fence).
//
//   if (rcclx::gpu::clusters_available()) ...               // host: this device can launch them
//   // in a kernel compiled with __cluster_dims__(4, 1, 1):
//   float* mate = rcclx::gpu::cluster_map_shared(&my_smem[0], 2);  // block 2's copy
//   rcclx::gpu::cluster_sync();                              // every thread of every block
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

#include <utility>

RCCLX_NAMESPACE_BEGIN
namespace gpu {

// Does the current device run cluster kernels? (CUDA, compute capability 9.0 or later.)
inline bool clusters_available() {
#if RCCLX_BACKEND_CUDA
  int d = 0, major = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d), "cudaDeviceGetAttribute");
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

// The address of `p` (this block's shared memory) in block `rank` of the cluster.
template <class T>
RCCLX_DEVICE RCCLX_FORCEINLINE T* cluster_map_shared(T* p, unsigned rank) {
#  if RCCLX_DETAIL_CLUSTERS
  return cooperative_groups::this_cluster().map_shared_rank(p, rank);
#  else
  (void)rank;
  return p;
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
