// rcclx/fp8/bulk_tuning.hpp: the compile-time tuning of the bulk FP8 kernels (quantize_blocks,
// dequantize_blocks and their _range bodies): fragments in flight, cache hints, grid, block size.
//
//   using fast = rcclx::fp8::bulk_tuning<2, 0, rcclx::fp8::bulk_store_streaming, 0>;   // U2, streaming stores
//   rcclx::fp8::dequantize_blocks<rcclx::fp8::e4m3, 32, rcclx::fp8::scale_kind::fp32,
//                                 rcclx::fp8::path::automatic, float, fast>(payload, scales, n, y, stream);
//
// The measured defaults per element type and scale kind live in one place, detail::bulk_defaults.
#pragma once

#include <type_traits>

#include "../config.hpp"
#include "../core/types.hpp"
#include "block_scale.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fp8 {

// ---- tuning ---------------------------------------------------------------------------------------
// Flags of bulk_tuning (bits, combine with |). Inputs and outputs of the bulk kernels are touched
// once, so cache hints only decide what the caches evict first.
enum bulk_flag : int {
  bulk_store_streaming = 1,  // outputs (codes / values) with evict-first stores: st.global.cs, AMD nontemporal
  bulk_load_streaming = 2,   // inputs with evict-first loads: ld.global.cs, AMD nontemporal (coherent)
  bulk_prefetch = 4,         // software pipeline: a lane issues its next round's loads before this
                             // round's math, so its loads stay in flight while it converts
  bulk_load_no_l1 = 8,       // NVIDIA: inputs with ld.global.L1::no_allocate (coherent); AMD: plain
};

// Compile-time tuning of the bulk kernels, the last template argument of quantize_blocks /
// dequantize_blocks and their _range bodies. Measured candidates: rcclx-bench-fp8 --suite gpu.
//   Unroll     fragments a lane loads (all of them in flight) before converting them: one "round"
//   LaneElems  elements per lane and fragment; 0 = the default: quantize 16 bytes of input (4 float,
//              8 bf16; more if a block would span more than 32 lanes), dequantize 16 bytes of output
//   Flags      bulk_flag bits
//   Waves      launchers only: grid = Waves x the blocks resident on the device at once, each thread
//              looping over rounds (grid-stride); 0 = one round per thread (a block per tile)
//   Threads    launchers only: threads per block (a multiple of 64, at most 1024)
//   MinBlocks  launchers only, NVIDIA: __launch_bounds__(Threads, MinBlocks) asks for registers so
//              that MinBlocks blocks fit per SM (8 x 256 threads = full occupancy = <= 32
//              registers); 0 = no constraint
template <int Unroll, int LaneElems = 0, int Flags = 0, int Waves = 1, int Threads = 256, int MinBlocks = 0>
struct bulk_tuning {
  static_assert(Unroll >= 1 && Unroll <= 8, "bulk_tuning: Unroll must be in [1, 8]");
  static_assert(LaneElems >= 0, "bulk_tuning: LaneElems must be >= 0 (0 = default)");
  static_assert((Flags & ~15) == 0, "bulk_tuning: Flags are bulk_flag bits");
  static_assert(Waves >= 0, "bulk_tuning: Waves must be >= 0 (0 = one round per thread)");
  static_assert(Threads >= 64 && Threads <= 1024 && Threads % 64 == 0,
                "bulk_tuning: Threads must be a multiple of 64 in [64, 1024]");
  static constexpr int unroll = Unroll;
  static constexpr int lane_elems = LaneElems;
  static constexpr int flags = Flags;
  static constexpr int waves = Waves;
  static constexpr int threads = Threads;
  static constexpr int min_blocks = MinBlocks;
  static_assert(MinBlocks >= 0 && MinBlocks * Threads <= 2048, "bulk_tuning: MinBlocks x Threads must be <= 2048");
};

namespace detail {

// ---- THE DEFAULTS: one line per kernel of rcclx-bench-fp8's table, the only place to change them ----
// Each `using` is spelled exactly as the tuning sweep prints its candidates ("tune ... <tuning>").
// Measured on an H200 (64 Mi elements, vs a copy of the same bytes): quantize f32 U4 92% -> U2 97.7%;
// bf16 U4 80.7% -> U1 87.4%; dequantize f32 U4 88% -> U2 + streaming stores 90.4%.
// Current choice, from the H200 sweep of 2026-11-29 (docs/performance.md): f32 quantize U2 on a
// resident grid-stride grid; bf16 quantize and every dequantize U2 with one block per tile
// (Waves = 0), dequantize with streaming stores. Prefetch and MinBlocks lost on the H200.
#if RCCLX_BACKEND_GPU
template <class T, scale_kind Scale>
struct bulk_defaults {  // bf16 (the primary template also serves unsupported types until their static_assert)
  // Measured on the H200 (rcclx-bench-fp8 sweep, 2026-11-29, 64 Mi elements): one block per tile
  // (grid = tiles, no grid-stride loop) with 2 fragments per lane reached 100.4% of a same-bytes
  // copy for bf16 quantize (U1 + prefetch: 94.3%) and 96.6-98.2% for every dequantize (U2 + st.cs
  // on a resident grid-stride grid: 86-91%).
  using quantize = bulk_tuning<2, 0, 0, 0, 256, 0>;
  using dequantize = bulk_tuning<2, 0, bulk_store_streaming, 0, 256, 0>;
};
template <scale_kind Scale>
struct bulk_defaults<float, Scale> {
  using quantize = bulk_tuning<2, 0, 0, 1, 256, 0>;  // 98.7% (U1 + prefetch 99.3%: within noise)
  using dequantize = bulk_tuning<2, 0, bulk_store_streaming, 0, 256, 0>;
};
// A default per scale kind too: specialise, e.g. `template <> struct bulk_defaults<bf16,
// scale_kind::e8m0> { using quantize = ...; using dequantize = ...; };` right here.
#else
template <class T, scale_kind Scale>
struct bulk_defaults {  // host backend: one thread converts whole blocks
  using quantize = bulk_tuning<1>;
  using dequantize = bulk_tuning<1>;
};
#endif

template <class T>
inline constexpr bool is_block_element_v = std::is_same<T, float>::value || std::is_same<T, bf16>::value;

// Elements each lane quantizes per fragment: 16 bytes on GPUs (one vector load), more if a block
// would otherwise span more than 32 lanes; the whole block on the host backend (one "lane").
template <class Tuning, int BlockSize, class T>
RCCLX_HOST_DEVICE constexpr int quantize_lane_elems() {
#if RCCLX_BACKEND_GPU
  constexpr int v = static_cast<int>(16 / sizeof(T));
  return Tuning::lane_elems != 0 ? Tuning::lane_elems : v > BlockSize / 32 ? v : BlockSize / 32;
#else
  return BlockSize;
#endif
}
template <class Tuning, class T>
RCCLX_HOST_DEVICE constexpr int dequantize_lane_elems() {
  return Tuning::lane_elems != 0 ? Tuning::lane_elems : static_cast<int>(16 / sizeof(T));  // one 16-byte store
}
}  // namespace detail

// The tunings quantize_blocks / dequantize_blocks of T with Scale use when none is given (the
// measured defaults above), e.g. to compare a candidate tuning with the default.
template <class T, scale_kind Scale>
using default_quantize_tuning = typename detail::bulk_defaults<T, Scale>::quantize;
template <class T, scale_kind Scale>
using default_dequantize_tuning = typename detail::bulk_defaults<T, Scale>::dequantize;

}  // namespace fp8
RCCLX_NAMESPACE_END
