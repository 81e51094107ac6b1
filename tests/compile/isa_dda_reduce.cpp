// Device code for the gfx942 ISA check of the DDA reduction step alone (tests/compile/isa/dda.cmake):
// the loop that reads one 16-byte vector from each of 8 ranks' buffers and reduces them
// (kernel::reduce_vec over the owned tiles, the heart of flat and of tree's reduce-scatter). Alone,
// so that its loads are the only 16-byte loads in the assembly.
#include <rcclx/kernel/layout.hpp>
#include <rcclx/kernel/reduce.hpp>
#include <rcclx/kernel/vector_io.hpp>

extern "C" __global__ void __launch_bounds__(512)
    rcclx_isa_dda_reduce(rcclx::core::peer_table<rcclx::bf16, 8> t, rcclx::bf16* out, std::size_t count) {
  namespace k = rcclx::kernel;
  const k::layout<rcclx::bf16> l(count, static_cast<int>(blockDim.x), static_cast<int>(blockIdx.x),
                                 static_cast<int>(gridDim.x));
  const k::peer_ptrs<rcclx::bf16, 8> src(t);
  constexpr int e = k::layout<rcclx::bf16>::vec_elems;
  k::for_each_owned<1>(
      l, static_cast<int>(threadIdx.x), k::tile_range{0, l.tiles},
      [&](const std::size_t(&vi)[1], const bool(&ok)[1]) {
        if (ok[0]) k::store_vec(out + vi[0] * e, k::reduce_vec<rcclx::core::op_sum>(src, vi[0] * e), true);
      },
      [](std::size_t) {});
}
