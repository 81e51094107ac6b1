// rcclx/lpc/detail/units.hpp: the work partition and the three loops every low-precision
// collective is made of, built on fp8::block_quantize / block_dequantize (no codec of its own):
//   quantize_chunk  input (float/bf16, streamed) -> FP8 codes + scales in a slot, optionally also
//                   the dequantized copy into an output (AllGather's own block)
//   reduce_chunk    one chunk's codes from all N ranks, dequantized and combined in rank order
//                   0..N-1 in fp32 (kernel/reduce.hpp's reduction over the FP8 slots), handed to a
//                   sink (AllReduce: re-quantize; ReduceScatter: store)
//   gather_chunks   up to N-1 peers' codes, dequantized straight into the output
//
// Partition. A chunk's elements are grouped in units of E elements (E = 16 on GPUs: 16 codes are
// one 16-byte access; a whole quantization block on the host backend, where a thread is the whole
// group). Units are grouped in tiles of g.size() units (unit u = tile * G + thread), and tile t of
// every chunk belongs to block t % num_blocks, in every phase of every collective. Barriers pair
// block b of every rank only, so block b must only read peer data that block b of that peer wrote:
// the same tile index in every chunk and phase gives exactly that. A unit is read and written by
// the same thread in every phase, which also makes in-place calls safe where sizes allow them.
// Quantization blocks are BlockSize / E neighbouring units, i.e. neighbouring lanes of one warp
// (G is a multiple of 32), which combine their amax with lane shuffles: every lane of a warp calls
// the quantizer, those past the data with zeros (the logical padding of a partial last block,
// which neither raises the amax nor adds to a sum). Codes of a partial unit are stored whole
// (padding codes are 0); units wholly past the data are neither stored nor read.
//
// Memory traffic is one pass per phase with nothing staged: inputs are loaded with streaming
// (non-temporal) 16-byte loads and quantized in registers, outputs are dequantized in registers
// and written with streaming 16-byte stores, and the FP8 slots use ordinary accesses so they can
// stay in L2 between the phases. Element-by-element fallbacks cover user pointers or chunk offsets
// that are not 16-byte aligned, and partial units.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../../core/ops.hpp"
#include "../../core/peer_table.hpp"
#include "../../fp8/block_scale.hpp"
#include "../../gpu/memory.hpp"
#include "../../kernel/reduce.hpp"
#include "../config.hpp"
#include "../workspace.hpp"

// Peers whose codes and scales are loaded together before any arithmetic: all 8 in a
// reduce-scatter (8 x 20 bytes in flight per lane; with more ranks, batches of 8), 4 in a gather,
// whose dequantized outputs would otherwise all be live at once (sm_90: ~128 registers for 8).
// Macros only so the register budget can be studied; never change them in real code.
#ifndef RCCLX_DETAIL_LPC_REDUCE_BATCH
#  define RCCLX_DETAIL_LPC_REDUCE_BATCH 8
#endif
#ifndef RCCLX_DETAIL_LPC_GATHER_BATCH
#  define RCCLX_DETAIL_LPC_GATHER_BATCH 4
#endif

#if RCCLX_DEVICE_COMPILE && (defined(__clang__) || defined(__CUDA_ARCH__))
#  define RCCLX_DETAIL_LPC_NO_UNROLL _Pragma("unroll 1")
#else
#  define RCCLX_DETAIL_LPC_NO_UNROLL
#endif

RCCLX_NAMESPACE_BEGIN
namespace lpc {
namespace detail {

// Elements one lane converts per step.
template <class Config>
RCCLX_HOST_DEVICE constexpr int unit_elems() {
#if RCCLX_BACKEND_GPU
  return 16;
#else
  return Config::block_size;
#endif
}

// The tiles of one chunk: tile t (units [t*G, t*G + G)) belongs to block t % num_blocks.
struct unit_tiles {
  std::size_t g;       // units per tile = threads of the group
  std::size_t first;   // this block's first tile
  std::size_t stride;  // num_blocks
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE unit_tiles(int group_size, int block, int num_blocks)
      : g(static_cast<std::size_t>(group_size)), first(static_cast<std::size_t>(block)),
        stride(static_cast<std::size_t>(num_blocks)) {}
  // Tiles of a chunk of `elems` elements with E elements per unit.
  template <int E>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::size_t tiles(std::size_t elems) const {
    const std::size_t units = (elems + E - 1) / E;
    return (units + g - 1) / g;
  }
};

// Non-finite values become NaN before quantization: an FP8 block scale cannot carry an infinity
// (the quantizer would saturate it to the block's largest magnitude, silently). The sign is kept.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float inf_to_nan(float x) {
  const std::uint32_t u = rcclx::detail::float_bits(x);
  return (u & 0x7FFFFFFFu) == 0x7F800000u ? rcclx::detail::bits_float(u | 0x00400000u) : x;
}

// Largest finite value of the output type: AllReduce sums are saturated to it before the second
// quantization (FP8 scaling has no infinity), so finite inputs give finite outputs.
template <class T>
RCCLX_HOST_DEVICE constexpr float max_finite_of() {
  return sizeof(T) == 2 ? 0x1.FEp127f : 0x1.FFFFFEp127f;  // bf16: 0x7F7F; float: FLT_MAX
}

// One unit's conversions for element type T under Config.
template <class Config, class T>
struct unit_codec {
  static constexpr int elems = unit_elems<Config>();
  static constexpr int lanes = Config::block_size / elems;  // units per quantization block
  static constexpr int per_vec = static_cast<int>(16 / sizeof(T));
  static constexpr int vecs = elems / per_vec;  // 16-byte vectors of T per unit
  using scale_type = typename Config::scale_type;
  using codes = fp8::packed<elems>;
  using quantizer = fp8::block_quantize<typename Config::format, Config::block_size, Config::scale>;
  using dequantizer = fp8::block_dequantize<typename Config::format, Config::block_size, Config::scale>;
  static_assert(is_element_v<T>, "rcclx::lpc: element type must be float or rcclx::bf16");
  static_assert(elems % per_vec == 0, "a unit is whole 16-byte vectors of T");

  // n <= elems elements at p; elements past n are zero bits. Streaming loads: read once.
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE void load_raw(const T* p, int n, bool vec_ok, gpu::vec16 (&v)[vecs]) {
    if (RCCLX_LIKELY(n == elems && vec_ok)) {
      for (int i = 0; i < vecs; ++i) v[i] = gpu::load16_nontemporal(p + i * per_vec);
      return;
    }
    RCCLX_DETAIL_FP8_UNROLL
    for (int i = 0; i < vecs; ++i) {  // word by word: an array of 2-byte T would go through local memory
      for (int w = 0; w < 4; ++w) {
        std::uint32_t word = 0;
        for (int k = 0; k < 4 / static_cast<int>(sizeof(T)); ++k) {
          const int e = i * per_vec + w * (4 / static_cast<int>(sizeof(T))) + k;
          std::uint32_t bits = 0;
          if (e < n) {
            if constexpr (sizeof(T) == 4) bits = rcclx::detail::float_bits(p[e]);
            else bits = p[e].bits;
          }
          word |= bits << (8 * sizeof(T) * k);
        }
        v[i].w[w] = word;
      }
    }
  }

  // Widened to float, infinities as NaN.
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE void widen(const gpu::vec16 (&v)[vecs], float (&x)[elems]) {
    RCCLX_DETAIL_FP8_UNROLL
    for (int i = 0; i < vecs; ++i) {
      float f[per_vec];
      core::value_traits<T>::unpack(v[i], f);
      for (int k = 0; k < per_vec; ++k) x[i * per_vec + k] = inf_to_nan(f[k]);
    }
  }

  // Group-collective over the lanes of a quantization block (every lane of the warp calls it).
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE scale_type quantize(const float (&x)[elems], codes& q) {
    return quantizer{}(x, q);
  }

  // The only dequantization of LPC data (decode(q) * scale in fp32; outputs are then rounded to T
  // by store): the owner of a chunk and every peer call this same function on the same bits, so
  // all ranks produce the same output bits.
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE void dequantize(const codes& q, scale_type s, float (&y)[elems]) {
    dequantizer{}(q, s, y);
  }

  // The first n <= elems values of y, rounded to T (nearest even), to p. Streaming stores: the
  // output is not read again. Packed from floats word by word: an array of 2-byte T would be
  // reassembled through local memory.
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE void store(T* p, int n, bool vec_ok, const float (&y)[elems]) {
    using traits = core::value_traits<T>;
    if (RCCLX_LIKELY(n == elems && vec_ok)) {
      RCCLX_DETAIL_FP8_UNROLL
      for (int i = 0; i < vecs; ++i) {
        float a[per_vec];
        for (int k = 0; k < per_vec; ++k) a[k] = y[i * per_vec + k];
        gpu::store16_nontemporal(p + i * per_vec, traits::pack(a));
      }
      return;
    }
    RCCLX_DETAIL_FP8_UNROLL
    for (int i = 0; i < elems; ++i)
      if (i < n) p[i] = traits::store(y[i]);
  }

  // Codes of one unit in a slot (16-byte aligned). Peers' codes are read with the coherent vector
  // load (never a read-only-cache path): they were written during this kernel.
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE codes load_codes(const unsigned char* p) {
#if RCCLX_BACKEND_GPU
    static_assert(elems == 16, "one 16-byte vector of codes per unit");
    const gpu::vec16 v = gpu::load16(p);
    codes q;
    for (int i = 0; i < 4; ++i) q.w[i] = v.w[i];
    return q;
#else
    return codes::load(p);
#endif
  }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE void store_codes(unsigned char* p, const codes& q) { q.store(p); }
};

// Elements of the unit that starts at element u * E of a chunk of `elems` elements (0 if none).
template <int E>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int unit_count(std::size_t u, std::size_t elems) {
  const std::size_t first = u * E;
  return first >= elems ? 0 : (elems - first >= E ? E : static_cast<int>(elems - first));
}

// Units per lane per step of quantize_chunk: 4 input vectors (64 bytes) in flight per lane on GPUs.
template <class Config, class T>
RCCLX_HOST_DEVICE constexpr int quantize_unroll() {
#if RCCLX_BACKEND_GPU
  return 4 / unit_codec<Config, T>::vecs > 0 ? 4 / unit_codec<Config, T>::vecs : 1;
#else
  return 1;
#endif
}

// Elements of chunk c when `count` elements are cut into chunks of `chunk` elements (0 past the end).
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::size_t chunk_count(std::size_t count, std::size_t chunk, int c) {
  const std::size_t first = static_cast<std::size_t>(c) * chunk;
  return first >= count ? 0 : (count - first < chunk ? count - first : chunk);
}

// ---- phase 1: quantize ----------------------------------------------------------------------------

// Quantizes the owned units of a chunk: in[0, elems) -> codes at payload[u * E], scale of block k at
// scales[k]. When `out` is not null the dequantized values go to out[0, elems) too (straight from
// registers: what every peer will reconstruct from these codes). Unroll units per lane per step
// have all their loads in flight before the first conversion.
template <class Config, int Unroll, class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void quantize_chunk(int tid, const unit_tiles& ut, const T* in, std::size_t elems,
                                                        bool in_vec_ok, unsigned char* payload,
                                                        typename Config::scale_type* scales, T* out,
                                                        bool out_vec_ok) {
  using cd = unit_codec<Config, T>;
  constexpr int E = cd::elems;
  const std::size_t tiles = ut.tiles<E>(elems);
  RCCLX_DETAIL_LPC_NO_UNROLL
  for (std::size_t t = ut.first; t < tiles; t += ut.stride * Unroll) {  // uniform across the group
    gpu::vec16 raw[Unroll][cd::vecs];
    std::size_t u[Unroll];
    int cnt[Unroll];
    RCCLX_DETAIL_FP8_UNROLL
    for (int j = 0; j < Unroll; ++j) {
      const std::size_t tj = t + static_cast<std::size_t>(j) * ut.stride;
      u[j] = tj * ut.g + static_cast<std::size_t>(tid);
      cnt[j] = tj < tiles ? unit_count<E>(u[j], elems) : 0;
      cd::load_raw(in + u[j] * E, cnt[j], in_vec_ok, raw[j]);
    }
    RCCLX_DETAIL_FP8_UNROLL
    for (int j = 0; j < Unroll; ++j) {
      float x[E];
      cd::widen(raw[j], x);
      typename cd::codes q;
      const auto s = cd::quantize(x, q);  // every lane: lanes of a block combine their amax
      if (cnt[j] > 0) {
        cd::store_codes(payload + u[j] * E, q);
        if (u[j] % cd::lanes == 0) scales[u[j] / cd::lanes] = s;
        if (out) {
          float y[E];
          cd::dequantize(q, s, y);
          cd::store(out + u[j] * E, cnt[j], out_vec_ok, y);
        }
      }
    }
  }
}

// ---- phase 2: reduce one chunk from every rank ----------------------------------------------------------

// Pointer to the same slot of every rank, loaded from the table once (the table may live in global
// memory, where each use would be a dependent load in front of the peer loads).
template <int MaxRanks>
struct rank_slots {
  const unsigned char* base[MaxRanks + RCCLX_DETAIL_LPC_REDUCE_BATCH];  // the slot's payload on rank p
  int n;                                                                 // (padded to whole batches)
};

// Rank p's codes and scale of one unit: the rank-order reduction's source (kernel/reduce.hpp) over
// the same slot of every rank, dequantized to fp32.
template <class Codec, int MaxRanks>
struct slot_source : kernel::source_base {
  using scale_type = typename Codec::scale_type;
  struct loaded {
    typename Codec::codes q;
    scale_type s;
  };
  const rank_slots<MaxRanks>& src;
  std::size_t code_off, scale_off;
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void load(int p, loaded& x) const {
    x.q = Codec::load_codes(src.base[p] + code_off);
    x.s = *reinterpret_cast<const scale_type*>(src.base[p] + scale_off);  // aligned: one load
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void values(int, const loaded& x, float (&y)[Codec::elems]) const {
    Codec::dequantize(x.q, x.s, y);
  }
};

// For every owned unit of a chunk of `elems` elements: loads the unit's codes and scale from every
// rank (batches of RCCLX_DETAIL_LPC_REDUCE_BATCH, all in flight), dequantizes and combines them in rank
// order 0..N-1 in fp32 with ReduceOp, and calls sink(u, count, acc) in every lane (count 0 and acc 0
// for lanes past the data, so a sink may quantize).
template <class Config, class ReduceOp, class T, int MaxRanks, class Sink>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void reduce_chunk(int tid, const unit_tiles& ut, const rank_slots<MaxRanks>& src,
                                                      std::size_t scales_offset, std::size_t elems, Sink&& sink) {
  using cd = unit_codec<Config, T>;
  using scale_type = typename cd::scale_type;
  constexpr int E = cd::elems;
  constexpr int batch = kernel::peer_batch<MaxRanks, RCCLX_DETAIL_LPC_REDUCE_BATCH>;
  const int n = src.n;
  const std::size_t tiles = ut.tiles<E>(elems);
  RCCLX_DETAIL_LPC_NO_UNROLL
  for (std::size_t t = ut.first; t < tiles; t += ut.stride) {
    const std::size_t u = t * ut.g + static_cast<std::size_t>(tid);
    const int cnt = unit_count<E>(u, elems);
    float acc[E];
    RCCLX_DETAIL_FP8_UNROLL
    for (int i = 0; i < E; ++i) acc[i] = 0.0f;
    if (cnt > 0) {
      // Whole batches (every batch when N is a multiple of 8, e.g. 8 ranks) issue their loads as
      // straight-line code, all in flight; only a partial last batch tests each peer.
      const std::size_t code_off = u * E, scale_off = scales_offset + (u / cd::lanes) * sizeof(scale_type);
      (void)kernel::fold_ranks<MaxRanks, batch, true>(slot_source<cd, MaxRanks>{{}, src, code_off, scale_off}, n,
                                                      kernel::rank_order<ReduceOp, float, E>{acc});
    }
    sink(u, cnt, acc);
  }
}

// ---- phase 3: gather peers' chunks ----------------------------------------------------------------

// Entry j = step j of the mesh schedule: peer[j]'s slot `src[j]` (payload; scales at
// scales_offset) decodes into output block peer[j], at out + peer[j] * block_elems. The step whose
// peer is the rank itself has src null and is skipped (which step that is depends on the schedule).
// Filled with compile-time indices (j < MaxRanks) so that it stays in registers.
template <int MaxRanks>
struct gather_entries {
  const unsigned char* src[MaxRanks + RCCLX_DETAIL_LPC_GATHER_BATCH];  // padded to whole batches
  int peer[MaxRanks + RCCLX_DETAIL_LPC_GATHER_BATCH];
  int n;  // steps (= ranks)
};

// The list of a rank: step s visits peer_of(s); src_of(p, s) is peer p's slot. Unrolled (constant
// indices) so that the list lives in registers, never in scratch.
template <int MaxRanks, class PeerOf, class SrcOf>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE gather_entries<MaxRanks> make_gather_entries(int n, int self, PeerOf&& peer_of,
                                                                                SrcOf&& src_of) {
  gather_entries<MaxRanks> list{};
  list.n = n;
  RCCLX_DETAIL_FP8_UNROLL
  for (int s = 0; s < MaxRanks; ++s) {
    if (s < n) {
      const int p = peer_of(s);
      list.peer[s] = p;
      list.src[s] = p == self ? nullptr : src_of(p, s);  // own block: written by the caller
    }
  }
  return list;
}

// For every owned unit of the first `elems` elements of each output block: loads the codes and
// scales of all entries (batches, all in flight), then dequantizes each into out + peer * block_elems.
// Units at or past out_end (the output's end: AllReduce's last chunk is shorter) are skipped.
template <class Config, class T, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void gather_chunks(int tid, const unit_tiles& ut,
                                                       const gather_entries<MaxRanks>& list, std::size_t scales_offset,
                                                       std::size_t elems, T* out, std::size_t block_elems,
                                                       std::size_t out_elems, bool out_vec_ok) {
  using cd = unit_codec<Config, T>;
  using scale_type = typename cd::scale_type;
  constexpr int E = cd::elems;
  constexpr int batch = kernel::peer_batch<MaxRanks, RCCLX_DETAIL_LPC_GATHER_BATCH>;
  const int n = list.n;
  const std::size_t tiles = ut.tiles<E>(elems);
  RCCLX_DETAIL_LPC_NO_UNROLL
  for (std::size_t t = ut.first; t < tiles; t += ut.stride) {
    const std::size_t u = t * ut.g + static_cast<std::size_t>(tid);
    const int in_block = unit_count<E>(u, elems);
    if (in_block == 0) continue;  // no lane cooperation here: lanes may leave early
    const std::size_t code_off = u * E, scale_off = scales_offset + (u / cd::lanes) * sizeof(scale_type);
    RCCLX_DETAIL_FP8_UNROLL
    for (int j0 = 0; j0 < MaxRanks; j0 += batch) {  // unrolled: constant indices, the list in registers
      if (j0 >= n) continue;
      typename cd::codes q[batch] = {};  // (initialised only to quiet GCC: every use is guarded)
      scale_type s[batch] = {};
      int cnt[batch];
      RCCLX_DETAIL_FP8_UNROLL
      for (int j = 0; j < batch; ++j) {
        cnt[j] = 0;
        if (j0 + j < n && list.src[j0 + j]) {
          const std::size_t first = static_cast<std::size_t>(list.peer[j0 + j]) * block_elems + u * E;
          const int left = unit_count<E>(0, first < out_elems ? out_elems - first : 0);
          cnt[j] = left < in_block ? left : in_block;
        }
        if (cnt[j] > 0) {
          q[j] = cd::load_codes(list.src[j0 + j] + code_off);
          s[j] = *reinterpret_cast<const scale_type*>(list.src[j0 + j] + scale_off);  // aligned: one load
        }
      }
      RCCLX_DETAIL_FP8_UNROLL
      for (int j = 0; j < batch; ++j) {
        if (cnt[j] > 0) {
          float y[E];
          cd::dequantize(q[j], s[j], y);
          cd::store(out + static_cast<std::size_t>(list.peer[j0 + j]) * block_elems + u * E, cnt[j], out_vec_ok, y);
        }
      }
    }
  }
}

}  // namespace detail
}  // namespace lpc
RCCLX_NAMESPACE_END
