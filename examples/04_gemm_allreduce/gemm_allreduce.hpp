// examples/04_gemm_allreduce/gemm_allreduce.hpp: the fused GEMM + AllReduce kernel of example 04 (also
// timed by rcclx-bench-fused against the unfused GEMM followed by the DDA AllReduce): a plain tiled
// GEMM (64 x 64 output tiles through shared memory, a 4 x 4 register tile per thread) whose epilogue
// writes each finished tile into the symmetric buffer and publishes it; then the tiles are reduced
// across the ranks, flat (every rank reduces every tile) or tree (each tile's owner reduces it once,
// the others copy the result). Walkthrough: docs/fusion.md.
#pragma once

#include <rcclx/fused/stages.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/gpu/shared.hpp>
#include <rcclx/testing/launch.hpp>

#include <cstddef>

namespace gemm_example {

using T = rcclx::bf16;
constexpr int max_ranks = 8;
constexpr int BM = 64, BN = 64, BK = 16;  // output tile, and the K step staged in shared memory
constexpr int micro_tiles = (BM / 4) * (BN / 4);  // 4 x 4 outputs each: 256 per tile
constexpr bool on_gpu = rcclx::current_backend != rcclx::backend::host;
constexpr int threads = on_gpu ? micro_tiles : 1;  // a host "block" is one thread doing all 256
// Blocks per SM both kernels are compiled for (__launch_bounds__): what the GEMM alone reaches
// (40 registers on sm_90), so the fused kernel gets the same persistent grid as the plain GEMM.
constexpr int blocks_per_sm = 6;

// The BM x BN tile (tm, tn) of A * B (A: M x K, B: K x N, row-major) in FP32: thread i of the group
// computes micro tiles i, i + G, ... (MicroPerThread of them).
template <int MicroPerThread, class Group>
RCCLX_HOST_DEVICE void gemm_tile(const Group& g, const T* A, const T* B, std::size_t M, std::size_t N, std::size_t K,
                                 std::size_t tm, std::size_t tn, float (&acc)[MicroPerThread][4][4]) {
  float(&As)[BK][BM + 4] = rcclx::gpu::block_shared<float[BK][BM + 4], struct a_stage>();  // +4: fewer bank conflicts
  float(&Bs)[BK][BN] = rcclx::gpu::block_shared<float[BK][BN], struct b_stage>();
  const int tid = g.thread_rank(), gs = g.size();
  // The tile's corner in A and B, and how much of it lies inside them (int from here on: a tile is small).
  const T* a = A + tm * BM * K;
  const T* b = B + tn * BN;
  const int rows = static_cast<int>(M - tm * BM < BM ? M - tm * BM : BM);
  const int cols = static_cast<int>(N - tn * BN < BN ? N - tn * BN : BN);
  for (auto& u : acc)
    for (auto& row : u)
      for (float& x : row) x = 0.0f;
  for (std::size_t k0 = 0; k0 < K; k0 += BK, a += BK, b += BK * N) {
    const int depth = static_cast<int>(K - k0 < BK ? K - k0 : BK);
    g.sync();  // everyone is done with the previous stage
    for (int i = tid; i < BM * BK; i += gs) {
      const int r = i / BK, c = i % BK;
      As[c][r] = r < rows && c < depth ? static_cast<float>(a[r * K + c]) : 0.0f;
    }
    for (int i = tid; i < BK * BN; i += gs) {
      const int r = i / BN, c = i % BN;
      Bs[r][c] = r < depth && c < cols ? static_cast<float>(b[r * N + c]) : 0.0f;
    }
    g.sync();
    for (int u = 0; u < MicroPerThread; ++u) {
      const int id = tid + u * gs, mu = id / (BN / 4), nu = id % (BN / 4);
      for (int kk = 0; kk < BK; ++kk) {
        float a[4], b[4];
        for (int i = 0; i < 4; ++i) a[i] = As[kk][mu * 4 + i];
        for (int j = 0; j < 4; ++j) b[j] = Bs[kk][nu * 4 + j];
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j) acc[u][i][j] += a[i] * b[j];
      }
    }
  }
}

// Stores thread-held micro tiles of a BM x BN tile to dst (row-major, leading dimension ld),
// rounded to T, leaving out rows >= rows and columns >= cols (outside the output).
template <int MicroPerThread, class Group>
RCCLX_HOST_DEVICE void store_tile(const Group& g, const float (&acc)[MicroPerThread][4][4], T* dst, std::size_t ld,
                                  std::size_t rows, std::size_t cols) {
  for (int u = 0; u < MicroPerThread; ++u) {
    const int id = g.thread_rank() + u * g.size(), mu = id / (BN / 4), nu = id % (BN / 4);
    if (static_cast<std::size_t>(nu * 4) >= cols) continue;  // cols is a multiple of 4
    for (int i = 0; i < 4 && static_cast<std::size_t>(mu * 4 + i) < rows; ++i) {
      T* row = dst + (mu * 4 + i) * ld + nu * 4;
      for (int j = 0; j < 4; ++j) row[j] = T(acc[u][i][j]);
    }
  }
}

// [fusion-stage]
// Your own epilogue stage: any trivially copyable functor with this call operator. It sees the
// reduced values of E consecutive columns of one output row, in FP32, and may change them.
struct add_bias {
  const float* bias;  // [N]; nullptr: no bias
  template <int E>
  RCCLX_HOST_DEVICE void operator()(const rcclx::fused::position& p, float (&v)[E]) const {
    if (!bias) return;
    for (int i = 0; i < E; ++i) v[i] += bias[p.col + i];
  }
};
// [fusion-stage]

// [fusion-kernel]
// One block of one rank: of every emulated rank (testing::launch_emulated), or of this process's
// rank in a real job (testing::launch_rank, as main.cpp's --procs mode does; or the body of your
// own __global__ kernel with ix.rank = the process's rank, ix.block = blockIdx.x).
// Algo: flat (every rank reduces every tile: one step, for small outputs) or tree (each tile is
// reduced once, by its owner, and the others copy the result: ring-like traffic, for large ones).
template <rcclx::algorithm Algo>
struct gemm_allreduce_kernel {
  // Compiled for 256-thread blocks, 6 resident per SM (CUDA; 6 waves per SIMD on AMD): the plain
  // GEMM's occupancy, so the fused kernel runs the GEMM exactly as fast.
  static constexpr int max_threads_per_block = threads, min_blocks_per_multiprocessor = blocks_per_sm;
  const rcclx::core::peer_table<T, max_ranks>* tables[max_ranks];  // rank r's view (device memory)
  const T* A[max_ranks];                               // rank r: M x K_r
  const T* B[max_ranks];                               // rank r: K_r x N
  T* C[max_ranks];                                     // rank r's copy of the result: M x N
  const float* bias;
  std::size_t M, N, K_r;
  rcclx::fused::tile_slots slots;                      // signal-pad slots for the tile flags

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, rcclx::testing::launch_index ix) const {
    namespace fz = rcclx::fused;
    constexpr int mpt = on_gpu ? 1 : micro_tiles;  // micro tiles per thread
    const auto& t = *tables[ix.rank];
    const fz::tile_map map{M, N, BM, BN};          // tile t = (t / tiles_per_row, t % tiles_per_row)
    const int tiles = static_cast<int>(map.num_tiles());
    // This call's half of the rank's symmetric buffer: tile t's partial product goes to
    // inputs + t * tile_elems. Only this pointer lives through the GEMM loop; the AllReduce object
    // is built after it, so the reduction takes no registers from the GEMM.
    T* const inputs = fz::tile_allreduce<T, max_ranks, Algo>(t, slots, map.tile_elems(), tiles).input(0);
    // 1. This block's GEMM tiles, one after another; each partial product, rounded to bf16 as an
    //    unfused GEMM would store it, goes into the symmetric buffer (row-major BM x BN; what lies
    //    outside C is left out: reduce skips it too).
    for (int tile = ix.block; tile < tiles; tile += ix.num_blocks) {
      float acc[mpt][4][4];
      const std::size_t tm = tile / map.tiles_per_row(), tn = tile % map.tiles_per_row();
      gemm_tile<mpt>(g, A[ix.rank], B[ix.rank], M, N, K_r, tm, tn, acc);
      store_tile<mpt>(g, acc, inputs + tile * map.tile_elems(), BN, M - tm * BM, N - tn * BN);
    }
    // 2. The same tiles summed over the ranks, plus the bias, into C. The blocks with this index on
    //    the other ranks computed the same tiles at the same pace, so the flags are (nearly) all up:
    //    one wait for all of them, then the reductions back to back, peer loads 4 at a time.
    fz::tile_allreduce<T, max_ranks, Algo> ar(t, slots, map.tile_elems(), tiles);
    const fz::epilogue<add_bias, fz::store<T>> epi{{bias}, {C[ix.rank], N}};
    ar.publish_strided(g, ix.block, ix.num_blocks);
    bool ok = ar.wait_inputs_strided(g, ix.block, ix.num_blocks);  // tree: the tiles this rank owns
    if constexpr (Algo == rcclx::algorithm::flat) {
      for (int tile = ix.block; tile < tiles && ok; tile += ix.num_blocks) ok = ar.template reduce<1, 4>(g, tile, map, epi);
    } else {
      // The owned tiles first (reduced, handed to the epilogue, published), then the others, whose
      // results their owners published meanwhile: one wait for all of them, then copies.
      for (int tile = ix.block; tile < tiles && ok; tile += ix.num_blocks)
        if (ar.owns(tile)) ok = ar.template reduce<1, 4>(g, tile, map, epi);
      if (ok) ok = ar.wait_results_strided(g, ix.block, ix.num_blocks);
      for (int tile = ix.block; tile < tiles && ok; tile += ix.num_blocks)
        if (!ar.owns(tile)) ok = ar.template reduce<1, 4>(g, tile, map, epi);
    }
    ar.finish(g, ix.num_blocks);  // every block, once: the next call uses the other buffer half
  }
};
using gemm_allreduce = gemm_allreduce_kernel<rcclx::algorithm::flat>;
using gemm_allreduce_tree = gemm_allreduce_kernel<rcclx::algorithm::tree>;
// [fusion-kernel]

// The unfused first half, for comparison: the same GEMM, each rank's partial product written
// row-major (M x N) to out[rank] (e.g. its symmetric buffer, for a DDA AllReduce to sum).
struct gemm_partials {
  static constexpr int max_threads_per_block = threads, min_blocks_per_multiprocessor = blocks_per_sm;
  const T* A[max_ranks];
  const T* B[max_ranks];
  T* out[max_ranks];
  std::size_t M, N, K_r;

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, rcclx::testing::launch_index ix) const {
    constexpr int mpt = on_gpu ? 1 : micro_tiles;
    const rcclx::fused::tile_map map{M, N, BM, BN};
    const int tiles = static_cast<int>(map.num_tiles());
    for (int tile = ix.block; tile < tiles; tile += ix.num_blocks) {
      float acc[mpt][4][4];
      const std::size_t tm = tile / map.tiles_per_row(), tn = tile % map.tiles_per_row();
      gemm_tile<mpt>(g, A[ix.rank], B[ix.rank], M, N, K_r, tm, tn, acc);
      store_tile<mpt>(g, acc, out[ix.rank] + tm * BM * N + tn * BN, N, M - tm * BM, N - tn * BN);
    }
  }
};

}  // namespace gemm_example
