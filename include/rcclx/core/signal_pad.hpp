// rcclx/core/signal_pad.hpp: the flag memory of one rank, its one layout, and the device handle
// over all ranks' pads.
//
//   rcclx::core::signal_pads<8> s = ...;          // trivially copyable, passed to kernels by value
//   std::size_t bytes = rcclx::core::signal_pad_bytes<8>(slots, rcclx::core::ll_layout{64, 8192});
//   const auto L = rcclx::core::pad_layout<8>::of(slots, ll);   // where every region lies
//
// A rank's pad (gpu::signal_malloc: uncached on AMD) for S slots (max_blocks) and R = MaxRanks, in
// this order, every offset from pad_layout::of and nothing else (docs/design.md):
//
//   region        words              owner (core/)        written by              read by
//   tile_control  [S][4] u32         tile flags           this rank (its blocks)  this rank
//   flags         [S][R] u32         barrier, tile flags  sender s: [b][s], rel.  this rank (acquire)
//   counters      [S][R] u32         barrier              this rank: [b][p]       this rank
//   ll_epochs     [ll.blocks] u32    LL                   this rank (block b)     this rank
//   error         error_record       record_error         this rank (first fail)  this rank's host
//   check_epochs  [S] u32            call check           this rank (block b)     this rank
//   check         [2][S] x 32 B      call check           this rank (packet)      every peer
//   ll            [2][ll.blocks][2 x ll.block_bytes]  LL  this rank, block b      block b of every peer
//   audit         1 KiB + [S][8] u32 tile audit        this rank (checked)     this rank, its host
//
// Slots. A slot is a block's place in the flag, counter and check regions: block b of a
// barrier-based grid uses slot b (core/barrier.hpp); a tile-flag call uses a range
// tile_slots{first, max_tiles}: its control words at tile_control[first], its flags at slots
// first + 1 .. first + max_tiles (core/tile_flags.hpp), its fingerprints at check[.][first] and
// check[.][first + 1]. Whoever owns the pads hands ranges out (core/slot_ranges.hpp), so two users
// of one pad never share a slot. tile_control[s]: {calls completed, blocks arrived (ever), blocks
// arrived when the current call began, the missing-finish detector's launch word}; the region is
// rounded up to 256 bytes and everything after it is placed from the flags' start, so the offsets
// the hot paths add to a peer's flags (signal_pads::inbox) do not depend on it.
// check: 32-aligned, one LL packet each (a call's fingerprint, core/call_check.hpp) by call parity.
// ll: 256-aligned, two halves by call parity, 2 bytes of packet per byte of data (core/ll.hpp).
// audit: 256-aligned, after everything else (no other offset depends on it): the checked mode's
// directory of the byte and slot ranges of tile calls in flight and a row of words per slot
// (core/tile_audit.hpp); written only by checked builds, present in every build.
// The layout is a function of (S, ll) alone: the same on every rank and in every build
// (RCCLX_CHECKS included). An LL layout with either field 0 has no LL region and no LL epochs.
//
// One aligned 32-bit word per (slot, sender): no byte writes into a shared word (vLLM PR 2760),
// and no read-modify-write on a peer's memory (not supported across PCIe).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "../config.hpp"
#include "../gpu/atomic.hpp"
#include "error.hpp"

RCCLX_NAMESPACE_BEGIN
namespace core {

// Default bound on every device wait: long enough for a slow peer launch, short enough that a
// dead peer becomes an error instead of a hang. Overridable per handle.
inline constexpr std::uint64_t default_timeout_ns = 10ull * 1000 * 1000 * 1000;

// The one-shot LL region: `blocks` block regions (a call may use that many blocks) of
// `block_bytes` of payload each (what one block of a call may publish; a multiple of 256).
// {0, 0} (or either 0) means no LL region: flat algorithms then use barriers.
struct ll_layout {
  int blocks;
  std::size_t block_bytes;
};

// Default: on GPUs 64 regions of 8 KiB (a 512-thread x 16-byte tile each; dda's flat uses up to 32
// blocks: 256 KiB per call, the small-message range where the LL one-shot wins); on the host
// backend 8 regions. The pad grows by 4 x blocks x block_bytes (2 MiB on GPUs).
RCCLX_HOST_DEVICE constexpr ll_layout default_ll_layout() {
#if RCCLX_BACKEND_GPU
  return {64, 8192};
#else
  return {8, 8192};
#endif
}

// Throws invalid_argument for a layout the pads cannot hold.
inline void check_ll_layout(ll_layout ll) {
  if (ll.blocks < 0 || ll.blocks > 65536 || ll.block_bytes % 256 != 0 || ll.block_bytes > (std::size_t(1) << 24))
    throw error(errc::invalid_argument, "ll_layout{blocks = " + std::to_string(ll.blocks) + ", block_bytes = " +
                                            std::to_string(ll.block_bytes) +
                                            "}: blocks must be in [0, 65536] and block_bytes a multiple of 256 "
                                            "up to 16 MiB");
}

// Words of a slot's tile control row (core/tile_flags.hpp) and bytes of a check packet.
inline constexpr int tile_control_words = 4;
inline constexpr std::size_t check_packet_bytes = 32;
// The audit region (core/tile_audit.hpp): a directory, then a row of audit_row_words per slot.
inline constexpr std::size_t audit_directory_bytes = 1024;
inline constexpr int audit_row_words = 10;

namespace detail {
// The regions before the audit region, as the hot paths' accessors (signal_pads) compute them:
// the same arithmetic whether or not the audit region follows, so the code generated for them
// does not change with it. end: where the LL region ends (where the audit region starts).
template <int MaxRanks>
struct pad_regions {
  std::size_t tile_control, flags, counters, ll_epochs, error, check_epochs, check, ll, end;

  RCCLX_HOST_DEVICE static constexpr pad_regions of(int slots, int ll_blocks, std::size_t ll_block_bytes) {
    const std::size_t s = static_cast<std::size_t>(slots), w = sizeof(std::uint32_t);
    // From the flags on, every region is placed from the flags' start (a multiple of 256): an
    // accessor that reaches it from a rank's flags (signal_pads::inbox) adds an offset that does
    // not depend on the tile control region before them.
    const std::size_t counters = s * MaxRanks * w, ll_epochs = 2 * counters;
    const std::size_t error = ll_epochs + static_cast<std::size_t>(ll_blocks) * w;
    const std::size_t check_epochs = error + sizeof(error_record);
    const std::size_t check = (check_epochs + s * w + 31) / 32 * 32;
    const std::size_t ll = (check + 2 * s * check_packet_bytes + 255) / 256 * 256;
    const std::size_t end = ll + 4 * static_cast<std::size_t>(ll_blocks) * ll_block_bytes;
    pad_regions l{};
    l.tile_control = 0;
    l.flags = (s * tile_control_words * w + 255) / 256 * 256;
    l.counters = l.flags + counters;
    l.ll_epochs = l.flags + ll_epochs;
    l.error = l.flags + error;
    l.check_epochs = l.flags + check_epochs;
    l.check = l.flags + check;
    l.ll = l.flags + ll;
    l.end = l.flags + end;
    return l;
  }
};
}  // namespace detail

// Byte offsets of one rank's pad regions (the table above), from the slot count and the LL layout:
// the one formula every accessor, allocator and reset reads.
template <int MaxRanks>
struct pad_layout {
  std::size_t tile_control;  // [slots][tile_control_words] u32, the region rounded up to 256 bytes
  std::size_t flags;         // [slots][MaxRanks] u32: barrier and tile flags, by sender
  std::size_t counters;      // [slots][MaxRanks] u32: barriers completed with each peer
  std::size_t ll_epochs;     // [ll_blocks] u32: LL calls of each block
  std::size_t error;         // error_record
  std::size_t check_epochs;  // [slots] u32: checked calls of each slot
  std::size_t check;         // [2][slots] check packets (32-aligned)
  std::size_t ll;            // [2][ll_blocks] regions of 2 x ll_block_bytes (256-aligned)
  std::size_t audit;         // the tile audit: directory, then [slots][audit_row_words] u32 (256-aligned)
  std::size_t bytes;         // the whole pad: a multiple of 256, so pads pack in one allocation

  // ll_blocks and ll_block_bytes both 0 (no LL region) or both positive (as a handle holds them).
  RCCLX_HOST_DEVICE static constexpr pad_layout of(int slots, int ll_blocks, std::size_t ll_block_bytes) {
    const auto r = detail::pad_regions<MaxRanks>::of(slots, ll_blocks, ll_block_bytes);
    const std::size_t rows = static_cast<std::size_t>(slots) * audit_row_words * sizeof(std::uint32_t);
    pad_layout l{};
    l.tile_control = r.tile_control;
    l.flags = r.flags;
    l.counters = r.counters;
    l.ll_epochs = r.ll_epochs;
    l.error = r.error;
    l.check_epochs = r.check_epochs;
    l.check = r.check;
    l.ll = r.ll;
    l.audit = r.end;  // a multiple of 256
    l.bytes = r.end + (audit_directory_bytes + rows + 255) / 256 * 256;
    return l;
  }
  RCCLX_HOST_DEVICE static constexpr pad_layout of(int slots, ll_layout ll) {
    const bool on = ll.blocks > 0 && ll.block_bytes > 0;
    return of(slots, on ? ll.blocks : 0, on ? ll.block_bytes : 0);
  }
};

// Bytes of one rank's pad.
template <int MaxRanks>
RCCLX_HOST_DEVICE constexpr std::size_t signal_pad_bytes(int max_blocks, ll_layout ll = default_ll_layout()) {
  return pad_layout<MaxRanks>::of(max_blocks, ll).bytes;
}


// Device handle over the pads of all ranks, as seen from `rank`. The accessors hand each protocol
// its words (core/barrier.hpp, ll.hpp, call_check.hpp, tile_flags.hpp); the pointers kept here are
// the regions a hot path reaches without arithmetic.
template <int MaxRanks = max_ranks>
struct signal_pads {
  static_assert(MaxRanks >= 2 && MaxRanks <= max_ranks, "MaxRanks must be in [2, rcclx::max_ranks]");
  static constexpr int max_ranks_v = MaxRanks;

  std::uint32_t* inbox[MaxRanks];  // each rank's flag words, mapped in this address space
  std::uint32_t* counters;         // this rank's counters
  error_record* err;               // this rank's error record
  int rank;
  int num_ranks;
  int max_blocks;                  // slots the pads have (blocks per barrier-based kernel, at most)
  std::uint32_t ll_blocks;         // LL block regions (0: no LL region)
  std::uint32_t ll_block_bytes;    // payload capacity of one LL block region
  // Where the regions the accessors below reach lie, in 32-bit words (pad_layout, set by
  // from_bases): one add per access instead of the layout's arithmetic, which the compiler redoes
  // after every atomic (their memory clobber reloads the fields).
  std::uint32_t control_words;      // tile_control, back from counters
  std::uint32_t ll_epoch_words;     // ll_epochs, from counters
  std::uint32_t check_epoch_words;  // check_epochs, from err
  std::uint32_t audit_words;        // audit, from err
  std::uint32_t check_words;        // check, from the flags (inbox[owner])
  std::uint64_t timeout_ns;        // bound of every wait; 0 means default_timeout_ns

  // The layout the pads were sized with (the same on every rank).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE pad_layout<MaxRanks> layout() const {
    return pad_layout<MaxRanks>::of(max_blocks, static_cast<int>(ll_blocks), ll_block_bytes);
  }
  // Its regions before the audit region (the hot paths' accessors).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE detail::pad_regions<MaxRanks> regions() const {
    return detail::pad_regions<MaxRanks>::of(max_blocks, static_cast<int>(ll_blocks), ll_block_bytes);
  }

  // Flag word of `owner`'s slot `block` written by `sender` (barrier, tile flags).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t* inbox_slot(int owner, int block, int sender) const {
    return inbox[owner] + static_cast<std::size_t>(block) * MaxRanks + sender;
  }
  // Barriers slot `block` of this rank has completed with `peer`.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t* counter_slot(int block, int peer) const {
    return counters + static_cast<std::size_t>(block) * MaxRanks + peer;
  }
  // LL calls block `block` of this rank has made (its flag of the next call is this + 1).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t* ll_epoch_slot(int block) const {
    return counters + ll_epoch_words + block;
  }
  // Checked calls block `block` (or tile slot) of this rank has made.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t* check_epoch_slot(int block) const {
    return reinterpret_cast<std::uint32_t*>(err) + check_epoch_words + block;
  }
  // The tile control row of slot `slot` of this rank (tile_control_words words, core/tile_flags.hpp).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t* tile_control_slot(int slot) const {
    return counters - control_words + static_cast<std::size_t>(slot) * tile_control_words;
  }
  // This rank's audit region (core/tile_audit.hpp): the directory, then a row per slot.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t* audit_base() const {
    return reinterpret_cast<std::uint32_t*>(err) + audit_words;
  }
  // The fingerprint packet (32 bytes) of `owner` for `slot` (a block, or a tile call's slot) and
  // calls of this parity.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE unsigned char* check_packet(int owner, std::uint32_t parity, int slot) const {
    return reinterpret_cast<unsigned char*>(inbox[owner] + check_words) +
           ((parity & 1u) * static_cast<std::size_t>(max_blocks) + static_cast<std::size_t>(slot)) * check_packet_bytes;
  }
  // The LL region of block `block` of `owner` for calls of this parity (2 * ll_block_bytes bytes).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE unsigned char* ll_region(int owner, std::uint32_t parity, int block) const {
    return reinterpret_cast<unsigned char*>(inbox[owner]) + ll_region_offset(parity, block);
  }
  // Where that region lies from inbox[owner] (the owner's flags), the same for every owner.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::ptrdiff_t ll_region_offset(std::uint32_t parity, int block) const {
    const detail::pad_regions<MaxRanks> l = regions();
    const std::size_t region = 2 * static_cast<std::size_t>(ll_block_bytes);
    return static_cast<std::ptrdiff_t>(l.ll + ((parity & 1u) * ll_blocks + static_cast<std::size_t>(block)) * region) -
           static_cast<std::ptrdiff_t>(l.flags);
  }

  // Builds the view of `rank` from the pad base of every rank (as mapped in this address space).
  // ll must be the layout the pads were sized with (signal_pad_bytes), the same on every rank.
  static signal_pads from_bases(void* const* pad_bases, int rank, int num_ranks, int max_blocks,
                                std::uint64_t timeout_ns = default_timeout_ns, ll_layout ll = default_ll_layout()) {
    if (num_ranks < 2 || num_ranks > MaxRanks)
      throw error(errc::invalid_argument, "num_ranks = " + std::to_string(num_ranks) +
                                              " is outside [2, " + std::to_string(MaxRanks) + "]");
    if (rank < 0 || rank >= num_ranks)
      throw error(errc::invalid_argument, "rank = " + std::to_string(rank) + " is outside [0, " +
                                              std::to_string(num_ranks) + ")");
    if (max_blocks < 1) throw error(errc::invalid_argument, "max_blocks must be >= 1");
    check_ll_layout(ll);
    const pad_layout<MaxRanks> l = pad_layout<MaxRanks>::of(max_blocks, ll);
    signal_pads s{};
    for (int p = 0; p < num_ranks; ++p)
      s.inbox[p] = reinterpret_cast<std::uint32_t*>(static_cast<char*>(pad_bases[p]) + l.flags);
    char* own = static_cast<char*>(pad_bases[rank]);
    s.counters = reinterpret_cast<std::uint32_t*>(own + l.counters);
    s.err = reinterpret_cast<error_record*>(own + l.error);
    s.rank = rank;
    s.num_ranks = num_ranks;
    s.max_blocks = max_blocks;
    const bool ll_on = ll.blocks > 0 && ll.block_bytes > 0;
    s.ll_blocks = ll_on ? static_cast<std::uint32_t>(ll.blocks) : 0u;
    s.ll_block_bytes = ll_on ? static_cast<std::uint32_t>(ll.block_bytes) : 0u;
    const detail::pad_regions<MaxRanks> g = s.regions();
    const auto words = [](std::size_t bytes) {
      if (bytes / sizeof(std::uint32_t) > 0xFFFFFFFFu)
        throw error(errc::invalid_argument, "signal pads of " + std::to_string(bytes) + " bytes: too large");
      return static_cast<std::uint32_t>(bytes / sizeof(std::uint32_t));
    };
    s.control_words = words(g.counters - g.tile_control);
    s.ll_epoch_words = words(g.ll_epochs - g.counters);
    s.check_epoch_words = words(g.check_epochs - g.error);
    s.audit_words = words(g.end - g.error);
    s.check_words = words(g.check - g.flags);
    s.timeout_ns = timeout_ns;
    return s;
  }
};

static_assert(std::is_trivially_copyable<signal_pads<8>>::value, "device handles are passed by value");
static_assert(sizeof(signal_pads<8>) <= 8 * 8 + 64, "signal_pads<8> must stay small (kernel argument)");

namespace detail {
// Records a failure of this rank in its error record, if it is the first: the one claim sequence
// every recorder uses. The record is claimed (code 0 -> busy, compare-and-swap: the first failure
// wins, later ones leave), waiting_rank set to `rank`, the other fields written (`reserved` only
// when with_reserved), and the code published with a release store, so whoever sees the code
// (another block's spin, the host) sees the fields. Inline, like every device helper: a real
// call, even one never taken, costs the checked kernels local-memory traffic (the call's ABI);
// the failing branches that reach it are marked unlikely so that their code leaves the path a
// correct call runs.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void record_error_words(error_record* err, std::uint32_t code, std::uint32_t rank,
                                                                std::uint32_t missing_rank, std::uint32_t kind,
                                                                std::uint32_t block, std::uint32_t call,
                                                                std::uint32_t observed, std::uint32_t reserved,
                                                                bool with_reserved) {
  constexpr std::uint32_t busy = 0xFFFFFFFFu;
  if (gpu::compare_exchange_local(&err->code, 0u, busy) != 0u) return;
  err->waiting_rank = rank;
  err->missing_rank = missing_rank;
  err->kind = kind;
  err->block = block;
  err->call = call;
  err->observed = observed;
  if (with_reserved) err->reserved = reserved;
  gpu::store_release_system(&err->code, code);
}
}  // namespace detail

// Records a failure of this rank with every field as error_record documents them (the first
// failure wins: detail::record_error_words).
template <int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void record_error(const signal_pads<MaxRanks>& s, errc code, int missing_rank,
                                                      std::uint32_t kind, int block, std::uint32_t call,
                                                      std::uint32_t observed, std::uint32_t reserved) {
  detail::record_error_words(s.err, static_cast<std::uint32_t>(code), static_cast<std::uint32_t>(s.rank),
                             static_cast<std::uint32_t>(missing_rank), kind, static_cast<std::uint32_t>(block), call,
                             observed, reserved, true);
}

}  // namespace core
RCCLX_NAMESPACE_END
