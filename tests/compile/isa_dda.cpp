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
#ifdef RCCLX_ISA_SCRATCH_CONTROL
  // The no-scratch check's negative control: the peers' pointers in an array indexed at run time
  // (the defect the check exists for), which the compiler can only keep in scratch memory.
  const rcclx::bf16* volatile peers[8];
  for (int p = 0; p < 8; ++p) peers[p] = t.data[p];
  out[threadIdx.x] = peers[threadIdx.x % 8][0];
#endif
}
