// Device code for the gfx942 ISA check of the FP8 hardware path (tests/compile/isa/fp8.cmake):
// the packed FNUZ codecs and the bulk quantize / dequantize bodies, compiled with clang-19
// --offload-device-only.
// With RCCLX_FP8_FORCE_SOFTWARE=1 the conversions are integer code and the check must fail.
#include <rcclx/fp8/packed.hpp>
#include <rcclx/fp8/quantize_blocks.hpp>

namespace f8 = rcclx::fp8;

extern "C" __global__ void rcclx_isa_fp8_encode(const float* in, std::uint8_t* out) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  float x[16];
  for (int k = 0; k < 16; ++k) x[k] = in[i * 16 + k];
  f8::encode_packed<f8::e4m3_fnuz>(x).store(out + i * 32);
  f8::encode_packed<f8::e5m2_fnuz, f8::overflow::propagate>(x).store(out + i * 32 + 16);
}

extern "C" __global__ void rcclx_isa_fp8_decode(const std::uint8_t* in, float* out) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  float y[16];
  f8::decode_packed<f8::e4m3_fnuz>(f8::packed<16>::load(in + i * 16), y);
  for (int k = 0; k < 16; ++k) out[i * 16 + k] = y[k];
}

extern "C" __global__ void rcclx_isa_fp8_quantize_blocks(const float* in, std::size_t n, std::uint8_t* payload,
                                                         float* scales) {
  f8::quantize_blocks_range<f8::e4m3_fnuz>(in, n, payload, scales,
                                           static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                                           static_cast<std::size_t>(gridDim.x) * blockDim.x);
}

// The default bf16 bulk bodies (software prefetch, 32-bit indices) must not spill to scratch either.
extern "C" __global__ void rcclx_isa_fp8_quantize_blocks_bf16(const rcclx::bf16* in, std::size_t n,
                                                              std::uint8_t* payload, float* scales) {
  f8::quantize_blocks_range<f8::e4m3_fnuz>(in, n, payload, scales,
                                           static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                                           static_cast<std::size_t>(gridDim.x) * blockDim.x);
}

extern "C" __global__ void rcclx_isa_fp8_dequantize_blocks_bf16(const std::uint8_t* payload, const f8::e8m0* scales,
                                                                std::size_t n, rcclx::bf16* out) {
  f8::dequantize_blocks_range<f8::e4m3_fnuz, 32, f8::scale_kind::e8m0>(
      payload, scales, n, out, static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x,
      static_cast<std::size_t>(gridDim.x) * blockDim.x);
}
