// Example 04: a tiled GEMM whose epilogue AllReduces each tile across ranks as soon as it is done:
// the row-parallel linear layer of tensor parallelism (every rank multiplies its K-shard; the
// partial products are summed), C = sum over ranks r of A_r * B_r, plus a bias, on 8 emulated ranks
// (one GPU, or threads on the host backend). Checked against a float64 reference.
//
//   rcclx_example_gemm_allreduce [M N K]        (K is split evenly over the ranks)
//
// The kernel is in gemm_allreduce.hpp (walkthrough: docs/fusion.md); this file sets up the emulated
// ranks, runs it and checks the result.
#include <rcclx/testing/emulated_world.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "gemm_allreduce.hpp"

namespace {

using namespace gemm_example;

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
