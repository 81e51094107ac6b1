// rcclx/core/signal_pad.hpp: the flag memory of one rank and the device handle over all ranks'.
//
//   rank r's pad (allocated with gpu::signal_malloc: uncached on AMD):
//     inbox   [max_blocks][MaxRanks] u32   slot [b][s] written only by rank s (block b), release
//     counters[max_blocks][MaxRanks] u32   slot [b][p] touched only by rank r (block b): barriers
//                                          completed with peer p, the value it sends next time + 1
//     ll_epoch[ll.blocks] u32              slot [b] touched only by rank r (block b): LL calls made
//     error    error_record                first bounded-wait expiry on this rank
//     check_epoch[max_blocks] u32          slot [b] touched only by rank r: checked calls of block b
//     check[2][max_blocks] 32 B            (32-aligned) one LL packet each: a call's fingerprint
//                                          (core/call_check.hpp), by call parity; written only by r
//     ll  [2][ll.blocks][2 * ll.block_bytes]  (256-aligned) one-shot LL packets (core/ll.hpp): two
//                                          halves alternating by call parity; region [h][b] written
//                                          only by block b of rank r, read by block b of every peer;
//                                          2 bytes of packet per byte of data
//
//   rcclx::core::signal_pads<8> s = ...;          // trivially copyable, passed to kernels by value
//   std::size_t bytes = rcclx::core::signal_pad_bytes<8>(max_blocks, rcclx::core::ll_layout{64, 8192});
//
// One aligned 32-bit word per (block, sender): no byte writes into a shared word (vLLM PR 2760),
// and no read-modify-write on a peer's memory (not supported across PCIe).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../config.hpp"
#include "error.hpp"

RCCLX_NAMESPACE_BEGIN
namespace core {

// Default bound on every device wait: long enough for a slow peer launch, short enough that a
// dead peer becomes an error instead of a hang. Overridable per handle.
inline constexpr std::uint64_t default_timeout_ns = 10ull * 1000 * 1000 * 1000;

template <int MaxRanks>
RCCLX_HOST_DEVICE constexpr std::size_t signal_pad_inbox_offset() { return 0; }

template <int MaxRanks>
RCCLX_HOST_DEVICE constexpr std::size_t signal_pad_counters_offset(int max_blocks) {
  return static_cast<std::size_t>(max_blocks) * MaxRanks * sizeof(std::uint32_t);
}

template <int MaxRanks>
RCCLX_HOST_DEVICE constexpr std::size_t signal_pad_ll_epoch_offset(int max_blocks) {
  return 2 * signal_pad_counters_offset<MaxRanks>(max_blocks);
}

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

template <int MaxRanks>
RCCLX_HOST_DEVICE constexpr std::size_t signal_pad_error_offset(int max_blocks, int ll_blocks) {
  return signal_pad_ll_epoch_offset<MaxRanks>(max_blocks) + static_cast<std::size_t>(ll_blocks) * sizeof(std::uint32_t);
}

template <int MaxRanks>
RCCLX_HOST_DEVICE constexpr std::size_t signal_pad_check_epoch_offset(int max_blocks, int ll_blocks) {
  return signal_pad_error_offset<MaxRanks>(max_blocks, ll_blocks) + sizeof(error_record);
}

// The checked mode's fingerprint packets: [2][max_blocks] x 32 bytes (present in every build, so
// the layout does not depend on RCCLX_CHECKS).
template <int MaxRanks>
RCCLX_HOST_DEVICE constexpr std::size_t signal_pad_check_offset(int max_blocks, int ll_blocks) {
  return (signal_pad_check_epoch_offset<MaxRanks>(max_blocks, ll_blocks) +
          static_cast<std::size_t>(max_blocks) * sizeof(std::uint32_t) + 31) / 32 * 32;
}

template <int MaxRanks>
RCCLX_HOST_DEVICE constexpr std::size_t signal_pad_ll_offset(int max_blocks, int ll_blocks) {
  return (signal_pad_check_offset<MaxRanks>(max_blocks, ll_blocks) + 2 * 32 * static_cast<std::size_t>(max_blocks) +
          255) / 256 * 256;
}

// Bytes of one rank's pad (a multiple of 256 so pads can be packed in one allocation).
template <int MaxRanks>
RCCLX_HOST_DEVICE constexpr std::size_t signal_pad_bytes(int max_blocks, ll_layout ll = default_ll_layout()) {
  return signal_pad_ll_offset<MaxRanks>(max_blocks, ll.blocks) +
         4 * static_cast<std::size_t>(ll.blocks) * ll.block_bytes;
}

// Throws invalid_argument for a layout the pads cannot hold.
inline void check_ll_layout(ll_layout ll) {
  if (ll.blocks < 0 || ll.blocks > 65536 || ll.block_bytes % 256 != 0 || ll.block_bytes > (std::size_t(1) << 24))
    throw error(errc::invalid_argument, "ll_layout{blocks = " + std::to_string(ll.blocks) + ", block_bytes = " +
                                            std::to_string(ll.block_bytes) +
                                            "}: blocks must be in [0, 65536] and block_bytes a multiple of 256 "
                                            "up to 16 MiB");
}

// Device handle over the pads of all ranks, as seen from `rank`.
template <int MaxRanks = max_ranks>
struct signal_pads {
  static_assert(MaxRanks >= 2 && MaxRanks <= max_ranks, "MaxRanks must be in [2, rcclx::max_ranks]");
  static constexpr int max_ranks_v = MaxRanks;

  std::uint32_t* inbox[MaxRanks];  // inbox of each rank, mapped in this rank's address space
  std::uint32_t* counters;         // this rank's counters
  error_record* err;               // this rank's error record
  int rank;
  int num_ranks;
  int max_blocks;                  // blocks per kernel the pads have room for
  std::uint32_t ll_blocks;         // LL block regions (0: no LL region)
  std::uint32_t ll_block_bytes;    // payload capacity of one LL block region
  std::uint64_t timeout_ns;        // bound of every wait; 0 means default_timeout_ns

  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t* inbox_slot(int owner, int block, int sender) const {
    return inbox[owner] + static_cast<std::size_t>(block) * MaxRanks + sender;
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t* counter_slot(int block, int peer) const {
    return counters + static_cast<std::size_t>(block) * MaxRanks + peer;
  }
  // LL calls block `block` of this rank has made (its flag of the next call is this + 1).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t* ll_epoch_slot(int block) const {
    return counters + static_cast<std::size_t>(max_blocks) * MaxRanks + block;
  }
  // Checked calls block `block` (or tile slot) of this rank has made.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t* check_epoch_slot(int block) const {
    return reinterpret_cast<std::uint32_t*>(err + 1) + block;
  }
  // The fingerprint packet (32 bytes) of `owner` for `slot` (a block, or a tile AllReduce's slot)
  // and calls of this parity.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE unsigned char* check_packet(int owner, std::uint32_t parity, int slot) const {
    // From the error record's place in this rank's pad (the same in every pad: one layout).
    const std::size_t err_off = static_cast<std::size_t>(reinterpret_cast<const unsigned char*>(err) -
                                                         reinterpret_cast<const unsigned char*>(inbox[rank]));
    const std::size_t off =
        (err_off + sizeof(error_record) + static_cast<std::size_t>(max_blocks) * sizeof(std::uint32_t) + 31) / 32 * 32;
    return reinterpret_cast<unsigned char*>(inbox[owner]) + off +
           ((parity & 1u) * static_cast<std::size_t>(max_blocks) + static_cast<std::size_t>(slot)) * 32;
  }
  // The LL region of block `block` of `owner` for calls of this parity (2 * ll_block_bytes bytes).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE unsigned char* ll_region(int owner, std::uint32_t parity, int block) const {
    return reinterpret_cast<unsigned char*>(inbox[owner]) + ll_region_offset(parity, block);
  }
  // Where that region lies from inbox[owner], the same for every owner (one pads layout).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::ptrdiff_t ll_region_offset(std::uint32_t parity, int block) const {
    const std::size_t region = 2 * static_cast<std::size_t>(ll_block_bytes);
    return static_cast<std::ptrdiff_t>(signal_pad_ll_offset<MaxRanks>(max_blocks, static_cast<int>(ll_blocks)) +
                                       ((parity & 1u) * ll_blocks + static_cast<std::size_t>(block)) * region) -
           static_cast<std::ptrdiff_t>(signal_pad_inbox_offset<MaxRanks>());
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
    signal_pads s{};
    for (int p = 0; p < num_ranks; ++p) {
      s.inbox[p] = reinterpret_cast<std::uint32_t*>(static_cast<char*>(pad_bases[p]) +
                                                    signal_pad_inbox_offset<MaxRanks>());
    }
    char* own = static_cast<char*>(pad_bases[rank]);
    s.counters = reinterpret_cast<std::uint32_t*>(own + signal_pad_counters_offset<MaxRanks>(max_blocks));
    s.err = reinterpret_cast<error_record*>(own + signal_pad_error_offset<MaxRanks>(max_blocks, ll.blocks));
    s.rank = rank;
    s.num_ranks = num_ranks;
    s.max_blocks = max_blocks;
    const bool ll_on = ll.blocks > 0 && ll.block_bytes > 0;
    s.ll_blocks = ll_on ? static_cast<std::uint32_t>(ll.blocks) : 0u;
    s.ll_block_bytes = ll_on ? static_cast<std::uint32_t>(ll.block_bytes) : 0u;
    s.timeout_ns = timeout_ns;
    return s;
  }
};

static_assert(std::is_trivially_copyable<signal_pads<8>>::value, "device handles are passed by value");
static_assert(sizeof(signal_pads<8>) <= 8 * 8 + 64, "signal_pads<8> must stay small (kernel argument)");

}  // namespace core
RCCLX_NAMESPACE_END
