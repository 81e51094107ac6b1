// rcclx/core/tile_audit.hpp: the checked mode's (RCCLX_CHECKS) audit words of tile-flag calls
// (fused::tile_allreduce, fused::combine), in the pads' audit region (core/signal_pad.hpp), so that
// a call's misuse of its tiles is named on the device instead of passing silently.
//
// Region: a directory (audit_directory_bytes: a bit per slot, set for the first slot of every slot
// range bound to bytes), then a row of audit_row_words u32 per slot. A call on
// tile_slots{first, max_tiles} with epoch e (parity p = e & 1) uses
//   row first (control): [reserved x 3, bound end slot (0: not bound), lo (2 words), hi (2 words)]:
//                        [lo, hi) = this rank's bytes of the call's region (absolute addresses)
//   row first + 1 + t (tile t): [2p] publish mark, [2p + 1] consumed epoch; row first + 1 also
//                        [4 + 2p] the call's epoch, [5 + 2p] its tiles | tree << 31;
//                        [8 + p] the input hash (below)
// By parity, so that one thread of call e + 1 (block 0's audit thread) can look at call e's rows
// (tile_not_published; flat: tile_not_reduced) while call e + 1 writes its own: off the critical
// path, and after call e's kernel ended (finish() may come before a call's work, so a call's own
// finish() cannot look).
// publish mark = audit_mark(epoch, block), exchanged by the publishing block: the old value names a
// second publisher of the same call (published_twice), the reducer compares it with itself under
// tile_reducer::same_block (reduced_before_publish, reducer_not_publisher). Epochs carry the call,
// so nothing needs clearing between calls; emulated_world::reset zeroes the region.
// input hash: the xor of a hash of every 16-byte vector of the tile's input (with its index), bit 0
// cleared, and 1, taken once when the tile is published and once more at the end of its reduce
// (after the epilogue): 0 when the input did not change in between; bit 0 set: the tile was not
// reduced by the library's reduce (not looked at). Otherwise input_changed. The next call's look
// clears the words of its parity (a call without the second pass would leave them set).
// Written only by checked builds; present in every build (one pad layout).
#pragma once

#include <cstdint>

#include "../gpu/atomic.hpp"
#include "../gpu/group.hpp"
#include "barrier.hpp"
#include "error.hpp"
#include "signal_pad.hpp"
#include "slot_ranges.hpp"

RCCLX_NAMESPACE_BEGIN
namespace core {

// Words of a tile row for a call of epoch e, of the first tile's row (the call itself), and of the
// control row.
RCCLX_HOST_DEVICE constexpr int audit_mark_word(std::uint32_t epoch) { return static_cast<int>(2u * (epoch & 1u)); }
RCCLX_HOST_DEVICE constexpr int audit_consumed_word(std::uint32_t epoch) { return audit_mark_word(epoch) + 1; }
RCCLX_HOST_DEVICE constexpr int audit_call_word(std::uint32_t epoch) { return 4 + audit_mark_word(epoch); }
RCCLX_HOST_DEVICE constexpr int audit_hash_word(std::uint32_t epoch) { return static_cast<int>(8u + (epoch & 1u)); }
// Does an input hash after a call name a changed input (both passes taken, the hashes differ)?
RCCLX_HOST_DEVICE constexpr bool audit_hash_changed(std::uint32_t h) { return (h & 1u) == 0u && h != 0u; }
inline constexpr int audit_end_word = 3, audit_lo_word = 4, audit_hi_word = 6;
// Slots the directory's bits cover (ranges starting beyond are not compared).
inline constexpr int audit_directory_slots = static_cast<int>(audit_directory_bytes * 8);

// The audit row of `slot` of this rank.
template <int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t* audit_row(const signal_pads<MaxRanks>& s, int slot) {
  return s.audit_base() + audit_directory_bytes / sizeof(std::uint32_t) +
         static_cast<std::size_t>(slot) * audit_row_words;
}

// A publish mark of `epoch` by `block`: bit 31 set (a mark is never 0, whatever the epoch), the
// epoch's low 15 bits, the block's low 16 bits; does `mark` belong to `epoch`?
RCCLX_HOST_DEVICE constexpr std::uint32_t audit_epoch_bits(std::uint32_t epoch) { return 0x8000u | (epoch & 0x7FFFu); }
RCCLX_HOST_DEVICE constexpr std::uint32_t audit_mark(std::uint32_t epoch, int block) {
  return (audit_epoch_bits(epoch) << 16) | (static_cast<std::uint32_t>(block) & 0xFFFFu);
}
RCCLX_HOST_DEVICE constexpr bool audit_mark_of(std::uint32_t mark, std::uint32_t epoch) {
  return (mark >> 16) == audit_epoch_bits(epoch);
}

// The verdict on tile t of a call of `epoch` from its row's words of that epoch (mark, consumed,
// hash: row[audit_mark_word], [audit_consumed_word], [audit_hash_word]): not published on this rank
// (tile_not_published), flat and not reduced (tile_not_reduced), its input changed before the end of
// its reduce (input_changed), or none. The one verdict of the device's look (a call's next call)
// and the host's (audit_last_calls).
RCCLX_HOST_DEVICE constexpr misuse audit_tile_verdict(std::uint32_t mark, std::uint32_t consumed, std::uint32_t hash,
                                                      std::uint32_t epoch, bool flat) {
  if (!audit_mark_of(mark, epoch)) return misuse::tile_not_published;
  if (flat && consumed != epoch) return misuse::tile_not_reduced;
  if (audit_hash_changed(hash)) return misuse::input_changed;
  return misuse{};
}

// The verdict of binding a slot range to bytes: the misuse (region_overlap_slots,
// region_overlap_bytes, or none) with (the other range's first slot, this one's); or `follows`: the
// range was refused by another thread of this launch, which recorded why.
struct bind_verdict {
  misuse what{};
  std::uint32_t other = 0, mine = 0;
  bool follows = false;
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool refused() const { return what != misuse{} || follows; }
};

// A range's end word (row first, audit_end_word): 0 unbound; otherwise the range's end (first + 1 +
// max_tiles, below 2^16), the launch that last decided it (low 14 bits) and its state: bound to
// [lo, hi) (no state bit), bind_deciding (a thread of that launch compares the range with the
// others) or bind_refused (that launch refused it). One thread per launch decides (the
// compare-and-swap to bind_deciding), the launch's other threads on the range take its verdict: a
// launch never both refuses and uses a range. The launch in a bound word makes a decision of this
// launch differ from an earlier one's, so that a thread with words loaded before it never decides
// again.
inline constexpr std::uint32_t bind_deciding = 0x80000000u, bind_refused = 0x40000000u;
RCCLX_HOST_DEVICE constexpr std::uint32_t bind_word(std::uint32_t state, std::uint32_t launch, std::uint32_t end) {
  return state | ((launch & 0x3FFFu) << 16) | (end & 0xFFFFu);
}
// The word's state and end, without its launch.
RCCLX_HOST_DEVICE constexpr std::uint32_t bind_state_end(std::uint32_t w) { return w & 0xC000FFFFu; }

namespace detail {
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint64_t load_u64(const std::uint32_t* p) {
  return static_cast<std::uint64_t>(gpu::load_relaxed_system(p)) |
         (static_cast<std::uint64_t>(gpu::load_relaxed_system(p + 1)) << 32);
}
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store_u64(std::uint32_t* p, std::uint64_t v) {
  gpu::store_relaxed_system(p, static_cast<std::uint32_t>(v));
  gpu::store_relaxed_system(p + 1, static_cast<std::uint32_t>(v >> 32));
}
}  // namespace detail

// The words that say whether a slot range is bound to bytes [lo, hi) already, loaded with the
// constructor's other loads (every thread; their latency overlaps) and compared later.
struct bound_words {
  std::uint32_t end = 0, w[4] = {0, 0, 0, 0};
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool same(std::uint32_t e, std::uint64_t lo, std::uint64_t hi) const {
    const std::uint64_t l = static_cast<std::uint64_t>(w[0]) | (static_cast<std::uint64_t>(w[1]) << 32);
    const std::uint64_t h = static_cast<std::uint64_t>(w[2]) | (static_cast<std::uint64_t>(w[3]) << 32);
    return (bind_state_end(end) == e) & (l == lo) & (h == hi);
  }
};
// ... of the range starting at slot `first`, whose audit row is `c` (audit_row(s, first)).
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bound_words audit_bound_words_at(const std::uint32_t* c, int first) {
  bound_words b;
  if (first >= audit_directory_slots) return b;
  b.end = gpu::load_relaxed_system(c + audit_end_word);
  for (int i = 0; i < 4; ++i) b.w[i] = gpu::load_relaxed_system(c + audit_lo_word + i);
  return b;
}
template <int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bound_words audit_bound_words(const signal_pads<MaxRanks>& s, tile_slots slots) {
  return audit_bound_words_at(audit_row(s, slots.first), slots.first);
}

namespace detail {
// The decision of audit_bind, by the one thread whose compare-and-swap made `end_word` deciding:
// the directory bit set, a fence, and every other range bound or being decided compared (of two
// ranges decided at once, at least one sees the other: each made itself visible before looking).
template <int MaxRanks>
RCCLX_HOST_DEVICE bind_verdict audit_bind_decide(const signal_pads<MaxRanks>& s, tile_slots slots, std::uint64_t lo,
                                                 std::uint64_t hi) {
  bind_verdict v{};
  const auto end = static_cast<std::uint32_t>(slots.end());
  std::uint32_t* bits = s.audit_base();
  (void)gpu::fetch_or_local(bits + slots.first / 32, 1u << (slots.first % 32));
  gpu::fence_system();
  const int limit = s.max_blocks < audit_directory_slots ? s.max_blocks : audit_directory_slots;
  for (int wi = 0; wi * 32 < limit && v.what == misuse{}; ++wi) {
    std::uint32_t word = gpu::load_relaxed_system(bits + wi);
    while (word != 0u && v.what == misuse{}) {
      int b = 0;
      while (((word >> b) & 1u) == 0u) ++b;
      word &= ~(1u << b);
      const int other = wi * 32 + b;
      if (other == slots.first) continue;
      const std::uint32_t* o = audit_row(s, other);
      const std::uint32_t ow = gpu::load_relaxed_system(o + audit_end_word);
      if (ow == 0u || (ow & bind_refused) != 0u) continue;  // not bound
      const std::uint32_t oend = ow & 0xFFFFu;
      const std::uint64_t olo = load_u64(o + audit_lo_word), ohi = load_u64(o + audit_hi_word);
      if (static_cast<std::uint32_t>(other) < end && static_cast<std::uint32_t>(slots.first) < oend)
        v = {misuse::region_overlap_slots, static_cast<std::uint32_t>(other), static_cast<std::uint32_t>(slots.first)};
      else if (olo < hi && lo < ohi)
        v = {misuse::region_overlap_bytes, static_cast<std::uint32_t>(other), static_cast<std::uint32_t>(slots.first)};
    }
  }
  return v;
}
}  // namespace detail

// Checked mode, any thread of a launch's first wave on the slot range `slots` (idempotent): binds
// the range to this rank's bytes [lo, hi) and compares it with every other bound range of this
// rank (calls that may be in flight at once: a range stays bound until the pads are reset).
// `bound`: the range's words as audit_bound_words loaded them; already bound to the same bytes:
// nothing to do. Otherwise the bytes are written and one thread of the launch decides (the end
// word's compare-and-swap to bind_deciding): it compares (detail::audit_bind_decide) and leaves the
// range bound, or refused for its launch (unbound for the next launch, which compares again);
// the launch's other threads on the range wait for that verdict (bounded) and take it (follows),
// so that no block of a launch uses a range another block of it refused. Launch 0 (host code)
// leaves a refused range unbound. Ranges that start past the directory's slots or end past slot
// 65535 are not compared.
template <int MaxRanks>
RCCLX_HOST_DEVICE bind_verdict audit_bind(const signal_pads<MaxRanks>& s, tile_slots slots,
                                          std::uint64_t lo, std::uint64_t hi, const bound_words& bound) {
  bind_verdict v{};
  const auto end = static_cast<std::uint32_t>(slots.end());
  if (slots.first >= audit_directory_slots || end > 0xFFFFu) return v;  // not compared (the word holds 16 bits of end)
  if (RCCLX_LIKELY(bound.same(end, lo, hi))) return v;
  std::uint32_t* c = audit_row(s, slots.first);
  const std::uint32_t launch = gpu::launch_id() & 0x3FFFu;
  const std::uint32_t deciding = bind_word(bind_deciding, launch, end), refused = bind_word(bind_refused, launch, end);
  detail::store_u64(c + audit_lo_word, lo);
  detail::store_u64(c + audit_hi_word, hi);
  gpu::fence_system();
  // w: the end word as last seen; decided: written by a decision made after `bound` was loaded.
  std::uint32_t w = bound.end;
  for (bool decided = false;; decided = true) {
    // Bound by this launch (launch 0, host code: by a decision after the load).
    if (w == bind_word(0u, launch, end) && (decided || launch != 0u)) return v;
    if (launch != 0u && w == refused) return v.follows = true, v;
    if (w == deciding) {
      (void)detail::spin_bounded(
          s, [&] { return (w = gpu::load_acquire_system(c + audit_end_word)) != deciding; },
          [&] { detail::record_timeout(s, slots.first, s.rank, barrier_kind::check, end, w); });
      if (w == deciding) return v.follows = true, v;  // expired (recorded) or this rank failed already
      continue;
    }
    const std::uint32_t got = gpu::compare_exchange_local(c + audit_end_word, w, deciding);
    if (got == w) break;
    w = got;
  }
  gpu::fence_system();
  v = detail::audit_bind_decide(s, slots, lo, hi);
  gpu::fence_system();
  gpu::store_relaxed_system(c + audit_end_word, v.what == misuse{} ? bind_word(0u, launch, end) : launch != 0u ? refused : 0u);
  return v;
}

// audit_bind with the range's words loaded now.
template <int MaxRanks>
RCCLX_HOST_DEVICE bind_verdict audit_bind(const signal_pads<MaxRanks>& s, tile_slots slots, std::uint64_t lo,
                                          std::uint64_t hi) {
  return audit_bind(s, slots, lo, hi, audit_bound_words(s, slots));
}

// Host: unbinds the slot range starting at `first` in a copy of a rank's pad (`pad_image`, the
// pad's words from its start, laid out as `l`), e.g. when the owner of the range's bytes frees them
// and writes the image back; the next call on the range binds it again.
template <int MaxRanks>
inline void audit_unbind(std::uint32_t* pad_image, const pad_layout<MaxRanks>& l, int first) {
  if (first < 0 || first >= audit_directory_slots) return;
  std::uint32_t* dir = pad_image + l.audit / sizeof(std::uint32_t);
  std::uint32_t* row = dir + audit_directory_bytes / sizeof(std::uint32_t) + static_cast<std::size_t>(first) * audit_row_words;
  row[audit_end_word] = 0u;
  dir[first / 32] &= ~(1u << (first % 32));
}


// Host: the last call of every bound slot range of a rank's pad of `slots` slots, as a checked
// build's rows recorded it: every tile published on this rank (tile_not_published) and, flat,
// reduced (tile_not_reduced), its input unchanged until the end of its reduce (input_changed).
// What block 0 of the range's next call checks on the device, for a call
// no next call follows (a program's last launch): the emulated harnesses look after every launch.
// Reads copies of two regions only: `control`, the tile control rows (audit_control_bytes from
// pad_layout::tile_control), and `audit`, the audit region (audit_region_bytes from
// pad_layout::audit). The first finding as this rank's error record (code 0: none).
inline constexpr int audit_calls_word = 0;  // tile_flags<>::calls_word: calls completed on the range
inline constexpr std::size_t audit_control_bytes(int slots) {
  return static_cast<std::size_t>(slots) * tile_control_words * sizeof(std::uint32_t);
}
inline constexpr std::size_t audit_region_bytes(int slots) {
  return audit_directory_bytes + static_cast<std::size_t>(slots) * audit_row_words * sizeof(std::uint32_t);
}
inline error_record audit_last_calls(const std::uint32_t* control, const std::uint32_t* audit, int slots, int rank) {
  const std::uint32_t* dir = audit;
  const std::uint32_t* rows = dir + audit_directory_bytes / sizeof(std::uint32_t);
  const int limit = slots < audit_directory_slots ? slots : audit_directory_slots;
  for (int first = 0; first + 1 < limit; ++first) {
    if (((dir[first / 32] >> (first % 32)) & 1u) == 0u) continue;
    const std::uint32_t end = bind_state_end(rows[static_cast<std::size_t>(first) * audit_row_words + audit_end_word]);
    if (end < static_cast<std::uint32_t>(first) + 2u || end > static_cast<std::uint32_t>(slots)) continue;  // (deciding, refused)
    const std::uint32_t calls = control[static_cast<std::size_t>(first) * tile_control_words + audit_calls_word];
    if (calls == 0u) continue;
    const std::uint32_t* row1 = rows + static_cast<std::size_t>(first + 1) * audit_row_words;
    if (row1[audit_call_word(calls)] != calls) continue;  // the call was refused, or not noted
    const std::uint32_t shape = row1[audit_call_word(calls) + 1];
    const bool flat = (shape >> 31) == 0u;
    const std::uint32_t max_tiles = end - static_cast<std::uint32_t>(first) - 1u;
    const std::uint32_t n = (shape & 0x7FFFFFFFu) < max_tiles ? (shape & 0x7FFFFFFFu) : max_tiles;
    for (std::uint32_t t = 0; t < n; ++t) {
      const std::uint32_t* row = row1 + static_cast<std::size_t>(t) * audit_row_words;
      const misuse m = audit_tile_verdict(row[audit_mark_word(calls)], row[audit_consumed_word(calls)],
                                          row[audit_hash_word(calls)], calls, flat);
      if (m == misuse{}) continue;
      error_record e{};
      e.code = static_cast<std::uint32_t>(errc::invalid_argument);
      e.waiting_rank = e.missing_rank = static_cast<std::uint32_t>(rank);
      e.kind = static_cast<std::uint32_t>(m);
      e.block = t;
      e.call = calls;
      e.observed = t;
      e.reserved = calls;
      return e;
    }
  }
  return error_record{};
}

}  // namespace core
RCCLX_NAMESPACE_END
