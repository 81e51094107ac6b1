// rcclx/core/ll.hpp: the LL ("low latency") packet protocol: data and its flag travel in one 64-bit
// word, so a reader that sees the flag has the data: no barrier, no fence, no acquire.
//
//   const std::uint32_t flag = rcclx::core::ll_begin(g, pads, block);   // once per call and block
//   unsigned char* mine = pads.ll_region(pads.rank, flag);
//   rcclx::core::ll_write(mine, i, v, flag);                              // publish 16 bytes
//   if (!rcclx::core::ll_read(pads, pads.ll_region(p, flag), i, flag, block, p, v)) return false;
//
// Packet: 16 bytes of data become two 16-byte lines of two 64-bit words {data32 | flag32 << 32};
// each word is stored and loaded single-copy atomic (gpu::store_packet_system), so the flag proves
// the 32 data bits next to it. Half of every line is flag: 2 bytes move per byte of data, which is
// why LL serves small messages (latency-bound) and two-phase algorithms serve large ones.
//
// Flags and buffer reuse. Block b of every rank keeps a call counter (signal pad ll_epoch[b]);
// call k of block b writes flag k (never 0: zeroed memory is "nothing yet") into the half k % 2 of
// its own LL region. Readers compare for equality, so packets of older calls are never mistaken for
// new ones and nothing is ever cleared. Two halves suffice: a rank writes half k % 2 again in call
// k + 2 only after finishing call k + 1, which needed every peer's call k + 1 packets, which each
// peer wrote after it finished reading call k. The counter lives in device memory and is advanced
// by the device: graph replays continue the sequence.
//
// Rules: every rank makes the same sequence of LL calls per block index (same grid); within one
// kernel, positions are owned by the same block index in every call (separate launches may change
// the grid freely: stream order gives the argument above); every wait is bounded by the pads'
// timeout and records barrier_kind::ll naming the missing rank. An error leaves the pads to reset.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../gpu/atomic.hpp"
#include "../gpu/clock.hpp"
#include "../gpu/memory.hpp"
#include "barrier.hpp"
#include "signal_pad.hpp"

RCCLX_NAMESPACE_BEGIN
namespace core {

// Bytes of LL region one call with `bytes` of payload uses per rank and half (16-byte vectors,
// the last one padded).
RCCLX_HOST_DEVICE constexpr std::size_t ll_payload_bytes(std::size_t bytes) { return (bytes + 15) / 16 * 16; }

// Does a call with `bytes` of payload per rank fit the pads' LL region?
template <int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool ll_fits(const signal_pads<MaxRanks>& s, std::size_t bytes) {
  return ll_payload_bytes(bytes) <= static_cast<std::size_t>(s.ll_bytes);
}

// Group-collective, once per call by every block that takes part: this call's flag for `block`.
// Includes a group sync (every thread has read the counter before thread 0 advances it); the
// caller's final g.sync_or (or any later sync) orders the advance before the next call's read.
template <class Group, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t ll_begin(const Group& g, const signal_pads<MaxRanks>& s, int block) {
  std::uint32_t* c = s.ll_epoch_slot(block);
  std::uint32_t flag = *c + 1u;
  if (flag == 0u) flag = 2u;  // 0 means "never written"; 2 keeps the parity alternating after wrap
  g.sync();
  if (g.thread_rank() == 0) *c = flag;
  return flag;
}

namespace detail {
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint64_t ll_word(std::uint32_t data, std::uint32_t flag) {
  return static_cast<std::uint64_t>(data) | (static_cast<std::uint64_t>(flag) << 32);
}
}  // namespace detail

// Publishes the 16-byte vector `v` as packet `index` of an LL half (32 bytes at 32 * index).
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void ll_write(unsigned char* half, std::size_t index, const gpu::vec16& v,
                                                  std::uint32_t flag) {
  unsigned char* p = half + 32 * index;
  gpu::store_packet_system(p, detail::ll_word(v.w[0], flag), detail::ll_word(v.w[1], flag));
  gpu::store_packet_system(p + 16, detail::ll_word(v.w[2], flag), detail::ll_word(v.w[3], flag));
}

// One attempt: true (and v filled) when all four words of packet `index` carry `flag`.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool ll_try_read(const unsigned char* half, std::size_t index, std::uint32_t flag,
                                                     gpu::vec16& v) {
  const unsigned char* p = half + 32 * index;
  std::uint64_t a, b, c, d;
  gpu::load_packet_system(p, a, b);
  gpu::load_packet_system(p + 16, c, d);
  v.w[0] = static_cast<std::uint32_t>(a);
  v.w[1] = static_cast<std::uint32_t>(b);
  v.w[2] = static_cast<std::uint32_t>(c);
  v.w[3] = static_cast<std::uint32_t>(d);
  return static_cast<std::uint32_t>(a >> 32) == flag && static_cast<std::uint32_t>(b >> 32) == flag &&
         static_cast<std::uint32_t>(c >> 32) == flag && static_cast<std::uint32_t>(d >> 32) == flag;
}

// Polls packet `index` of peer `peer`'s half until it carries `flag`. False if the pads' bound
// expired (the record names this rank, `peer`, barrier_kind::ll, `block` and the flag) or another
// thread of this rank already failed.
template <int MaxRanks>
RCCLX_HOST_DEVICE inline bool ll_wait(const signal_pads<MaxRanks>& s, const unsigned char* half, std::size_t index,
                                      std::uint32_t flag, int block, int peer, gpu::vec16& v) {
  if (RCCLX_LIKELY(ll_try_read(half, index, flag, v))) return true;
  const std::uint64_t limit = s.timeout_ns ? s.timeout_ns : default_timeout_ns;
  const std::uint64_t t0 = gpu::clock_ns();
  for (std::uint32_t spins = 1;; ++spins) {
    if (ll_try_read(half, index, flag, v)) return true;
    if ((spins & 63u) == 0u) {
      if (gpu::load_relaxed_system(&s.err->code) != 0u) return false;
      if (gpu::clock_ns() - t0 > limit) {
        std::uint64_t a, b;
        gpu::load_packet_system(half + 32 * index, a, b);
        detail::record_timeout(s, block, peer, barrier_kind::ll, flag, static_cast<std::uint32_t>(a >> 32));
        return false;
      }
      gpu::spin_pause();
    }
  }
}

// The LL halves of every rank for one call, copied out of the pads once (the pads may live in
// global memory: emulated tables, graphs).
template <int MaxRanks>
struct ll_halves {
  const unsigned char* p[MaxRanks];
  int n;
  int rank;
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE ll_halves(const signal_pads<MaxRanks>& s, std::uint32_t flag)
      : n(s.num_ranks), rank(s.rank) {
    for (int j = 0; j < MaxRanks; ++j) p[j] = j < n ? s.ll_region(j, flag) : nullptr;
  }
};

}  // namespace core
RCCLX_NAMESPACE_END
