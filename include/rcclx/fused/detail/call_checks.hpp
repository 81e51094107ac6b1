// rcclx/fused/detail/call_checks.hpp: the checked mode's (RCCLX_CHECKS) device-side checks of a
// tile-flag call (fused::tile_allreduce, fused::combine through detail::tile_exchange): its
// arguments, as the host-side check() sees them, found in every thread of every block before the
// first access to the pads or the buffers, and recorded once per block (core::record_error,
// errc::invalid_argument, kind = the misuse); and the host-side check() of every build.
//
// What the checked mode adds to a tile call (fused/detail/tile_exchange.hpp): the call's
// fingerprint (core/call_check.hpp) and the tile map's (detail/map_check.hpp) go in the control
// slots' check packets and are compared before the first output. The constructors check the
// arguments and the region before touching anything; the audit words (core/tile_audit.hpp) name a
// tile published twice, reduced by another block or before its publish, a finish() count other than
// the grid's, the previous call's tiles unpublished, unreduced or their input changed before the
// end of their reduce (found during the next call), and two calls in flight over the same bytes or
// slots. A call refused by its arguments, its region or an overlap publishes, waits and finishes
// nothing; one refused by the missing-finish detector's exchange (answered before the first output)
// may have raised its flags first (a missing finish() leaves them with the previous call's number,
// which no peer of a correct call waits for; the rank's error record refuses its later calls).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "../../core/error.hpp"
#include "../../core/ops.hpp"
#include "../../core/peer_table.hpp"
#include "../../core/region.hpp"
#include "../../core/signal_pad.hpp"
#include "../../core/slot_ranges.hpp"
#include "../../core/tile_audit.hpp"
#include "../epilogue.hpp"
#include "../stage_check.hpp"
#include "../../gpu/group.hpp"
#include "../../gpu/memory.hpp"
#include "../../gpu/warp.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {

// Which block of a rank reduces a tile (the same on every rank and every block of a call).
// same_block: the block that wrote and published it. any_block: any one block of the rank, e.g. a
// GEMM whose blocks with fewer tiles reduce the tiles of blocks that are still multiplying; each
// publish also stores a flag for this rank's own blocks (one more store per tile).
enum class tile_reducer { same_block, any_block };

namespace detail {
RCCLX_HOST_DEVICE constexpr std::size_t round16(std::size_t b) { return (b + 15) / 16 * 16; }
inline constexpr std::size_t default_results = ~std::size_t{0};  // tree results: one tile of T per tile
using core::tile_slots;

// A misuse and its two values (error_record::observed, reserved); call: error_record::call.
struct call_problem {
  core::misuse what{};
  std::uint32_t a = 0, b = 0, call = 0;
  RCCLX_HOST_DEVICE constexpr explicit operator bool() const { return static_cast<std::uint32_t>(what) != 0; }
};

// A value as an error record holds it: saturated at 2^32 - 1.
RCCLX_HOST_DEVICE constexpr std::uint32_t sat32(std::size_t v) {
  return v > 0xFFFFFFFFull ? 0xFFFFFFFFu : static_cast<std::uint32_t>(v);
}

// Is the slot range inside pads of max_blocks slots?
RCCLX_HOST_DEVICE constexpr bool slots_fit(tile_slots s, int max_blocks) {
  return s.first >= 0 && s.max_tiles >= 0 && s.end() <= max_blocks;
}

// The slot range a call's flags may touch: `s`, or slot 0 alone when `s` is not inside the pads (the
// call is refused and only reads slot 0's control row, in the flags' constructor).
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE tile_slots slots_in_pads(int max_blocks, tile_slots slots) {
  return slots_fit(slots, max_blocks) ? slots : tile_slots{0, 0};
}
template <int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE tile_slots slots_in_pads(const core::signal_pads<MaxRanks>& s, tile_slots slots) {
  return slots_in_pads(s.max_blocks, slots);
}

// The ranks (bit p: rank p) whose buffer pointer in table `t` is null, and those whose pointer
// plus `offset` (a region's) is not 16-byte aligned: every pointer loaded at once, whatever the
// rank count (a table in device memory: one round trip, not one per rank).
struct buffer_masks {
  std::uint32_t null_ranks = 0, misaligned_ranks = 0;
};
// ... of the pointers `data` as loaded (num_ranks of them).
template <int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE buffer_masks buffer_masks_of(const std::uintptr_t (&data)[MaxRanks], int num_ranks,
                                                                 std::size_t offset) {
  buffer_masks m;
  for (int p = 0; p < MaxRanks; ++p) {
    if (p >= num_ranks) continue;
    m.null_ranks |= (data[p] == 0u ? 1u : 0u) << p;
    m.misaligned_ranks |= (data[p] % 16 == 0 && offset % 16 == 0 ? 0u : 1u) << p;
  }
  return m;
}
template <class Elem, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE buffer_masks load_buffer_masks(const core::peer_table<Elem, MaxRanks>& t,
                                                                   std::size_t offset) {
  std::uintptr_t data[MaxRanks];
  for (int p = 0; p < MaxRanks; ++p) data[p] = reinterpret_cast<std::uintptr_t>(t.data[p]);
  return buffer_masks_of(data, t.num_ranks(), offset);
}

// What a tile call's constructor loads for its checks, issued just before it reads the call
// counter (tile_exchange::probe_load), so that their round trip is the counter's: its slot range's
// binding words (core::audit_bound_words) and every rank's buffer pointer, looked at only after the
// counter's read (buffer_masks_of), so that no thread waits for them before it.
template <int MaxRanks>
struct call_probe {
  core::bound_words bound;
  std::uintptr_t data[MaxRanks] = {};
  bool loaded = false;  // bound and data hold the words (the block's last thread; the others load them when they need them)
};

// The first problem of a call of num_tiles tiles of tile_elems elements on a table whose pads have
// max_blocks slots and whose buffers hold `capacity` bytes, in region `r` (core::whole_buffer for
// the constructor without a region), in the order check() names them: tile_elems whole vectors,
// num_tiles within the slot range, the slot range inside the pads, every rank's buffer non-null and
// 16-byte aligned (`buffers`: the masks of the table's pointers and r.offset; null: not looked at,
// the problems every thread of a call finds without a load), the region inside the buffer, and the
// bytes the resolved algorithm needs (half_need: one half, inputs and for tree the results) within
// the region's halves (half_bytes(r.bytes) each).
RCCLX_HOST_DEVICE inline call_problem find_call_problem(int max_blocks, std::size_t capacity, const core::region& r,
                                                           std::size_t tile_elems, int num_tiles, std::size_t vec_elems, std::size_t half_need,
                                                           std::size_t region_half, bool tree, const buffer_masks* buffers) {
  using core::misuse;
  if (RCCLX_UNLIKELY(tile_elems == 0 || tile_elems % vec_elems != 0))
    return {misuse::arg_tile_elems, sat32(tile_elems), sat32(vec_elems), 0u};
  if (RCCLX_UNLIKELY(num_tiles < 0 || num_tiles > r.slots.max_tiles))
    return {misuse::arg_num_tiles, static_cast<std::uint32_t>(num_tiles),
            static_cast<std::uint32_t>(r.slots.max_tiles), 0u};
  if (RCCLX_UNLIKELY(!slots_fit(r.slots, max_blocks)))
    return {misuse::arg_slots, static_cast<std::uint32_t>(r.slots.end()), static_cast<std::uint32_t>(max_blocks), 0u};
  if (RCCLX_UNLIKELY(buffers && (buffers->null_ranks | buffers->misaligned_ranks) != 0u)) {
    const std::uint32_t any = buffers->null_ranks | buffers->misaligned_ranks;
    int p = 0;
    while (((any >> p) & 1u) == 0u) ++p;
    return {misuse::arg_buffer, static_cast<std::uint32_t>(p), (buffers->null_ranks >> p) & 1u ? 0u : 1u, 0u};
  }
  if (RCCLX_UNLIKELY(r.offset > capacity || r.bytes > capacity - r.offset))
    return {misuse::region_outside_buffer, sat32(r.offset + r.bytes), sat32(capacity), 0u};
  if (RCCLX_UNLIKELY(half_need > region_half))
    return {misuse::region_too_small, sat32(2 * half_need), sat32(r.bytes), (r.sized_for << 8) | (tree ? 1u : 0u)};
  return {};
}

// Host, every build: the exchange's check() (tile_exchange::check) of a call of num_tiles tiles of
// tile_elems elements of T in vectors of vec_elems: throws rcclx::error naming the argument and the
// limit. need: the workspace bytes (two halves), half: the bytes of one half of the buffer.
template <class T, int MaxRanks>
inline void check_tile_call(const char* who, const core::peer_table<T, MaxRanks>& t, tile_slots slots,
                            std::size_t tile_elems, int num_tiles, int vec_elems, std::size_t need, std::size_t half,
                            bool tree) {
  const std::string w(who);
  const std::size_t ve = static_cast<std::size_t>(vec_elems);
  if (tile_elems == 0 || tile_elems % ve != 0)
    throw error(errc::invalid_argument, w + ": tile_elems = " + std::to_string(tile_elems) +
                                            " must be a positive multiple of " + std::to_string(vec_elems) +
                                            " (16-byte vectors of " + core::type_name<T>() + ")");
  if (num_tiles < 0 || num_tiles > slots.max_tiles)
    throw error(errc::invalid_argument, w + ": num_tiles = " + std::to_string(num_tiles) + " is outside [0, " +
                                            std::to_string(slots.max_tiles) + "] (tile_slots.max_tiles)");
  if (slots.first < 0 || slots.max_tiles < 0 || slots.end() > t.signals.max_blocks)
    throw error(errc::invalid_argument,
                w + ": tile_slots{first = " + std::to_string(slots.first) + ", max_tiles = " +
                    std::to_string(slots.max_tiles) + "} needs signal-pad slots [" + std::to_string(slots.first) +
                    ", " + std::to_string(slots.end()) + ") but the pads have max_blocks = " +
                    std::to_string(t.signals.max_blocks));
  for (int p = 0; p < t.num_ranks(); ++p) {
    if (!t.data[p]) throw error(errc::invalid_argument, w + ": table.data[" + std::to_string(p) + "] is null");
    if (!gpu::is_aligned(t.data[p], 16))
      throw error(errc::misaligned, w + ": table.data[" + std::to_string(p) + "] is not 16-byte aligned");
  }
  if (need / 2 > half)
    throw error(errc::invalid_argument, w + ": " + std::to_string(num_tiles) + " tiles of " +
                                            std::to_string(tile_elems) + " elements need " + std::to_string(need) +
                                            " bytes of symmetric buffer (two halves" +
                                            (tree ? std::string(", with results") : std::string()) +
                                            ") but it has " + std::to_string(t.capacity_bytes));
}

// Under same_block, the reducing block's look at a tile's publish mark `mark` in call `epoch`:
// reduced_before_publish (not published in this call: the tile, the block) or
// reducer_not_publisher (another block published it: its block, this block), or none.
RCCLX_HOST_DEVICE inline call_problem reducer_mark_problem(std::uint32_t mark, std::uint32_t epoch, int tile, int block) {
  const std::uint32_t b = static_cast<std::uint32_t>(block) & 0xFFFFu;
  if (!core::audit_mark_of(mark, epoch)) return {core::misuse::reduced_before_publish, static_cast<std::uint32_t>(tile), b, 0u};
  if ((mark & 0xFFFFu) != b) return {core::misuse::reducer_not_publisher, mark & 0xFFFFu, b, 0u};
  return {};
}

// The look's finding `m` on tile t of the call `prev`, recorded (both looks below).
template <int MaxRanks>
RCCLX_HOST_DEVICE inline void record_previous_tile(const core::signal_pads<MaxRanks>& s, core::misuse m, int t,
                                                   std::uint32_t prev) {
  core::record_error(s, errc::invalid_argument, s.rank, static_cast<std::uint32_t>(m), t, prev, static_cast<std::uint32_t>(t), prev);
}

// One thread of a call of epoch `epoch` on `slots` (in finish(), block 0's first check lane where
// the lanes hold no whole warp: tile_exchange::look_back_settle): the call before it (epoch - 1,
// whose kernel ended) as its rows recorded it:
// every tile published on this rank (tile_not_published) and, flat, reduced (tile_not_reduced),
// its input unchanged until the end of its reduce (input_changed; the input hashes of the call's
// parity are cleared for the call after this one); the first finding recorded on `s`. `row1`:
// core::audit_row of the range's slot first + 1 (row t at row1 + t * audit_row_words); max_tiles:
// the range's.
// The call's note and its rows are loaded in batches of previous_call_batch tiles, the first
// batch with the note (one round trip for a call of up to that many tiles).
inline constexpr int previous_call_batch = 8;
template <int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void audit_previous_call(const core::signal_pads<MaxRanks>& s, std::uint32_t* row1,
                                                             int max_tiles, std::uint32_t epoch) {
  if (max_tiles < 1) return;
  const std::uint32_t prev = epoch - 1u;
  const std::uint32_t call = gpu::load_relaxed_system(row1 + core::audit_call_word(prev));
  const std::uint32_t shape = gpu::load_relaxed_system(row1 + core::audit_call_word(prev) + 1);
  int n = max_tiles;  // until the note says how many tiles the call had
  const bool flat = (shape >> 31) == 0u;
  for (int t0 = 0; t0 < n; t0 += previous_call_batch) {
    std::uint32_t mark[previous_call_batch], used[previous_call_batch], hash[previous_call_batch];
    for (int i = 0; i < previous_call_batch; ++i) {
      const int t = t0 + i < max_tiles ? t0 + i : max_tiles - 1;  // rows past the range's last: that one again
      const std::uint32_t* row = row1 + static_cast<std::size_t>(t) * core::audit_row_words;
      mark[i] = gpu::load_relaxed_system(row + core::audit_mark_word(prev));
      used[i] = gpu::load_relaxed_system(row + core::audit_consumed_word(prev));
      hash[i] = gpu::load_relaxed_system(row + core::audit_hash_word(prev));
    }
    if (t0 == 0) {
      if (call != prev || prev == 0u) return;
      const std::uint32_t tiles = shape & 0x7FFFFFFFu;
      n = tiles < static_cast<std::uint32_t>(max_tiles) ? static_cast<int>(tiles) : max_tiles;
    }
    for (int i = 0; i < previous_call_batch && t0 + i < n; ++i) {
      const core::misuse m = core::audit_tile_verdict(mark[i], used[i], hash[i], prev, flat);
      gpu::store_relaxed_system(row1 + static_cast<std::size_t>(t0 + i) * core::audit_row_words + core::audit_hash_word(prev), 0u);
      if (RCCLX_UNLIKELY(m != core::misuse{})) {
        record_previous_tile(s, m, t0 + i, prev);
        return;
      }
    }
  }
}

// The same look by a whole warp of `width` lanes (lane: 0 .. width - 1), lane i taking tiles i,
// i + width, ...: previous_call_issue loads the call's note and the first batch of rows (so that
// their round trip overlaps the caller's other work), previous_call_settle compares them and takes
// the later batches. The lowest tile with a finding is recorded (a warp minimum), as the one
// thread's scan records it.
struct previous_look {
  std::uint32_t call = 0, shape = 0, mark = 0, used = 0, hash = 0;
};
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE previous_look previous_call_issue(const std::uint32_t* row1, int max_tiles,
                                                                      std::uint32_t epoch, int lane) {
  previous_look p;
  if (max_tiles < 1) return p;
  const std::uint32_t prev = epoch - 1u;
  p.call = gpu::load_relaxed_system(row1 + core::audit_call_word(prev));
  p.shape = gpu::load_relaxed_system(row1 + core::audit_call_word(prev) + 1);
  const std::uint32_t* row = row1 + static_cast<std::size_t>(lane < max_tiles ? lane : max_tiles - 1) * core::audit_row_words;
  p.mark = gpu::load_relaxed_system(row + core::audit_mark_word(prev));
  p.used = gpu::load_relaxed_system(row + core::audit_consumed_word(prev));
  p.hash = gpu::load_relaxed_system(row + core::audit_hash_word(prev));
  return p;
}
template <int MaxRanks>
RCCLX_HOST_DEVICE void previous_call_settle(const core::signal_pads<MaxRanks>& s, std::uint32_t* row1, int max_tiles,
                                            std::uint32_t epoch, int lane, int width, previous_look p) {
  const std::uint32_t prev = epoch - 1u;
  if (max_tiles < 1 || p.call != prev || prev == 0u) return;  // the same in every lane
  const std::uint32_t tiles = p.shape & 0x7FFFFFFFu;
  const int n = tiles < static_cast<std::uint32_t>(max_tiles) ? static_cast<int>(tiles) : max_tiles;
  const bool flat = (p.shape >> 31) == 0u;
  constexpr int none = 0x7FFFFFFF;
  for (int t0 = 0; t0 < n; t0 += width) {
    const int t = t0 + lane;
    std::uint32_t* row = row1 + static_cast<std::size_t>(t) * core::audit_row_words;
    if (t0 > 0 && t < n) {
      p.mark = gpu::load_relaxed_system(row + core::audit_mark_word(prev));
      p.used = gpu::load_relaxed_system(row + core::audit_consumed_word(prev));
      p.hash = gpu::load_relaxed_system(row + core::audit_hash_word(prev));
    }
    core::misuse m{};
    int bad = none;
    if (t < n) {
      m = core::audit_tile_verdict(p.mark, p.used, p.hash, prev, flat);
      gpu::store_relaxed_system(row + core::audit_hash_word(prev), 0u);
      if (RCCLX_UNLIKELY(m != core::misuse{})) bad = t;
    }
    for (int k = width / 2; k > 0; k /= 2) {
      const int o = gpu::shuffle_xor(bad, k);
      bad = o < bad ? o : bad;
    }
    if (RCCLX_LIKELY(bad == none)) continue;
    if (t == bad) record_previous_tile(s, m, t, prev);
    return;
  }
}

// The thread that decided for a launch: its call (epoch, tiles, algorithm) in the first tile's
// row (`row1`, as above), for the next call's look.
RCCLX_HOST_DEVICE inline void audit_note_call(std::uint32_t* row1, tile_slots slots, std::uint32_t epoch, int num_tiles,
                                              bool tree) {
  if (slots.max_tiles < 1) return;
  gpu::store_relaxed_system(row1 + core::audit_call_word(epoch) + 1,
                            static_cast<std::uint32_t>(num_tiles) | (tree ? 0x80000000u : 0u));
  gpu::store_relaxed_system(row1 + core::audit_call_word(epoch), epoch);
}

// A stage's view of a call on `map` for tiles of T (stage_context): the map's shape, vector path
// and vector width (fused::make_stage_context) and, forbidden, this rank's bytes [lo, hi) of the
// call's region but its results area [results, results + results_bytes).
template <class T, class Map>
RCCLX_HOST_DEVICE stage_context call_stage_context(const Map& map, const unsigned char* lo, const unsigned char* hi,
                                                   const unsigned char* results, std::size_t results_bytes) {
  stage_context ctx = fused::make_stage_context<T>(map);
  ctx.forbidden[0][0] = lo;
  if (results_bytes > 0) {
    ctx.forbidden[0][1] = results;
    ctx.forbidden[1][0] = results + results_bytes;
    ctx.forbidden[1][1] = hi;
  } else {
    ctx.forbidden[0][1] = hi;
  }
  return ctx;
}

}  // namespace detail
}  // namespace fused
RCCLX_NAMESPACE_END
