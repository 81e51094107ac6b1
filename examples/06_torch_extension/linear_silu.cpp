// Example 06: your own kernel in your own torch extension, on an rcclx.Communicator's handles.
// A row-parallel linear layer out = silu(x W + bias): x (M x K) and W (K x N) are split over the
// ranks along K; each rank's kernel multiplies its slice tile by tile, the tile-level AllReduce
// sums the partial products across ranks inside the same kernel, and the epilogue adds the bias
// and applies SiLU. The kernel is examples/02_linear_silu's; only where its handles come from
// differs: a Python rcclx.Communicator (symmetric tensor + signal pads), passed as
// rcclx::pytorch::kernel_handles.
//
//   python3 setup.py build_ext --inplace       (this directory; rcclx installed or on PYTHONPATH)
//   pytest test_linear_silu.py                 (2 and 3 processes, against torch in float64)
//
// Compiled as C++ for rcclx's host backend (CPU tensors) and, through linear_silu.cu, by nvcc for
// CUDA tensors: the same source.
#include <torch/extension.h>
#if defined(__CUDACC__)
#  include <ATen/cuda/CUDAContext.h>
#endif

#include <rcclx/fused/epilogue.hpp>
#include <rcclx/fused/stages.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/pytorch/kernel_handles.hpp>
#include <rcclx/testing/launch.hpp>

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

// Bytes of symmetric workspace the kernel needs for an M x N output (comm.symmetric_empty(bytes)).
std::int64_t workspace_bytes(std::int64_t M, std::int64_t N) {
  const fz::tile_map map = map_for(M, N);
  return static_cast<std::int64_t>(allreduce::workspace_bytes(map.tile_elems(), static_cast<int>(map.num_tiles())));
}

// out = silu(sum over ranks of x_r w_r + bias), on every rank. handles: comm.kernel_handles(workspace).
at::Tensor forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, const at::Tensor& handles) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(0) && bias.numel() == w.size(1),
              "linear_silu: shapes x [M, k], w [k, N], bias [N] expected");
  TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat,
              "linear_silu: float32 tensors expected");
  const at::Tensor hc = handles.contiguous();
  const auto h = rcclx::pytorch::kernel_handles::from_bytes(hc.data_ptr(), hc.nbytes());
  const at::Tensor xc = x.contiguous(), wc = w.contiguous(), bc = bias.contiguous();
  at::Tensor out = at::empty({x.size(0), w.size(1)}, x.options());
  linear_silu k{h.table_as<float>(), xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(),
                out.data_ptr<float>(), map_for(x.size(0), w.size(1)), static_cast<std::size_t>(x.size(1)), h.slots};
  const int tiles = static_cast<int>(k.map.num_tiles());
  allreduce::check("linear_silu", k.table, k.slots, k.map.tile_elems(), tiles);  // clear errors before launching
#if defined(__CUDACC__)
  const rcclx::gpu::stream_t stream = at::cuda::getCurrentCUDAStream();
  const int threads = 256;
#else
  const rcclx::gpu::stream_t stream{};
  const int threads = 1;  // the host backend: a thread per block
#endif
  rcclx::testing::launch_rank(h.rank(), h.num_ranks(), std::min(tiles, 2), threads, k, stream);
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("workspace_bytes", &workspace_bytes, "Symmetric workspace bytes for an M x N output", py::arg("M"),
        py::arg("N"));
  m.def("forward", &forward, "silu(x w + bias), summed over the ranks inside the kernel", py::arg("x"), py::arg("w"),
        py::arg("bias"), py::arg("handles"));
}
