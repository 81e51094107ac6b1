// examples/04_gemm_allreduce/gemm_allreduce.hpp: the fused GEMM + AllReduce kernel of example 04 (also
// timed by rcclx-bench-fused against the unfused GEMM followed by the DDA AllReduce): a plain tiled
// GEMM (64 x 64 output tiles through shared memory, a 4 x 4 register tile per thread) whose epilogue
// writes each finished tile into the symmetric buffer and publishes it; then the tiles are reduced
// across the ranks, flat (every rank reduces every tile) or tree (each tile's owner reduces it once,
// the others copy the result), blocks with fewer GEMM tiles reducing those of the busy ones, and
// a short last round's tiles split over K into parts that the AllReduce sums (split_plan).
// Walkthrough: docs/fusion.md.
#pragma once

#include <rcclx/fused/stages.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/gpu/shared.hpp>
#include <rcclx/testing/launch.hpp>

#include <cmath>
#include <cstddef>
#include <vector>

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

// The BM x BN tile (tm, tn) of A * B (A: M x K, B: K x N, row-major) in FP32, over the columns
// [k_begin, k_end) of A (0 and K: the whole product): thread i of the group computes micro tiles
// i, i + G, ... (MicroPerThread of them).
template <int MicroPerThread, class Group>
RCCLX_HOST_DEVICE void gemm_tile(const Group& g, const T* A, const T* B, std::size_t M, std::size_t N, std::size_t K,
                                 std::size_t tm, std::size_t tn, std::size_t k_begin, std::size_t k_end,
                                 float (&acc)[MicroPerThread][4][4]) {
  float(&As)[BK][BM + 4] = rcclx::gpu::block_shared<float[BK][BM + 4], struct a_stage>();  // +4: fewer bank conflicts
  float(&Bs)[BK][BN] = rcclx::gpu::block_shared<float[BK][BN], struct b_stage>();
  const int tid = g.thread_rank(), gs = g.size();
  // The tile's corner in A and B, and how much of it lies inside them (int from here on: a tile is small).
  const T* a = A + tm * BM * K + k_begin;
  const T* b = B + tn * BN + k_begin * N;
  const int rows = static_cast<int>(M - tm * BM < BM ? M - tm * BM : BM);
  const int cols = static_cast<int>(N - tn * BN < BN ? N - tn * BN : BN);
  for (auto& u : acc)
    for (auto& row : u)
      for (float& x : row) x = 0.0f;
  for (std::size_t k0 = k_begin; k0 < k_end; k0 += BK, a += BK, b += BK * N) {
    const int depth = static_cast<int>(k_end - k0 < BK ? k_end - k0 : BK);
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
      // The BK steps unrolled (on GPUs), in both kernels alike. Left to the compiler (unrolled by
      // 2), the fused kernel's copy of this loop (the same source, compiled in another kernel) ran
      // ~4% slower per block than the plain GEMM's on one H200 (docs/performance.md).
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
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
// A finished tile's accumulators, passed by value to publish_tile.
template <int MicroPerThread>
struct tile_acc {
  float v[MicroPerThread][4][4];
};
template <int MicroPerThread>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE tile_acc<MicroPerThread> copy_out(const float (&acc)[MicroPerThread][4][4]) {
  tile_acc<MicroPerThread> done;
  for (int u = 0; u < MicroPerThread; ++u)
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) done.v[u][i][j] = acc[u][i][j];
  return done;
}

// The epilogue of one GEMM tile (or part of one, see split_plan): the partial product, rounded to
// bf16 as an unfused GEMM would store it, goes into slot `slot` of this call's half of the rank's
// symmetric buffer (row-major BM x BN; what lies outside C, placed by `tile`, is left out: the
// reduction skips it too) and is published at once, for whichever block
// of each rank reduces it (tile_reducer::any_block, see reduce_range). A real call
// (RCCLX_NOINLINE), like reduce_tiles: the kernel's GEMM loop stays as the plain GEMM's is, with no
// AllReduce state live across its k-loop; the accumulators cross the call by value (registers).
template <rcclx::algorithm Algo, int MicroPerThread, class Group>
RCCLX_HOST_DEVICE RCCLX_NOINLINE void publish_tile(Group g, tile_acc<MicroPerThread> acc,
                                                   const rcclx::core::peer_table<T, max_ranks>* table,
                                                   rcclx::fused::tile_slots slots, int slot, int slots_used, int tile,
                                                   std::size_t M, std::size_t N) {
  namespace fz = rcclx::fused;
  const fz::tile_map map{M, N, BM, BN};  // tile t = (t / tiles_per_row, t % tiles_per_row)
  const std::size_t tm = tile / map.tiles_per_row(), tn = tile % map.tiles_per_row();
  const fz::tile_allreduce<T, max_ranks, Algo> ar(*table, slots, map.tile_elems(), slots_used,
                                                  fz::tile_reducer::any_block);
  store_tile<MicroPerThread>(g, acc.v, ar.input(slot), BN, M - tm * BM, N - tn * BN);
  ar.publish_part(g, slot, tile);  // to the ranks that reduce `tile` (tree: its owner sums the parts)
}

// The schedule of a call of G = `blocks` blocks per rank over `tiles` GEMM tiles: block b multiplies
// tiles b, b + G, ...; the last round (tiles from `last` = (rounds - 1) G on) has `r` of them. When
// r < G, that round runs r blocks at a fraction of the GPU's occupancy, slow for its work, while
// the other blocks reduce the earlier tiles. The kernel then splits each last-round tile's K
// range into `split` parts, multiplied by different blocks, and publishes every part as a tile of
// its own: the AllReduce sums the parts along with the ranks (tile_allreduce::reduce_parts), so the
// split costs no extra pass (an unfused GEMM would need one). Slots ("virtual tiles"): 0 .. last - 1
// the earlier tiles, last + s r + i part s of tile last + i (part 0 in the tile's own slot).
// How many parts: as many as leave a block idle (at most 4), and few enough that the idle blocks
// (G - r split) can reduce the earlier tiles while the shorter last round runs, at most 9 each: on
// one H200 with 8 emulated ranks (99 blocks each) M = 128 was fastest with 3 parts (99 earlier
// tiles, 12 idle blocks) and M = 512 with 2 (495 tiles, 65 idle blocks; docs/performance.md).
// Tree kernels split alike: a part's flag goes to the owner of its tile (publish_part), which sums
// the parts of every rank (reduce_parts) and publishes the tile's result.
struct split_plan {
  static constexpr int max_split = 4, max_tiles_per_idle_block = 9;
  int last = 0, r = 0, split = 1;
  int k_steps = 1;  // BK-wide steps of K

  RCCLX_HOST_DEVICE split_plan(int tiles, int blocks, std::size_t K) {
    const int rounds = (tiles + blocks - 1) / blocks;
    last = (rounds - 1) * blocks;
    r = tiles - last;
    k_steps = static_cast<int>((K + BK - 1) / BK);
    if (r > 0 && r < blocks) {
      const int fit = (blocks - 1) / r;  // parts that still leave a block idle
      split = fit < max_split ? fit : max_split;
      if (split > k_steps) split = k_steps;
      while (split > 1 && last > max_tiles_per_idle_block * (blocks - r * split)) --split;
      if (split < 1) split = 1;
    }
  }
  // Tile slots a call uses (tile_allreduce's num_tiles), at most tiles + blocks - 1.
  RCCLX_HOST_DEVICE int virtual_tiles() const { return last + r * split; }
  RCCLX_HOST_DEVICE bool is_split(int tile) const { return split > 1 && tile >= last; }
  RCCLX_HOST_DEVICE int tile_of(int v) const { return v < last ? v : last + (v - last) % r; }
  // The columns [k_begin, k_end) of A that virtual tile v covers: all of them (0, K) for an unsplit tile.
  RCCLX_HOST_DEVICE std::size_t k_begin(int v, std::size_t K) const { return v < last ? 0 : k_at((v - last) / r, K); }
  RCCLX_HOST_DEVICE std::size_t k_end(int v, std::size_t K) const {
    return v < last ? K : k_at((v - last) / r + 1, K);
  }

 private:
  RCCLX_HOST_DEVICE std::size_t k_at(int part, std::size_t K) const {  // whole BK steps, split as evenly as they go
    const std::size_t k = static_cast<std::size_t>(part * k_steps / split) * BK;
    return k < K ? k : K;
  }
};

// Which tiles block `b` reduces: tiles first, first + step, ... below end. Block b multiplied
// tiles b, b + B, b + 2B, ... (B blocks). The last round (the tiles from (K - 1) B on, K =
// ceil(tiles / B)) has R tiles, so blocks b < R multiply K tiles and the others K - 1: those finish
// a whole tile's time earlier and reduce every tile of the earlier rounds meanwhile (L = B - R of
// them: tiles j, j + L, ... for the j-th), while block b < R reduces only its last tile, the one
// that ends the GEMM (all of its parts, when split_plan splits it). When every block has as many
// tiles (R = B), each reduces its own.
struct reduce_range {
  int first, step, end;
  RCCLX_HOST_DEVICE reduce_range(int tiles, int blocks, int b) {
    const int rounds = (tiles + blocks - 1) / blocks, last = (rounds - 1) * blocks, r = tiles - last;
    if (rounds <= 1 || r == blocks) first = b, step = blocks, end = tiles;  // its own tiles
    else if (b < r) first = last + b, step = blocks, end = tiles;         // its last tile
    else first = b - r, step = blocks - r, end = last;                    // the earlier rounds' share
  }
};

// The reduction phase of a block that reduces a split tile (reduce_range: block b < r reduces tile
// last + b, whose part 0 it multiplied): every part, summed over the ranks and the parts, plus the
// bias, into C (tree: the tile's owner sums them and publishes the result, the other ranks copy
// it). A call of its own, so reduce_tiles keeps its registers.
template <rcclx::algorithm Algo, class Group>
RCCLX_HOST_DEVICE RCCLX_NOINLINE void reduce_split(Group g, rcclx::testing::launch_index ix,
                                                   const rcclx::core::peer_table<T, max_ranks>* table,
                                                   rcclx::fused::tile_slots slots, std::size_t M, std::size_t N,
                                                   std::size_t K, const float* bias, T* C) {
  namespace fz = rcclx::fused;
  const fz::tile_map map{M, N, BM, BN};
  const split_plan plan(static_cast<int>(map.num_tiles()), ix.num_blocks, K);
  const fz::tile_allreduce<T, max_ranks, Algo> ar(*table, slots, map.tile_elems(), plan.virtual_tiles(),
                                                  fz::tile_reducer::any_block);
  constexpr auto streaming = rcclx::gpu::cache_hint::streaming;
  const fz::epilogue<add_bias, fz::store<T, streaming>> epi{{bias}, {C, N}};
  ar.template reduce_parts<1, 4, streaming>(g, plan.last + ix.block, plan.split, plan.r, map, epi);
  ar.finish(g, ix.num_blocks);
}

// The reduction phase of one block (a real call too): the tiles of reduce_range, each summed over
// the ranks, plus the bias, into C.
template <rcclx::algorithm Algo, class Group>
RCCLX_HOST_DEVICE RCCLX_NOINLINE void reduce_tiles(Group g, rcclx::testing::launch_index ix,
                                                   const rcclx::core::peer_table<T, max_ranks>* table,
                                                   rcclx::fused::tile_slots slots, int slots_used, std::size_t M,
                                                   std::size_t N, const float* bias, T* C) {
  namespace fz = rcclx::fused;
  const fz::tile_map map{M, N, BM, BN};
  const int tiles = static_cast<int>(map.num_tiles());
  const fz::tile_allreduce<T, max_ranks, Algo> ar(*table, slots, map.tile_elems(), slots_used,
                                                  fz::tile_reducer::any_block);
  // The ranks' partial tiles are loaded and C stored evict-first (cache_hint::streaming): the
  // reduction runs while other blocks still multiply, and must not push their A and B out of L2.
  constexpr auto streaming = rcclx::gpu::cache_hint::streaming;
  const fz::epilogue<add_bias, fz::store<T, streaming>> epi{{bias}, {C, N}};
  const reduce_range mine(tiles, ix.num_blocks, ix.block);
  // Each tile: wait for every rank's flag (this rank's too: another block may have written it),
  // then reduce, peers' loads 4 at a time (flat: every rank reduces it; tree: its owner reduces it
  // and publishes the result, the other ranks copy that: owned tiles first).
  bool ok = true;
  for (int tile = mine.first; tile < mine.end && ok; tile += mine.step)
    if (Algo == rcclx::algorithm::flat || ar.owns(tile)) ok = ar.template reduce<1, 4, streaming>(g, tile, map, epi);
  if constexpr (Algo == rcclx::algorithm::tree)
    for (int tile = mine.first; tile < mine.end && ok; tile += mine.step)
      if (!ar.owns(tile)) ok = ar.template reduce<1, 4, streaming>(g, tile, map, epi);
  ar.finish(g, ix.num_blocks);  // every block, once: the next call uses the other buffer half
}

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
  rcclx::fused::tile_slots slots;                      // signal-pad slots for the tile flags (split_plan's virtual tiles)

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, rcclx::testing::launch_index ix) const {
    constexpr int mpt = on_gpu ? 1 : micro_tiles;  // micro tiles per thread
    // 1. This block's GEMM tiles (the last round's split into parts of K, see split_plan), each
    // published as soon as it is stored: the plain GEMM's loop (gemm_partials below), inline, where
    // the kernel's parameters stay uniform.
    const rcclx::fused::tile_map map{M, N, BM, BN};
    const int tiles = static_cast<int>(map.num_tiles());
    const split_plan plan(tiles, ix.num_blocks, K_r);
    const int used = plan.virtual_tiles();
    for (int v = ix.block; v < used; v += ix.num_blocks) {
      float acc[mpt][4][4];
      const int tile = plan.tile_of(v);
      const std::size_t tm = tile / map.tiles_per_row(), tn = tile % map.tiles_per_row();
      gemm_tile<mpt>(g, A[ix.rank], B[ix.rank], M, N, K_r, tm, tn, plan.k_begin(v, K_r), plan.k_end(v, K_r), acc);
      publish_tile<Algo, mpt>(g, copy_out(acc), tables[ix.rank], slots, v, used, tile, M, N);
    }
    // 2. The tiles summed over the ranks, plus the bias, into C: blocks b < r the parts of split
    // tile last + b, the others as reduce_range says.
    if (plan.split > 1 && ix.block < plan.r)
      reduce_split<Algo>(g, ix, tables[ix.rank], slots, M, N, K_r, bias, C[ix.rank]);
    else
      reduce_tiles<Algo>(g, ix, tables[ix.rank], slots, used, M, N, bias, C[ix.rank]);
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
      gemm_tile<mpt>(g, A[ix.rank], B[ix.rank], M, N, K_r, tm, tn, 0, K_r, acc);
      store_tile<mpt>(g, acc, out[ix.rank] + tm * BM * N + tn * BN, N, M - tm * BM, N - tn * BN);
    }
  }
};

// Host reference (examples/04 main.cpp and rcclx-bench-fused check C with it): element (i, j) of
// start + sum_r A_r B_r in float64 (a[r]: M x K row-major, b[r]: K x N), and the bound on what the
// fused kernel may differ from it before the final rounding: each rank's partial product rounded to
// bf16 (each part of a split tile on its own, see split_plan), accumulated in fp32, summed in fp32.
// The caller adds the bound of its last roundings.
struct reference_value {
  double sum, tol;
};
inline reference_value reference_at(const std::vector<std::vector<T>>& a, const std::vector<std::vector<T>>& b,
                                     std::size_t N, std::size_t K, const split_plan& plan, std::size_t i, std::size_t j,
                                     double start) {
  const int n = static_cast<int>(a.size());
  const int tile = static_cast<int>(i / BM * ((N + BN - 1) / BN) + j / BN), parts = plan.is_split(tile) ? plan.split : 1;
  reference_value ref{start, 0};
  for (int r = 0; r < n; ++r) {
    for (int s = 0; s < parts; ++s) {
      const int v = tile + s * plan.r;  // the part's slot (split_plan)
      const std::size_t k0 = parts > 1 ? plan.k_begin(v, K) : 0, k1 = parts > 1 ? plan.k_end(v, K) : K;
      double part = 0, mag = 0;
      for (std::size_t q = k0; q < k1; ++q) {
        const double x = static_cast<float>(a[r][i * K + q]) * static_cast<double>(static_cast<float>(b[r][q * N + j]));
        part += x;
        mag += std::fabs(x);
      }
      ref.sum += part;
      ref.tol += 0x1p-8 * std::fabs(part) + 2.0 * K * 0x1p-24 * mag + n * parts * 0x1p-24 * (std::fabs(part) + 1);
    }
  }
  return ref;
}

}  // namespace gemm_example
