// Device code for the gfx942 ISA check (tests/compile/isa_check.cmake): a kernel that runs one
// barrier, compiled with clang-19 --offload-device-only. The check reads its assembly for the
// system-scope flag accesses the protocol needs.
#include <rcclx/core/barrier.hpp>

extern "C" __global__ void rcclx_isa_barrier(rcclx::core::signal_pads<8> pads) {
  (void)rcclx::core::barrier(rcclx::gpu::block_group{}, pads, static_cast<int>(blockIdx.x),
                             rcclx::core::barrier_kind::start);
}
