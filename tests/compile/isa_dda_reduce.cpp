// Device code for the gfx942 ISA check of the DDA reduction step alone (tests/compile/isa/dda.cmake):
// the loop that reads one 16-byte vector from each of 8 ranks' buffers and reduces them, the heart
// of flat (and of tree's reduce-scatter). Alone, so that its loads are the only 16-byte loads in
// the assembly.
#include <rcclx/dda/detail/tiles.hpp>

extern "C" __global__ void __launch_bounds__(512)
    rcclx_isa_dda_reduce(rcclx::core::peer_table<rcclx::bf16, 8> t, rcclx::bf16* out, std::size_t count) {
  const rcclx::kernel::layout<rcclx::bf16> l(count, static_cast<int>(blockDim.x), static_cast<int>(blockIdx.x),
                                             static_cast<int>(gridDim.x));
  rcclx::dda::detail::reduce_owned<rcclx::core::op_sum>(l, static_cast<int>(threadIdx.x),
                                                       rcclx::kernel::tile_range{0, l.tiles}, t, out,
                                                       static_cast<rcclx::bf16*>(nullptr));
}
