// Device code for the gfx942 ISA check of the fused AllReduce + residual + RMSNorm (tests/compile/
// isa/fused.cmake): the ready-made flat and tree blocks for bf16 rows of up to 8192 elements (2
// vectors per thread of 512) on up to 8 ranks, compiled with clang-19 --offload-device-only. The check reads its
// assembly for the system-scope row flags (release stores, acquire polls), 16-byte peer loads and
// no scratch memory (the row, the preloaded residual and weight, and the tree's row copies stay
// in registers). The kernels as a release build ships them: the checked mode off (its tile audit
// adds registers; tests/checks cover it).
#ifndef RCCLX_CHECKS
#  define RCCLX_CHECKS 0
#endif
#include <rcclx/fused/allreduce_rmsnorm.hpp>

extern "C" __global__ void __launch_bounds__(512)
    rcclx_isa_fused_rmsnorm_flat(rcclx::core::peer_table<rcclx::bf16, 8> t, rcclx::fused::rmsnorm_args<rcclx::bf16> a,
                                 rcclx::fused::tile_slots slots) {
  (void)rcclx::fused::allreduce_rmsnorm_block<rcclx::algorithm::flat, 2, 512>(
      rcclx::gpu::block_group{}, t, a, slots, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
}

extern "C" __global__ void __launch_bounds__(512)
    rcclx_isa_fused_rmsnorm_tree(rcclx::core::peer_table<rcclx::bf16, 8> t, rcclx::fused::rmsnorm_args<rcclx::bf16> a,
                                 rcclx::fused::tile_slots slots) {
  (void)rcclx::fused::allreduce_rmsnorm_block<rcclx::algorithm::tree, 2, 512>(
      rcclx::gpu::block_group{}, t, a, slots, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
}
