// Device code for the sm_90 check of the checked tile call (tests/compile/CMakeLists.txt,
// ptxas_check.cmake): a kernel of the shape rcclx-bench-checks times (every block copies its tile
// into the symmetric buffer, publishes it and reduces it flat into a store), and the same with
// tree, compiled with RCCLX_CHECKS=1 by nvcc; ptxas must report no stack frame for either. A
// checked call keeps its object in registers: a real call or a pointer to one of its members chosen
// at run time puts the whole object in local memory (docs/performance.md, checked mode cost).
#ifndef RCCLX_CHECKS
#  define RCCLX_CHECKS 1
#endif
#include <rcclx/fused/stages.hpp>
#include <rcclx/fused/tile_allreduce.hpp>

template <rcclx::algorithm Algo>
__device__ void tile_call(const rcclx::core::peer_table<rcclx::bf16, 8>* tables, const rcclx::bf16* in,
                          rcclx::bf16* out, rcclx::fused::tile_slots slots, std::size_t tile_elems, int tiles) {
  namespace fz = rcclx::fused;
  using T = rcclx::bf16;
  const rcclx::gpu::block_group g{};
  const int block = static_cast<int>(blockIdx.x), blocks = static_cast<int>(gridDim.x);
  fz::tile_allreduce<T, 8, Algo> ar(*tables, slots, tile_elems, tiles);
  const fz::row_tiles map{static_cast<std::size_t>(tiles), tile_elems};
  ar.declare_map(map);
  const fz::epilogue<fz::store<T>> epi{fz::store<T>{out, tile_elems}};
  constexpr std::size_t e = 16 / sizeof(T);
  for (int t = block; t < tiles; t += blocks) {
    const T* src = in + static_cast<std::size_t>(t) * tile_elems;
    T* dst = ar.input(t);
    for (std::size_t v = threadIdx.x; v < tile_elems / e; v += blockDim.x)
      rcclx::gpu::store16(dst + v * e, rcclx::gpu::load16(src + v * e));
    ar.publish(g, t);
  }
  for (int t = block; t < tiles; t += blocks)
    if (!ar.template reduce<1>(g, t, map, epi)) break;
  ar.finish(g, blocks);
#ifdef RCCLX_PTXAS_STACK_CONTROL
  // The check's negative control: per-peer pointers in an array indexed at run time, which the
  // compiler can only keep in local memory.
  const T* volatile peers[8];
  for (int p = 0; p < 8; ++p) peers[p] = tables->data[p];
  out[threadIdx.x] = peers[threadIdx.x % 8][0];
#endif
}

extern "C" __global__ void
    rcclx_ptxas_tile_flat(const rcclx::core::peer_table<rcclx::bf16, 8>* tables, const rcclx::bf16* in, rcclx::bf16* out,
                          rcclx::fused::tile_slots slots, std::size_t tile_elems, int tiles) {
  tile_call<rcclx::algorithm::flat>(tables, in, out, slots, tile_elems, tiles);
}

extern "C" __global__ void
    rcclx_ptxas_tile_tree(const rcclx::core::peer_table<rcclx::bf16, 8>* tables, const rcclx::bf16* in, rcclx::bf16* out,
                          rcclx::fused::tile_slots slots, std::size_t tile_elems, int tiles) {
  tile_call<rcclx::algorithm::tree>(tables, in, out, slots, tile_elems, tiles);
}
