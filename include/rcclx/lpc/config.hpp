// rcclx/lpc/config.hpp: what the low-precision collectives put on the wire, fixed at compile time:
// the FP8 format, the quantization block size, the scale kind, and the mesh schedule of the reads.
//
//   using C = rcclx::lpc::config<>;                              // default_format, 32, fp32 scales, rotating
//   using E5 = rcclx::lpc::config<rcclx::fp8::e5m2, 64, rcclx::fp8::scale_kind::e8m0>;
//   rcclx::lpc::allreduce<E5>(table, in, out, count);            // every rank must use the same config
//
// The wire format (default_format) is chosen from the *target* of the build, never from the
// architecture of a device pass: host and device code of one program, and every rank of a job,
// must read the same bytes the same way, while RCCLX_ARCH_* differ between passes (0 on the host
// pass, per-arch in a multi-arch build). The rule:
//   - RCCLX_LPC_DEFAULT_FORMAT, when defined (e4m3, e5m2, e4m3_fnuz or e5m2_fnuz), decides;
//   - else a HIP build uses e4m3_fnuz: MI300 (gfx942) converts FNUZ in hardware, the home
//     platform; a HIP build for gfx950 (MI350, OCP hardware) should define
//     RCCLX_LPC_DEFAULT_FORMAT=e4m3 (rcclx's CMake does when RCCLX_HIP_ARCHS has gfx950 and no gfx94x);
//   - else (CUDA, host) e4m3: OCP, converted in hardware on sm_89+.
// All ranks must agree on the whole config; it is part of every LPC function's type, so one binary
// cannot mix them by accident, but two separately built processes can: build them the same way.
// Any format works on every target (a software codec, bit-identical, where there is no hardware).
#pragma once

#include <type_traits>

#include "../config.hpp"
#include "../core/types.hpp"
#include "../fp8/block_layout.hpp"
#include "../fp8/format.hpp"
#include "../mesh/schedule.hpp"

#ifndef RCCLX_LPC_DEFAULT_FORMAT
#  define RCCLX_DETAIL_LPC_FORMAT_DEFINED_BY_BUILD 0
#  if RCCLX_BACKEND_HIP
#    define RCCLX_LPC_DEFAULT_FORMAT e4m3_fnuz
#  else
#    define RCCLX_LPC_DEFAULT_FORMAT e4m3
#  endif
#else
#  define RCCLX_DETAIL_LPC_FORMAT_DEFINED_BY_BUILD 1
#endif

RCCLX_NAMESPACE_BEGIN
namespace lpc {

// The FP8 format of this build's default config (see the rule above), and whether the build chose
// it (RCCLX_LPC_DEFAULT_FORMAT) rather than the backend rule.
using default_format = fp8::RCCLX_LPC_DEFAULT_FORMAT;
inline constexpr bool default_format_defined_by_build = RCCLX_DETAIL_LPC_FORMAT_DEFINED_BY_BUILD != 0;

// Format: one of fp8::e4m3, e5m2, e4m3_fnuz, e5m2_fnuz.
// BlockSize: elements per quantization block (one scale each), a power of two in [16, 512]. On
//   GPUs a lane converts 16 elements per step and BlockSize / 16 neighbouring lanes share a block.
// Scale: fp8::scale_kind::fp32 (amax maps onto max finite) or e8m0 (a power of two, 1 byte).
// Schedule: mesh::rotating (default), linear or xor_pairs (power-of-two rank counts): the order in
//   which a rank visits its peers when it gathers their chunks.
template <class Format = default_format, int BlockSize = 32, fp8::scale_kind Scale = fp8::scale_kind::fp32,
          class Schedule = mesh::default_schedule>
struct config {
  static_assert(fp8::is_format_v<Format>, "rcclx::lpc::config: Format must be rcclx::fp8::e4m3, e5m2, e4m3_fnuz or e5m2_fnuz");
  static_assert(BlockSize >= 16 && BlockSize <= 512 && (BlockSize & (BlockSize - 1)) == 0,
                "rcclx::lpc::config: BlockSize must be a power of two in [16, 512]");
  static_assert(Scale == fp8::scale_kind::fp32 || Scale == fp8::scale_kind::e8m0,
                "rcclx::lpc::config: Scale must be fp8::scale_kind::fp32 or e8m0");
  using format = Format;
  using schedule = Schedule;
  static constexpr int block_size = BlockSize;
  static constexpr fp8::scale_kind scale = Scale;
  using scale_type = fp8::scale_type_t<Scale>;
  using layout = fp8::block_layout<BlockSize, Scale>;  // one slot of FP8 payload + scales
  struct config_tag {};
};

using default_config = config<>;

template <class C, class = void>
struct is_config : std::false_type {};
template <class C>
struct is_config<C, std::void_t<typename C::config_tag>> : std::true_type {};
template <class C>
inline constexpr bool is_config_v = is_config<C>::value;

// Element types the LPC collectives take (the wire format is FP8 either way).
template <class T>
inline constexpr bool is_element_v = std::is_same<T, float>::value || std::is_same<T, bf16>::value;

}  // namespace lpc
RCCLX_NAMESPACE_END
