// Device code for the gfx942 ISA check of the LPC reduce-scatter step (tests/compile/isa/lpc.cmake):
// the per-unit reduction of an FP8 chunk from 8 ranks alone (its code loads are the only 16-byte
// loads here), compiled with clang-19 --offload-device-only. The 8 ranks' codes (and scales) must be
// loaded back to back, with no s_waitcnt between them: 8 x 20 bytes in flight per lane.
#include <rcclx/lpc/detail/units.hpp>

extern "C" __global__ void __launch_bounds__(512)
    rcclx_isa_lpc_reduce(rcclx::core::peer_table<float, 8> t, std::size_t scales_offset, std::size_t elems, float* out) {
  namespace d = rcclx::lpc::detail;
  using C = rcclx::lpc::default_config;
  d::rank_slots<8> src;
  src.n = t.num_ranks();
  for (int p = 0; p < 8; ++p) src.base[p] = p < src.n ? reinterpret_cast<const unsigned char*>(t.data[p]) : nullptr;
  const d::unit_tiles ut(512, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
  d::reduce_chunk<C, rcclx::core::op_sum, float>(static_cast<int>(threadIdx.x), ut, src, scales_offset, elems,
                                                 [&](std::size_t u, int cnt, const float(&acc)[16]) {
                                                   if (cnt > 0) d::unit_codec<C, float>::store(out + u * 16, cnt, true, acc);
                                                 });
}
