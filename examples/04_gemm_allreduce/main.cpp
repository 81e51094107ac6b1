// Example 04: a tiled GEMM whose epilogue AllReduces each tile across ranks as soon as it is done:
// the row-parallel linear layer of tensor parallelism (every rank multiplies its K-shard; the
// partial products are summed), C = sum over ranks r of A_r * B_r, plus a bias, on 8 emulated ranks
// (one GPU, or threads on the host backend). Checked against a float64 reference.
//
//   rcclx_example_gemm_allreduce [M N K]        (K is split evenly over the ranks)
//
// Walkthrough: docs/fusion.md. The GEMM is deliberately plain (64 x 64 tiles through shared memory,
// a 4 x 4 register tile per thread); the part to copy is the epilogue: write the finished tile
// into the symmetric buffer, publish it, and reduce the previous tile while the peers finish this one.
#include <rcclx/fused/stages.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/gpu/shared.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

using T = rcclx::bf16;
constexpr int max_ranks = 8;
constexpr int BM = 64, BN = 64, BK = 16;  // output tile, and the K step staged in shared memory
constexpr int micro_tiles = (BM / 4) * (BN / 4);  // 4 x 4 outputs each: 256 per tile
constexpr bool on_gpu = rcclx::current_backend != rcclx::backend::host;
constexpr int threads = on_gpu ? micro_tiles : 1;  // a host "block" is one thread doing all 256

// The BM x BN tile (tm, tn) of A * B (A: M x K, B: K x N, row-major) in FP32: thread i of the group
// computes micro tiles i, i + G, ... (MicroPerThread of them).
template <int MicroPerThread, class Group>
RCCLX_HOST_DEVICE void gemm_tile(const Group& g, const T* A, const T* B, std::size_t M, std::size_t N, std::size_t K,
                                 std::size_t tm, std::size_t tn, float (&acc)[MicroPerThread][4][4]) {
  float(&As)[BK][BM + 4] = rcclx::gpu::block_shared<float[BK][BM + 4], struct a_stage>();  // +4: fewer bank conflicts
  float(&Bs)[BK][BN] = rcclx::gpu::block_shared<float[BK][BN], struct b_stage>();
  const int tid = g.thread_rank(), gs = g.size();
  for (auto& u : acc)
    for (auto& row : u)
      for (float& x : row) x = 0.0f;
  for (std::size_t k0 = 0; k0 < K; k0 += BK) {
    g.sync();  // everyone is done with the previous stage
    for (int i = tid; i < BM * BK; i += gs) {
      const std::size_t r = tm * BM + i / BK, c = k0 + i % BK;
      As[i % BK][i / BK] = r < M && c < K ? static_cast<float>(A[r * K + c]) : 0.0f;
    }
    for (int i = tid; i < BK * BN; i += gs) {
      const std::size_t r = k0 + i / BN, c = tn * BN + i % BN;
      Bs[i / BN][i % BN] = r < K && c < N ? static_cast<float>(B[r * N + c]) : 0.0f;
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

// [fusion-stage]
// Your own epilogue stage: any trivially copyable functor with this call operator. It sees the
// reduced values of E consecutive columns of one output row, in FP32, and may change them.
struct add_bias {
  const float* bias;  // [N]
  template <int E>
  RCCLX_HOST_DEVICE void operator()(const rcclx::fused::position& p, float (&v)[E]) const {
    for (int i = 0; i < E; ++i) v[i] += bias[p.col + i];
  }
};
// [fusion-stage]

// [fusion-kernel]
// One block of one emulated rank (testing::launch_emulated); in a real job this is the body of
// your __global__ kernel with ix.rank = the process's rank, ix.block = blockIdx.x.
struct gemm_allreduce {
  const rcclx::core::peer_table<T, max_ranks>* tables;  // every rank's view (device memory)
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
    const auto& t = tables[ix.rank];
    const fz::tile_map map{M, N, BM, BN};          // tile t = (t / tiles_per_row, t % tiles_per_row)
    const int tiles = static_cast<int>(map.num_tiles());
    fz::tile_allreduce<T, max_ranks> ar(t, slots, map.tile_elems(), tiles);  // flat: every rank reduces
    const fz::epilogue<add_bias, fz::store<T>> epi{{bias}, {C[ix.rank], N}};
    bool ok = true;
    int previous = -1;
    for (int tile = ix.block; tile < tiles; tile += ix.num_blocks) {
      // 1. This rank's partial product of the tile, in registers.
      float acc[mpt][4][4];
      const std::size_t tm = tile / map.tiles_per_row(), tn = tile % map.tiles_per_row();
      gemm_tile<mpt>(g, A[ix.rank], B[ix.rank], M, N, K_r, tm, tn, acc);
      // 2. Epilogue part one: into this rank's symmetric buffer (row-major BM x BN), flag up.
      T* slot = ar.input(tile);
      for (int u = 0; u < mpt; ++u) {
        const int id = g.thread_rank() + u * g.size(), mu = id / (BN / 4), nu = id % (BN / 4);
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j) slot[(mu * 4 + i) * BN + nu * 4 + j] = T(acc[u][i][j]);
      }
      ar.publish(g, tile);
      // 3. Epilogue part two, one tile behind: the peers have had a whole tile's time to finish
      //    `previous`; sum it over the ranks, add the bias, store C.
      if (previous >= 0 && ok) ok = ar.reduce<2>(g, previous, map, epi);
      previous = tile;
    }
    if (previous >= 0 && ok) ok = ar.reduce<2>(g, previous, map, epi);
    ar.finish(g, ix.num_blocks);  // every block, once: the next call uses the other buffer half
  }
};
// [fusion-kernel]

const char* backend_name() {
  switch (rcclx::current_backend) {
    case rcclx::backend::hip: return "HIP";
    case rcclx::backend::cuda: return "CUDA";
    default: return "host (threads)";
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (on_gpu && rcclx::gpu::device_count() == 0) {
    std::printf("built for %s but no GPU is present; rebuild with RCCLX_BACKEND=host\n", backend_name());
    return 0;
  }
  const int n = 8;
  std::size_t M = on_gpu ? 128 : 96, N = on_gpu ? 4096 : 136, K = on_gpu ? 4096 : 256;
  if (argc == 4) {
    M = std::strtoull(argv[1], nullptr, 10);
    N = std::strtoull(argv[2], nullptr, 10);
    K = std::strtoull(argv[3], nullptr, 10);
  }
  if (N % 8 != 0 || K % n != 0 || M == 0) {
    std::printf("N must be a multiple of 8 and K of %d\n", n);
    return 2;
  }
  const std::size_t K_r = K / n;
  std::printf("rcclx fused GEMM + AllReduce on %s: %d emulated ranks, C[%zu x %zu] = sum_r A_r[%zu x %zu] B_r + bias\n",
              backend_name(), n, M, N, M, K_r);

  // [fusion-setup]
  // Tile flags live in the signal pads, in their own slot range; the symmetric buffer holds two
  // halves of every rank's tiles (calls alternate between them).
  const rcclx::fused::tile_map map{M, N, BM, BN};
  const int tiles = static_cast<int>(map.num_tiles());
  const rcclx::fused::tile_slots slots{0, tiles};
  const std::size_t bytes = rcclx::fused::tile_allreduce<T, max_ranks>::workspace_bytes(map.tile_elems(), tiles);
  rcclx::testing::emulated_world<max_ranks> world(n, bytes, slots.end());
  rcclx::fused::tile_allreduce<T, max_ranks>::check("example", world.table<T>(0), slots, map.tile_elems(), tiles);
  // [fusion-setup]

  // Inputs, uniform in [-1, 1), and their float64 reference.
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<std::vector<T>> a(n, std::vector<T>(M * K_r)), b(n, std::vector<T>(K_r * N));
  std::vector<float> bias(N);
  for (int r = 0; r < n; ++r) {
    for (auto& x : a[r]) x = T(dist(gen));
    for (auto& x : b[r]) x = T(dist(gen));
  }
  for (auto& x : bias) x = dist(gen);
  gemm_allreduce k{};
  k.tables = world.device_tables<T>();
  std::vector<void*> owned;
  auto upload = [&](const void* src, std::size_t size) {
    void* p = rcclx::gpu::device_malloc(size);
    rcclx::gpu::copy(p, src, size);
    owned.push_back(p);
    return p;
  };
  for (int r = 0; r < n; ++r) {
    k.A[r] = static_cast<const T*>(upload(a[r].data(), a[r].size() * sizeof(T)));
    k.B[r] = static_cast<const T*>(upload(b[r].data(), b[r].size() * sizeof(T)));
    k.C[r] = static_cast<T*>(upload(std::vector<T>(M * N, T(0.0f)).data(), M * N * sizeof(T)));
  }
  k.bias = static_cast<const float*>(upload(bias.data(), N * sizeof(float)));
  k.M = M;
  k.N = N;
  k.K_r = K_r;
  k.slots = slots;

  // All blocks of all ranks must be resident at once: they wait for each other's tiles.
  const int blocks = std::max(1, std::min({tiles, on_gpu ? 32 : 4,
                                           rcclx::testing::max_blocks_per_rank<gemm_allreduce>(n, threads)}));
  double best_ms = 1e30;
  for (int rep = 0; rep < (on_gpu ? 5 : 2); ++rep) {  // repeated calls alternate buffer halves
    const auto t0 = std::chrono::steady_clock::now();
    rcclx::testing::launch_emulated(n, blocks, threads, k);
    rcclx::gpu::device_synchronize();
    best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  world.throw_if_error();

  // Check every rank's C against float64: partial products rounded to bf16 on each rank, summed in
  // fp32 in rank order, rounded once more, plus the bias.
  int bad = 0;
  double max_err = 0;
  std::vector<T> c(M * N), c0(M * N);
  rcclx::gpu::copy(c0.data(), k.C[0], M * N * sizeof(T));
  for (int r = 0; r < n; ++r) {
    rcclx::gpu::copy(c.data(), k.C[r], M * N * sizeof(T));
    for (std::size_t i = 0; i < M * N; ++i)
      if (c[i].bits != c0[i].bits) ++bad;  // every rank holds the same bits
  }
  for (std::size_t i = 0; i < M; ++i) {
    for (std::size_t j = 0; j < N; ++j) {
      double sum = bias[j], tol = 0;
      for (int r = 0; r < n; ++r) {
        double part = 0, mag = 0;
        for (std::size_t q = 0; q < K_r; ++q) {
          const double x = static_cast<float>(a[r][i * K_r + q]) * static_cast<double>(static_cast<float>(b[r][q * N + j]));
          part += x;
          mag += std::fabs(x);
        }
        sum += part;
        tol += 0x1p-8 * std::fabs(part) + 2.0 * K_r * 0x1p-24 * mag + n * 0x1p-24 * (std::fabs(part) + 1);
      }
      tol += 0x1p-8 * std::fabs(sum) + 1e-6;
      const double err = std::fabs(static_cast<float>(c0[i * N + j]) - sum);
      max_err = std::max(max_err, err);
      if (!(err <= tol)) ++bad;
    }
  }
  std::printf("  %d tiles of %dx%d, %d blocks per rank: best %.3f ms per call (wall clock, incl. launch)\n", tiles,
              BM, BN, blocks, best_ms);
  std::printf("  max |error| vs float64 %.3g; %s\n", max_err,
              bad ? "FAILED" : "every rank bit-identical and within tolerance");
  for (void* p : owned) rcclx::gpu::device_free(p);
  return bad ? 1 : 0;
}
