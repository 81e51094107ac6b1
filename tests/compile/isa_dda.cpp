// Device code for the gfx942 ISA check of the DDA flat AllReduce (tests/compile/isa/dda.cmake):
// the ready-made flat kernel body for bf16 on up to 8 ranks, compiled with clang-19
// --offload-device-only. The check reads its assembly for 16-byte accesses, the 8 peer loads issued
// back to back (no wait in between: 8 x 16 bytes in flight per thread) and no scratch memory.
#include <rcclx/dda/flat.hpp>

extern "C" __global__ void __launch_bounds__(512)
    rcclx_isa_dda_flat(rcclx::core::peer_table<rcclx::bf16, 8> t, const rcclx::bf16* in, rcclx::bf16* out,
                       std::size_t count) {
  (void)rcclx::dda::flat_allreduce<rcclx::core::op_sum>(rcclx::gpu::block_group{}, t, in, out, count,
                                                       static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
}
