// rcclx/core/tile_audit.hpp: the checked mode's (RCCLX_CHECKS) audit words of tile-flag calls
// (fused::tile_allreduce, fused::combine), in the pads' audit region (core/signal_pad.hpp), so that
// a call's misuse of its tiles is named on the device instead of passing silently.
//
// Region: a directory (audit_directory_bytes; reserved for the ranges of calls in flight), then a
// row of audit_row_words u32 per slot. A call on tile_slots{first, max_tiles} uses
//   row first (control): [magic | resolved algorithm, epoch, num_tiles, region id, ...]
//   row first + 1 + t (tile t): [publish mark, consumed epoch, reserved, publishing block, ...]
// publish mark = audit_mark(epoch, block), exchanged by the publishing block: the old value
// names a second publisher of the same call (published_twice), the reducer compares it with
// itself under tile_reducer::same_block (reduced_before_publish, reducer_not_publisher); consumed
// = the epoch of the last call that reduced the tile. The first thread of the next launch on the
// slot range looks at every tile row of the call before (tile_not_published; flat:
// tile_not_reduced) and writes the control row of its own call. Epochs carry
// the call, so nothing needs clearing between calls; emulated_world::reset zeroes the region.
// Written only by checked builds; present in every build (one pad layout).
#pragma once

#include <cstdint>

#include "signal_pad.hpp"

RCCLX_NAMESPACE_BEGIN
namespace core {

// Words of a tile row and of the control row.
inline constexpr int audit_mark_word = 0, audit_consumed_word = 1, audit_publisher_word = 3;
inline constexpr int audit_magic_word = 0, audit_epoch_word = 1, audit_tiles_word = 2, audit_region_word = 3,
                     audit_per_owner_word = 4;
inline constexpr std::uint32_t audit_magic = 0xA0D1u << 16;  // | resolved algorithm (0 flat, 1 tree)

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

}  // namespace core
RCCLX_NAMESPACE_END
