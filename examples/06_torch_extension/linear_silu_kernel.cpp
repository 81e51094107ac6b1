// Example 06's kernel: examples/02_linear_silu's fused linear + AllReduce + bias + SiLU, on the
// handles of a Python rcclx.Communicator (include/rcclx/pytorch/kernel_handles.hpp).
#include "linear_silu.hpp"

#include <rcclx/fused/epilogue.hpp>
#include <rcclx/fused/stages.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/pytorch/kernel_handles.hpp>
#include <rcclx/testing/launch.hpp>

#include <algorithm>
#include <exception>

namespace fz = rcclx::fused;
constexpr int max_ranks = rcclx::pytorch::max_ranks;
using allreduce = fz::tile_allreduce<float, max_ranks, rcclx::algorithm::automatic>;

struct linear_silu {
  static constexpr int max_threads_per_block = 256;
  rcclx::core::peer_table<float, max_ranks> table;  // the symmetric workspace on every rank + the pads
  const float* x;                                   // M x k: this rank's slice of x
  const float* w;                                   // k x N: this rank's slice of W
  const float* bias;                                // [N]
  float* out;                                       // M x N
  fz::tile_map map;                                 // the M x N output in tiles
  std::size_t k;                                    // this rank's slice of K
  fz::tile_slots slots;                             // the communicator's slots for tile kernels

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, rcclx::testing::launch_index ix) const {
    const int tiles = static_cast<int>(map.num_tiles());
    allreduce ar(table, slots, map.tile_elems(), tiles);
    for (int t = ix.block; t < tiles; t += ix.num_blocks) {  // this block's tiles: partial products
      float* part = ar.input(t);
      for (std::size_t e = g.thread_rank(); e < map.tile_elems(); e += g.size()) {
        const fz::position p = map.at(t, e);
        float s = 0.0f;
        for (std::size_t j = 0; map.contains(p) && j < k; ++j) s += x[p.row * k + j] * w[j * map.cols + p.col];
        part[e] = s;
      }
      ar.publish(g, t);
    }
    const fz::epilogue<fz::bias<float>, fz::silu, fz::store<float>> epi{{bias}, {}, {out, map.cols}};
    for (int t = ix.block; t < tiles; t += ix.num_blocks)
      if (!ar.template reduce<1>(g, t, map, epi)) break;  // sum of every rank's tile t -> bias -> SiLU -> out
    ar.finish(g, ix.num_blocks);
  }
};

namespace {
fz::tile_map map_for(std::int64_t M, std::int64_t N) {
  return fz::tile_map{static_cast<std::size_t>(M), static_cast<std::size_t>(N), 16, 32};
}
}  // namespace

std::int64_t linear_silu_workspace_bytes(std::int64_t M, std::int64_t N) {
  const fz::tile_map map = map_for(M, N);
  return static_cast<std::int64_t>(allreduce::workspace_bytes(map.tile_elems(), static_cast<int>(map.num_tiles())));
}

std::string linear_silu_launch(const void* handles, std::size_t handle_bytes, const float* x, const float* w,
                               const float* bias, float* out, std::int64_t M, std::int64_t N, std::int64_t k,
                               void* stream) {
  try {
    const auto h = rcclx::pytorch::kernel_handles::from_bytes(handles, handle_bytes);
    const linear_silu f{h.table_as<float>(), x, w, bias, out, map_for(M, N), static_cast<std::size_t>(k), h.slots};
    const int tiles = static_cast<int>(f.map.num_tiles());
    allreduce::check("linear_silu", f.table, f.slots, f.map.tile_elems(), tiles);  // clear errors before launching
#if RCCLX_BACKEND_GPU
    const auto s = static_cast<rcclx::gpu::stream_t>(stream);
    const int threads = 256;
#else
    (void)stream;
    const rcclx::gpu::stream_t s{};
    const int threads = 1;  // the host backend: a thread per block
#endif
    rcclx::testing::launch_rank(h.rank(), h.num_ranks(), std::min(tiles, 2), threads, f, s);
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}
