// Device code for the gfx942 ISA check of the LPC AllReduce (tests/compile/isa/lpc.cmake): the
// whole fp8_allreduce for float with the platform default config (e4m3_fnuz on HIP), compiled with
// clang-19 --offload-device-only. Its quantize, reduce-scatter and all-gather phases must use the
// hardware FP8 conversions; with RCCLX_FP8_FORCE_SOFTWARE=1 they are integer code and the check
// must fail.
#include <rcclx/lpc/allreduce.hpp>

static_assert(std::is_same<rcclx::lpc::default_format, rcclx::fp8::e4m3_fnuz>::value,
              "a HIP build (gfx942) defaults to the FNUZ wire format");

extern "C" __global__ void __launch_bounds__(512)
    rcclx_isa_lpc_allreduce(rcclx::core::peer_table<float, 8> t, const float* in, float* out, std::size_t count) {
  (void)rcclx::lpc::fp8_allreduce<rcclx::core::op_sum>(rcclx::gpu::block_group{}, t, in, out, count,
                                                      static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
}
