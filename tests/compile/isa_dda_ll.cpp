// Device code for the gfx942 ISA check of the LL one-shot (tests/compile/isa/dda.cmake): the LL
// flat AllReduce for bf16 on up to 8 ranks. Packets move as 64-bit system-scope accesses (sc0 sc1)
// with no cache invalidation (buffer_inv) anywhere: the protocol needs no acquire.
#include <rcclx/dda/flat.hpp>

extern "C" __global__ void __launch_bounds__(512)
    rcclx_isa_dda_flat_ll(rcclx::core::peer_table<rcclx::bf16, 8> t, const rcclx::bf16* in, rcclx::bf16* out,
                          std::size_t count) {
  (void)rcclx::dda::flat_allreduce_ll<rcclx::core::op_sum>(rcclx::gpu::block_group{}, t, in, out, count,
                                                          static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
}
