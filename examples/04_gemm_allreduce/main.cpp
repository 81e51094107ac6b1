// Example 04: a tiled GEMM whose epilogue AllReduces each tile across ranks as soon as it is done:
// the row-parallel linear layer of tensor parallelism (every rank multiplies its K-shard; the
// partial products are summed), C = sum over ranks r of A_r * B_r, plus a bias, on 8 emulated ranks
// (one GPU, or threads on the host backend). Checked against a float64 reference.
//
//   rcclx_example_gemm_allreduce [M N K]                  8 emulated ranks (K split evenly over them)
//   rcclx_example_gemm_allreduce --procs N [M N K]        N processes, one rank each (GPU r mod count)
//   scripts/launch -n N -- rcclx_example_gemm_allreduce   the same, started by a launcher
//
// The kernel is in gemm_allreduce.hpp (walkthrough: docs/fusion.md); this file sets up the ranks
// (emulated, or a communicator per process), runs it and checks the result.
#include <rcclx/host/communicator.hpp>
#include <rcclx/host/fork_ranks.hpp>
#include <rcclx/testing/emulated_world.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "gemm_allreduce.hpp"

namespace {

using namespace gemm_example;

// Every rank's inputs (the same in every process: one seed), uniform in [-1, 1).
struct inputs {
  std::vector<std::vector<T>> a, b;  // rank r: M x K_r and K_r x N
  std::vector<float> bias;           // N
};
inputs make_inputs(int n, std::size_t M, std::size_t N, std::size_t K_r) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  inputs in{std::vector<std::vector<T>>(n, std::vector<T>(M * K_r)), std::vector<std::vector<T>>(n, std::vector<T>(K_r * N)),
            std::vector<float>(N)};
  for (int r = 0; r < n; ++r) {
    for (auto& x : in.a[r]) x = T(dist(gen));
    for (auto& x : in.b[r]) x = T(dist(gen));
  }
  for (auto& x : in.bias) x = dist(gen);
  return in;
}

// One rank's C against float64 (reference_at), plus the bias, rounded once more. Returns the
// elements out of tolerance.
int check_against_float64(const inputs& in, std::size_t M, std::size_t N, std::size_t K_r, const split_plan& plan,
                          const std::vector<T>& c, double& max_err) {
  int bad = 0;
  for (std::size_t i = 0; i < M; ++i) {
    for (std::size_t j = 0; j < N; ++j) {
      const reference_value ref = reference_at(in.a, in.b, N, K_r, plan, i, j, in.bias[j]);
      const double sum = ref.sum, tol = ref.tol + 0x1p-8 * std::fabs(sum - in.bias[j]) + 0x1p-8 * std::fabs(sum) + 1e-6;
      const double err = std::fabs(static_cast<float>(c[i * N + j]) - sum);
      max_err = std::max(max_err, err);
      if (!(err <= tol)) ++bad;
    }
  }
  return bad;
}

// Device copies of rank r's A, B and a zeroed C, and the bias; allocations go to `owned`.
void upload_rank(gemm_allreduce& k, const inputs& in, int r, std::size_t M, std::size_t N, std::vector<void*>& owned) {
  auto upload = [&](const void* src, std::size_t size) {
    void* p = rcclx::gpu::device_malloc(size);
    rcclx::gpu::copy(p, src, size);
    owned.push_back(p);
    return p;
  };
  k.A[r] = static_cast<const T*>(upload(in.a[r].data(), in.a[r].size() * sizeof(T)));
  k.B[r] = static_cast<const T*>(upload(in.b[r].data(), in.b[r].size() * sizeof(T)));
  k.C[r] = static_cast<T*>(upload(std::vector<T>(M * N, T(0.0f)).data(), M * N * sizeof(T)));
  if (!k.bias) k.bias = static_cast<const float*>(upload(in.bias.data(), N * sizeof(float)));
}

// --procs N: this process's rank. The communicator gives the peer table (every rank's symmetric
// buffer and the signal pads); the tile flags get pad slots after those of its own collectives.
int run_process_rank(const rcclx::host::launch_config& cfg, std::size_t M, std::size_t N, std::size_t K) {
  rcclx::host::use_device(cfg);
  rcclx::host::socket_bootstrap bs(cfg);
  const int n = bs.num_ranks();
  if (K % static_cast<std::size_t>(n) != 0 || n > max_ranks)
    throw rcclx::error(rcclx::errc::invalid_argument, "K = " + std::to_string(K) + " must be a multiple of the " +
                                                          std::to_string(n) + " ranks (at most " +
                                                          std::to_string(max_ranks) + ")");
  const std::size_t K_r = K / n;
  const rcclx::fused::tile_map map{M, N, BM, BN};
  const int tiles = static_cast<int>(map.num_tiles());
  // This rank's blocks must be resident together on its GPU (they wait for the peers' tiles).
  const int blocks = std::max(1, std::min({tiles, on_gpu ? 32 : 4,
                                           rcclx::testing::max_blocks_per_rank<gemm_allreduce>(1, threads)}));
  const int slots_used = split_plan(tiles, blocks, K_r).virtual_tiles();  // tiles, plus parts of split ones
  rcclx::host::communicator_options opts;
  const rcclx::fused::tile_slots slots{opts.max_blocks, slots_used};
  opts.max_blocks = slots.end();
  opts.buffer_bytes = std::max(
      opts.buffer_bytes, rcclx::fused::tile_allreduce<T, max_ranks>::workspace_bytes(map.tile_elems(), slots_used));
  rcclx::host::communicator<max_ranks> comm(bs, opts);
  const int rank = comm.rank();
  if (rank == 0)
    std::printf("rcclx fused GEMM + AllReduce on %s: %d processes, C[%zu x %zu] = sum_r A_r[%zu x %zu] B_r + bias\n",
                rcclx::backend_name(), n, M, N, M, K_r);
  rcclx::fused::tile_allreduce<T, max_ranks>::check("example", comm.device_handle<T>(), slots, map.tile_elems(),
                                                     slots_used);

  const inputs in = make_inputs(n, M, N, K_r);
  std::vector<void*> owned;
  gemm_allreduce k{};
  k.tables[rank] = comm.device_table<T>();
  upload_rank(k, in, rank, M, N, owned);
  k.M = M;
  k.N = N;
  k.K_r = K_r;
  k.slots = slots;
  rcclx::gpu::stream_t stream = rcclx::gpu::stream_create();
  double best_ms = 1e30;
  for (int rep = 0; rep < (on_gpu ? 5 : 2); ++rep) {  // repeated calls alternate buffer halves
    const auto t0 = std::chrono::steady_clock::now();
    rcclx::testing::launch_rank(rank, n, blocks, threads, k, stream);
    comm.synchronize(stream);  // throws if a peer never arrived
    best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  rcclx::gpu::stream_destroy(stream);

  std::vector<T> c(M * N);
  rcclx::gpu::copy(c.data(), k.C[rank], M * N * sizeof(T));
  double max_err = 0;
  const int bad = check_against_float64(in, M, N, K_r, split_plan(tiles, blocks, K_r), c, max_err);
  // Every rank must hold the same bits: compare hashes over the bootstrap.
  std::uint64_t h = 1469598103934665603ull;
  for (const T& x : c) h = (h ^ x.bits) * 1099511628211ull;
  const auto all = comm.get_bootstrap().allgather_value(h);
  int differ = 0;
  for (const std::uint64_t x : all) differ += x != all[0];
  if (bad) std::printf("  [rank %d] %d elements out of tolerance\n", rank, bad);
  if (rank == 0) {
    std::printf("  %d tiles of %dx%d, %d blocks per rank: best %.3f ms per call (wall clock, incl. launch)\n", tiles,
                BM, BN, blocks, best_ms);
    std::printf("  max |error| vs float64 %.3g (rank 0); %s\n", max_err,
                differ ? "ranks DIFFER" : "every rank bit-identical");
  }
  for (void* p : owned) rcclx::gpu::device_free(p);
  return bad || differ ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  int procs = 0;  // 0: emulated ranks in this process; -1: one rank of a launcher's job
  if (!rcclx::host::procs_argument(argc, argv, max_ranks, procs)) return 2;
  std::size_t M = on_gpu ? 128 : 96, N = on_gpu ? 4096 : 136, K = on_gpu ? 4096 : 256;
  if (argc == 4) {
    M = std::strtoull(argv[1], nullptr, 10);
    N = std::strtoull(argv[2], nullptr, 10);
    K = std::strtoull(argv[3], nullptr, 10);
  }
  if (N % 8 != 0 || K % 8 != 0 || M == 0) {
    std::printf("N and K must be multiples of 8 and M positive\n");
    return 2;
  }
  if (procs != 0) {
    // (No GPU call before the fork: each rank checks for a GPU itself.)
    const int rc = rcclx::host::run_ranks(procs, [&](const rcclx::host::launch_config& cfg) {
      return run_process_rank(cfg, M, N, K);
    });
    if (procs > 0) std::printf(rc ? "FAILED\n" : "all ranks within tolerance of float64, bit-identical\n");
    return rc;
  }
  if (on_gpu && rcclx::gpu::device_count() == 0) {
    std::printf("built for %s but no GPU is present; rebuild with RCCLX_BACKEND=host\n", rcclx::backend_name());
    return 0;
  }
  const int n = 8;
  const std::size_t K_r = K / n;
  std::printf("rcclx fused GEMM + AllReduce on %s: %d emulated ranks, C[%zu x %zu] = sum_r A_r[%zu x %zu] B_r + bias\n",
              rcclx::backend_name(), n, M, N, M, K_r);

  // [fusion-setup]
  // All blocks of all ranks must be resident at once: they wait for each other's tiles.
  const rcclx::fused::tile_map map{M, N, BM, BN};
  const int tiles = static_cast<int>(map.num_tiles());
  const int blocks = std::max(1, std::min({tiles, on_gpu ? 32 : 4,
                                           rcclx::testing::max_blocks_per_rank<gemm_allreduce>(n, threads)}));
  // Tile flags live in the signal pads, in their own slot range: one per tile, plus one per extra
  // part of a split last-round tile (split_plan); the symmetric buffer holds two halves of every
  // rank's tiles (calls alternate between them).
  const int slots_used = split_plan(tiles, blocks, K_r).virtual_tiles();
  const rcclx::fused::tile_slots slots{0, slots_used};
  const std::size_t bytes = rcclx::fused::tile_allreduce<T, max_ranks>::workspace_bytes(map.tile_elems(), slots_used);
  rcclx::testing::emulated_world<max_ranks> world(n, bytes, slots.end());
  rcclx::fused::tile_allreduce<T, max_ranks>::check("example", world.table<T>(0), slots, map.tile_elems(), slots_used);
  // [fusion-setup]

  const inputs in = make_inputs(n, M, N, K_r);
  gemm_allreduce k{};
  std::vector<void*> owned;
  for (int r = 0; r < n; ++r) {
    k.tables[r] = world.device_tables<T>() + r;
    upload_rank(k, in, r, M, N, owned);
  }
  k.M = M;
  k.N = N;
  k.K_r = K_r;
  k.slots = slots;

  double best_ms = 1e30;
  for (int rep = 0; rep < (on_gpu ? 5 : 2); ++rep) {  // repeated calls alternate buffer halves
    const auto t0 = std::chrono::steady_clock::now();
    rcclx::testing::launch_emulated(n, blocks, threads, k);
    rcclx::gpu::device_synchronize();
    best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  world.throw_if_error();

  // Check every rank's C: the same bits on every rank, within tolerance of float64.
  int bad = 0;
  double max_err = 0;
  std::vector<T> c(M * N), c0(M * N);
  rcclx::gpu::copy(c0.data(), k.C[0], M * N * sizeof(T));
  for (int r = 0; r < n; ++r) {
    rcclx::gpu::copy(c.data(), k.C[r], M * N * sizeof(T));
    for (std::size_t i = 0; i < M * N; ++i)
      if (c[i].bits != c0[i].bits) ++bad;  // every rank holds the same bits
  }
  bad += check_against_float64(in, M, N, K_r, split_plan(tiles, blocks, K_r), c0, max_err);
  std::printf("  %d tiles of %dx%d, %d blocks per rank: best %.3f ms per call (wall clock, incl. launch)\n", tiles,
              BM, BN, blocks, best_ms);
  std::printf("  max |error| vs float64 %.3g; %s\n", max_err,
              bad ? "FAILED" : "every rank bit-identical and within tolerance");
  for (void* p : owned) rcclx::gpu::device_free(p);
  return bad ? 1 : 0;
}
