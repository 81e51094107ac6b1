// Example 06: the smallest fused kernel (docs/fusion.md, "A first fused kernel"). A row-parallel linear layer
// out = silu(x W + bias): x (M x K) and W (K x N) are split over the ranks along K; each rank
// multiplies its slice tile by tile, the tile-level AllReduce sums the partial products across ranks
// as the tiles are published, and the epilogue adds the bias and applies SiLU on the way out. Run on
// emulated ranks (one GPU, or threads on the host backend) and checked against float64.
//
//   rcclx_example_linear_silu [num_ranks]
#include <rcclx/fused/epilogue.hpp>
#include <rcclx/fused/stages.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/testing/emulated_peers.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace fz = rcclx::fused;

// [minimal-kernel]
struct linear_silu {
  static constexpr int max_threads_per_block = 256;
  const rcclx::core::peer_table<float, 8>* tables;  // peers.device_tables(): every rank's table
  rcclx::testing::rank_buffers<float, 8> buf;       // in[r]: x_r (M x k) then W_r (k x N); out[r]: M x N
  const float* bias;                                // [N]
  fz::tile_map map;                                 // the M x N output in tiles
  std::size_t k;                                    // this rank's slice of K
  fz::tile_slots slots;                             // the signal-pad slots of the tile flags

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, rcclx::testing::launch_index ix) const {
    const float* x = buf.in[ix.rank];
    const float* w = x + map.rows * k;
    const int tiles = static_cast<int>(map.num_tiles());
    fz::tile_allreduce<float, 8, rcclx::algorithm::automatic> ar(tables[ix.rank], slots, map.tile_elems(), tiles);
    for (int t = ix.block; t < tiles; t += ix.num_blocks) {  // this block's tiles: partial products
      float* part = ar.input(t);
      for (std::size_t e = g.thread_rank(); e < map.tile_elems(); e += g.size()) {
        const fz::position p = map.at(t, e);
        float s = 0.0f;
        for (std::size_t j = 0; map.contains(p) && j < k; ++j) s += x[p.row * k + j] * w[j * map.cols + p.col];
        part[e] = s;
      }
      ar.publish(g, t);  // the tile's flag goes up on the ranks that read it
    }
    const fz::epilogue<fz::bias<float>, fz::silu, fz::store<float>> epi{{bias}, {}, {buf.out[ix.rank], map.cols}};
    for (int t = ix.block; t < tiles; t += ix.num_blocks)
      if (!ar.template reduce<1>(g, t, map, epi)) break;  // sum of every rank's tile t -> bias -> SiLU -> out
    ar.finish(g, ix.num_blocks);  // every block, once
  }
};
// [minimal-kernel]

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 4;
  if (n < 2 || n > 8) {
    std::fprintf(stderr, "usage: rcclx_example_linear_silu [num_ranks in 2..8]\n");
    return 2;
  }
  const bool on_gpu = rcclx::current_backend != rcclx::backend::host;
  if (on_gpu && rcclx::gpu::device_count() == 0) {
    std::printf("rcclx_example_linear_silu: built for a GPU, none present\n");
    return 0;
  }
  // [minimal-host]
  const std::size_t M = 16, N = 96, k = 64;          // tokens, outputs, K per rank (K = n * k)
  const fz::tile_map map{M, N, 16, 32};              // 3 tiles of 16 x 32
  const int tiles = static_cast<int>(map.num_tiles());
  rcclx::testing::emulated_options opt;
  opt.symmetric_bytes = fz::tile_allreduce<float, 8, rcclx::algorithm::automatic>::workspace_bytes(map.tile_elems(), tiles);
  opt.pad_slots = fz::pad_blocks_for(0, tiles);      // pad slots: no barrier blocks, one tile-flag range
  opt.output_count = M * N;
  rcclx::testing::emulated_peers<float, 8> peers(n, M * k + k * N, opt);  // input(r): x_r, then W_r
  const fz::tile_slots slots = peers.world().reserve_tile_slots(tiles);  // handed out by the pads' owner
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int r = 0; r < n; ++r)
    for (float& v : peers.input(r)) v = dist(gen);
  std::vector<float> bias(N);
  for (float& b : bias) b = dist(gen);
  float* dev_bias = static_cast<float*>(rcclx::gpu::device_malloc(N * sizeof(float)));
  rcclx::gpu::copy(dev_bias, bias.data(), N * sizeof(float));
  const int threads = rcclx::current_backend == rcclx::backend::host ? 1 : 256;  // the host backend: 1 per block
  peers.run(/*blocks_per_rank=*/2, threads,
            linear_silu{peers.device_tables(), peers.device_buffers(), dev_bias, map, k, slots});
  rcclx::gpu::device_free(dev_bias);
  // peers.output(r): M x N on every rank, the same bits everywhere
  // [minimal-host]

  // float64 reference: the K-sum of every rank's slice, bias, SiLU.
  std::size_t bad = 0, differ = 0;
  double worst = 0;
  for (std::size_t i = 0; i < M; ++i) {
    for (std::size_t j = 0; j < N; ++j) {
      double s = 0, mag = 0;
      for (int r = 0; r < n; ++r) {
        const std::vector<float>& in = peers.input(r);
        for (std::size_t q = 0; q < k; ++q) {
          const double t = static_cast<double>(in[i * k + q]) * in[M * k + q * N + j];
          s += t;
          mag += std::fabs(t);
        }
      }
      const double y = s + bias[j], want = y / (1.0 + std::exp(-y));
      const double got = peers.output(0)[i * N + j];
      const double tol = 1e-6 * (mag + std::fabs(bias[j]) + 1.0);  // FP32 sums of n * k products
      worst = std::fmax(worst, std::fabs(got - want));
      if (!(std::fabs(got - want) <= tol)) ++bad;
      for (int r = 1; r < n; ++r) differ += peers.output(r)[i * N + j] != peers.output(0)[i * N + j];
    }
  }
  std::printf("linear + AllReduce + bias + SiLU on %d emulated ranks (%s): %zu x %zu, max |error| %.3g, %s, %s\n", n,
              on_gpu ? "GPU" : "host threads", M, N, worst, bad ? "OUTSIDE TOLERANCE" : "within tolerance",
              differ ? "ranks DIFFER" : "ranks bit-identical");
  return bad || differ ? 1 : 0;
}
