// rcclx/core/ll.hpp: the LL ("low latency") packet protocol: data and its flag travel in one 64-bit
// word, so a reader that sees the flag has the data: no barrier, no fence, no acquire.
//
//   if (!rcclx::core::ll_fits(pads, num_blocks, bytes_of_this_block)) ...  // barrier-based fallback
//   const std::uint32_t flag = rcclx::core::ll_begin(g, pads, block);   // once per call and block
//   unsigned char* mine = pads.ll_region(pads.rank, flag, block);
//   rcclx::core::ll_write(mine, i, v, flag, pads.ll_block_bytes);         // publish 16 bytes
//   const rcclx::core::ll_halves<8> h(pads, flag, block);               // every rank's region `block`
//   rcclx::gpu::vec16 v;                                                 // packet i of peer p:
//   if (!rcclx::core::ll_try_read(h.pick(p), i, flag, v, h.split) &&
//       !rcclx::core::ll_wait_from(pads, h.pick(p), p, i, flag, block, v)) return false;
//
// ll_session is one call of one block (its flag and region); the free functions below are its
// parts, for readers that hold the flag themselves.
// Packet: 16 bytes of data become two 16-byte lines of two 64-bit words {data32 | flag32 << 32};
// each word is stored and loaded single-copy atomic (gpu::store_packet_system), so the flag proves
// the 32 data bits next to it. Half of every line is flag: 2 bytes move per byte of data, which is
// why LL serves small messages (latency-bound) and two-phase algorithms serve large ones. Packet i's
// two lines lie at 16 i and split + 16 i of its region half (split = the pads' ll_block_bytes, the
// payload capacity), not side by side: a warp's load of its lanes' first (or second) lines then
// covers whole contiguous sectors instead of every other 16 bytes, half the L2 sector traffic (side by
// side, 8 peers' packets took ~2600 cycles per vector on an H200 even when all had landed).
//
// Regions, flags and reuse. Block b of a rank publishes only into its own block region b (two
// halves), and block b of every peer reads only that region: every packet in region b was written
// by block b, whatever the sizes and grids of earlier calls. Block b keeps a call counter (signal
// pad ll_epochs[b]); its call k writes flag k (never 0: zeroed memory is "nothing yet") into half
// k % 2. Readers compare for equality; block b's flags only grow, so a packet of an older call is
// never taken for a new one (until the 32-bit counter comes round again, 2^32 calls of block b later,
// to a packet never overwritten since) and nothing is ever cleared. Two halves suffice: block b
// writes half k % 2 again in call k + 2 only after finishing call k + 1, which needed block b of
// every peer's call k + 1 packets, which that block wrote after it finished reading call k: program
// order of one block, so it also holds for several calls inside one kernel. The counter lives in
// device memory and is advanced by the device: graph replays continue the sequence.
//
// Rules: every rank makes the same sequence of LL calls per block index (same grid); every wait is
// bounded by the pads' timeout and records barrier_kind::ll naming the missing rank. An error
// leaves the pads to reset.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../gpu/atomic.hpp"
#include "../gpu/memory.hpp"
#include "barrier.hpp"
#include "signal_pad.hpp"

RCCLX_NAMESPACE_BEGIN
namespace core {

// Can a call of num_blocks blocks, each publishing at most block_bytes of payload (whole 16-byte
// vectors), run on these pads' LL regions? The same answer on every rank (same pads layout).
template <int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool ll_fits(const signal_pads<MaxRanks>& s, int num_blocks, std::size_t block_bytes) {
  return num_blocks >= 1 && static_cast<std::uint32_t>(num_blocks) <= s.ll_blocks &&
         block_bytes <= static_cast<std::size_t>(s.ll_block_bytes);
}

namespace detail {
// The flag of the call after the one whose flag is `current` (a per-block call counter): never 0
// (0 means "never written"), and 2 after a wrap keeps the parity alternating.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t next_call_flag(std::uint32_t current) {
  const std::uint32_t flag = current + 1u;
  return flag == 0u ? 2u : flag;
}

RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint64_t ll_word(std::uint32_t data, std::uint32_t flag) {
  return static_cast<std::uint64_t>(data) | (static_cast<std::uint64_t>(flag) << 32);
}
}  // namespace detail

// Publishes the 16-byte vector `v` as packet `index` of an LL region half (lines at 16 * index and
// split + 16 * index; split: the pads' ll_block_bytes).
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void ll_write(unsigned char* half, std::size_t index, const gpu::vec16& v,
                                                  std::uint32_t flag, std::size_t split) {
  unsigned char* p = half + 16 * index;
  gpu::store_packet_system(p, detail::ll_word(v.w[0], flag), detail::ll_word(v.w[1], flag));
  gpu::store_packet_system(p + split, detail::ll_word(v.w[2], flag), detail::ll_word(v.w[3], flag));
}

// Packet `index` of an LL region as loaded: its four words, not yet checked. Loading is split from
// checking (ll_landed) so a reader of several packets issues every load before it looks at any:
// a check between two loads makes the second wait for the first one's round trip (measured on
// an H200: 8 peers' packets read one after another cost about 4000 cycles, twice the exchange).
struct ll_packet {
  std::uint64_t w[4];
};

RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void ll_load(const unsigned char* half, std::size_t index, ll_packet& q,
                                                 std::size_t split) {
  const unsigned char* p = half + 16 * index;
  gpu::load_packet_system(p, q.w[0], q.w[1]);
  gpu::load_packet_system(p + split, q.w[2], q.w[3]);
}

// Has a loaded packet landed (all four words carry `flag`)? And its 16 bytes of data.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool ll_landed(const ll_packet& q, std::uint32_t flag) {
  return static_cast<std::uint32_t>(q.w[0] >> 32) == flag && static_cast<std::uint32_t>(q.w[1] >> 32) == flag &&
         static_cast<std::uint32_t>(q.w[2] >> 32) == flag && static_cast<std::uint32_t>(q.w[3] >> 32) == flag;
}

RCCLX_HOST_DEVICE RCCLX_FORCEINLINE gpu::vec16 ll_payload(const ll_packet& q) {
  gpu::vec16 v;
  for (int i = 0; i < 4; ++i) v.w[i] = static_cast<std::uint32_t>(q.w[i]);
  return v;
}

// One attempt: true (and v filled) when all four words of packet `index` carry `flag`.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool ll_try_read(const unsigned char* half, std::size_t index, std::uint32_t flag,
                                                     gpu::vec16& v, std::size_t split) {
  ll_packet q;
  ll_load(half, index, q, split);
  v = ll_payload(q);
  return ll_landed(q, flag);
}

// Block `block`'s LL regions of every rank for one call, copied out of the pads once (the pads may
// live in global memory: emulated tables, graphs).
template <int MaxRanks>
struct ll_halves {
  const unsigned char* p[MaxRanks];
  int n;
  int rank;
  std::size_t split;  // the second lines' offset (ll_write)
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE ll_halves(const signal_pads<MaxRanks>& s, std::uint32_t flag, int block)
      : n(s.num_ranks), rank(s.rank), split(s.ll_block_bytes) {
    // One offset for every owner, and every inbox pointer loaded unconditionally (independent loads
    // that overlap, where pads in global memory, e.g. emulated tables, would otherwise be read one
    // owner at a time).
    const std::ptrdiff_t off = s.ll_region_offset(flag, block);
    std::uint32_t* base[MaxRanks];
    for (int j = 0; j < MaxRanks; ++j) base[j] = s.inbox[j];
    for (int j = 0; j < MaxRanks; ++j) p[j] = j < n ? reinterpret_cast<const unsigned char*>(base[j]) + off : nullptr;
  }
  // p[r] for a run-time r, selected with constant indices (p stays in registers, no scratch).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE const unsigned char* pick(int r) const {
    const unsigned char* q = p[0];
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
    for (int j = 1; j < MaxRanks; ++j)
      if (j == r) q = p[j];
    return q;
  }
};

// Something a reader waits for alongside its LL packets, polled in the same loop (one round trip
// per retry for both): the checked mode's fingerprint packet (core::check_poller). poll(): 1 ready,
// 0 not yet (a new load issued), -1 failed (recorded); expired(): records its timeout.
struct ll_no_extra {
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void issue() {}
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int poll() { return 1; }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void expired() {}
};

// Polls packet `index` of the peers p0 + j whose bit j is set in `pending` until each carries
// `flag`, reloading q[j] (the packets stay raw: one set of registers for loads and results). One
// loop for the whole batch (not one per peer: the code and the registers of a single retry path),
// every pending packet's loads issued before any is checked; `extra` (already issued) is polled in
// the same loop until it is ready. False if the bound expired (the record names the first missing
// peer), `extra` failed, or another thread of this rank already failed.
template <int Batch, int MaxRanks, class Extra = ll_no_extra>
RCCLX_HOST_DEVICE inline bool ll_wait_batch(const signal_pads<MaxRanks>& s, const ll_halves<MaxRanks>& h, int p0,
                                            std::size_t index, std::uint32_t flag, int block, ll_packet (&q)[Batch],
                                            std::uint32_t pending, Extra&& extra = Extra{}) {
  int x = 0;  // extra's state: 1 ready, 0 waiting, -1 failed
  const bool ok = detail::spin_bounded(
      s,
      [&] {
        for (int j = 0; j < Batch; ++j)
          if ((pending >> j) & 1u) ll_load(h.p[p0 + j], index, q[j], h.split);
        if (x == 0) x = extra.poll();
        for (int j = 0; j < Batch; ++j)
          if (((pending >> j) & 1u) && ll_landed(q[j], flag)) pending &= ~(1u << j);
        return x < 0 || (x > 0 && pending == 0u);
      },
      [&] {
        if (pending == 0u) {
          extra.expired();
          return;
        }
        // The first missing peer, found with constant indices (a dynamic index into h.p or q
        // would move them to scratch memory).
        int missing = 0;
        std::uint32_t seen = 0;  // the flag the packet holds
        for (int j = Batch - 1; j >= 0; --j) {
          if ((pending >> j) & 1u) {
            missing = p0 + j;
            seen = static_cast<std::uint32_t>(q[j].w[0] >> 32);
          }
        }
        detail::record_timeout(s, block, missing, barrier_kind::ll, flag, seen);
      });
  return ok && x > 0;
}

// Polls packet `index` of one region (owner `owner`'s, e.g. s.ll_region(owner, flag, block)) until
// it carries `flag`, filling v. For readers whose peer index is not a compile-time constant (no
// pointer array indexed at run time: it would live in scratch memory). Same bound and record as
// ll_wait_batch.
template <int MaxRanks>
RCCLX_HOST_DEVICE inline bool ll_wait_from(const signal_pads<MaxRanks>& s, const unsigned char* region, int owner,
                                           std::size_t index, std::uint32_t flag, int block, gpu::vec16& v) {
  return detail::spin_bounded(
      s, [&] { return ll_try_read(region, index, flag, v, s.ll_block_bytes); },
      [&] {
        std::uint64_t a, b;
        gpu::load_packet_system(region + 16 * index, a, b);
        detail::record_timeout(s, block, owner, barrier_kind::ll, flag, static_cast<std::uint32_t>(a >> 32));
      });
}

// One LL call of block `block`, over the words it owns: the block's epoch (ll_epochs[block]: its
// LL calls, advanced by the constructor) and its region of every rank's pad.
//
//   const core::ll_session<8> ll(g, pads, block);        // group-collective: the call's flag
//   ll.write(i, v);                                       // packet i of this rank's region
//   const core::ll_halves<8> h = ll.halves();             // every rank's region for reading
//   if (!core::ll_try_read(h.pick(p), i, ll.flag(), v, h.split) && !ll.wait_from(h.pick(p), p, i, v))
//     return false;
template <int MaxRanks>
class ll_session {
 public:
  // Group-collective, once per call by every block that takes part. Includes a group sync (every
  // thread has read the epoch before thread 0 advances it); the caller's final g.sync_or (or any
  // later sync) orders the advance before the next call's read.
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE ll_session(const Group& g, const signal_pads<MaxRanks>& s, int block)
      : s_(s), block_(block) {
    std::uint32_t* c = s.ll_epoch_slot(block);
    flag_ = detail::next_call_flag(*c);
    g.sync();
    if (g.thread_rank() == 0) *c = flag_;
  }
  // A call whose epoch was advanced already (check_ll_begin: the check's and the LL's in one sync).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE ll_session(const signal_pads<MaxRanks>& s, int block, std::uint32_t flag)
      : s_(s), block_(block), flag_(flag) {}

  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t flag() const { return flag_; }
  // This rank's region half of the call (packets written with write()).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE unsigned char* own() const { return s_.ll_region(s_.rank, flag_, block_); }
  // Publishes `v` as packet `index` of this rank's region.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void write(std::size_t index, const gpu::vec16& v) const {
    ll_write(own(), index, v, flag_, s_.ll_block_bytes);
  }
  // Every rank's region of the call.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE ll_halves<MaxRanks> halves() const {
    return ll_halves<MaxRanks>(s_, flag_, block_);
  }
  // ll_wait_batch / ll_wait_from for this call.
  template <int Batch, class Extra = ll_no_extra>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool wait_batch(const ll_halves<MaxRanks>& h, int p0, std::size_t index,
                                                      ll_packet (&q)[Batch], std::uint32_t pending,
                                                      Extra&& extra = Extra{}) const {
    return ll_wait_batch<Batch>(s_, h, p0, index, flag_, block_, q, pending, static_cast<Extra&&>(extra));
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool wait_from(const unsigned char* region, int owner, std::size_t index,
                                                     gpu::vec16& v) const {
    return ll_wait_from(s_, region, owner, index, flag_, block_, v);
  }

 private:
  const signal_pads<MaxRanks>& s_;
  int block_;
  std::uint32_t flag_;
};

// Group-collective, once per call by every block that takes part: this call's flag for `block`
// (ll_session's constructor).
template <class Group, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t ll_begin(const Group& g, const signal_pads<MaxRanks>& s, int block) {
  return ll_session<MaxRanks>(g, s, block).flag();
}

}  // namespace core
RCCLX_NAMESPACE_END
