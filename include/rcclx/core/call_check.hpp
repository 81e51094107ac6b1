// rcclx/core/call_check.hpp: the checked mode's call fingerprints (RCCLX_CHECKS, docs/checks.md).
// Each rank publishes what it is calling (collective, element type, op, algorithm, count, grid,
// shape) as one LL packet next to its first flags; every rank compares its peers' with its own
// before it writes any output. Ranks that disagree all fail the call with errc::mismatch, the record
// naming the field and both values, instead of reducing mismatched data or waiting for flags that
// never come.
//
//   const core::call_fingerprint fp = core::fingerprint<T, ReduceOp>(core::checked_collective::allreduce,
//                                                                   algorithm::flat, count, num_blocks, g.size());
//   const core::check_session<8> check(g, pads, block, fp);   // group-collective: publish
//   ... publish data, issue loads ...
//   if (g.sync_or(!check.verify(g, block))) return false;     // before any output
// (core::check_begin and check_verify are check_session's parts, for callers that keep the flag.)
//
// Protocol: the packet of (rank, slot) for calls of parity k % 2 lives in the rank's own pad
// (signal_pads::check_packet); block `slot` of every rank makes the same sequence of checked calls,
// so their counters (check_epochs) agree and the packet's flag names the call, exactly as the LL
// one-shot's regions (core/ll.hpp): written again two calls later, after every peer read it. A
// rank that disagrees still publishes and reads its check packets in the same order, whatever
// protocol its arguments make it run next (LL or barriers): the check never waits for anything a
// mismatched peer would not send. Cost: one 32-byte packet store and N - 1 packet loads per block
// and call, the loads overlapping the call's own first round trip where the algorithm allows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../gpu/atomic.hpp"
#include "../gpu/memory.hpp"
#include "barrier.hpp"
#include "error.hpp"
#include "ll.hpp"
#include "ops.hpp"
#include "signal_pad.hpp"
#include "types.hpp"

RCCLX_NAMESPACE_BEGIN
namespace core {

// What a fingerprint describes (the `collective` field).
enum class checked_collective : std::uint32_t { allreduce = 1, tile_allreduce = 2, broadcast = 3, reduce = 4, combine = 5 };

// 16 bytes: w[0] = collective << 24 | element type << 16 | op << 8 | algorithm; w[1] = count (low
// 32 bits); w[2] = count bits 32..47 << 16 | blocks per rank; w[3] = shape (threads per block, or
// elements per tile; broadcast and reduce: the root). A combine: the record type, the combine op's
// identity, the record count and records per tile. A tile map's fingerprint uses the four words for its own fields.
struct call_fingerprint {
  std::uint32_t w[4];
};

// Element type identities on the wire (also named by describe()).
template <class T>
RCCLX_HOST_DEVICE constexpr std::uint32_t type_id() {
  if constexpr (std::is_same<T, float>::value) return 1;
  else if constexpr (std::is_same<T, bf16>::value) return 2;
  else if constexpr (std::is_same<T, fp16>::value) return 3;
  else if constexpr (std::is_same<T, std::int32_t>::value) return 4;
  else if constexpr (std::is_same<T, double>::value) return 5;
  else if constexpr (std::is_same<T, std::int64_t>::value) return 6;
  else if constexpr (std::is_same<T, std::int8_t>::value) return 7;
  else if constexpr (std::is_same<T, std::uint8_t>::value) return 8;
  else if constexpr (std::is_same<T, bool>::value) return 9;
  else return 0x80u | (static_cast<std::uint32_t>(sizeof(T)) & 0x7Fu);
}

// The words of a fingerprint from its fields (type and op as their wire identities).
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE call_fingerprint fingerprint_words(checked_collective c, std::uint32_t type,
                                                                       std::uint32_t op, std::uint32_t algo,
                                                                       std::size_t count, std::uint32_t blocks,
                                                                       std::size_t shape) {
  call_fingerprint f;
  f.w[0] = (static_cast<std::uint32_t>(c) << 24) | ((type & 0xFFu) << 16) | ((op & 0xFFu) << 8) | (algo & 0xFFu);
  f.w[1] = static_cast<std::uint32_t>(count);
  f.w[2] = ((static_cast<std::uint32_t>(static_cast<std::uint64_t>(count) >> 32) & 0xFFFFu) << 16) | (blocks & 0xFFFFu);
  f.w[3] = static_cast<std::uint32_t>(shape);
  return f;
}

template <class T, class ReduceOp>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE call_fingerprint fingerprint(checked_collective c, algorithm algo,
                                                                 std::size_t count, int blocks, std::size_t shape) {
  return fingerprint_words(c, type_id<T>(), static_cast<std::uint32_t>(ReduceOp::value), static_cast<std::uint32_t>(algo),
                           count, static_cast<std::uint32_t>(blocks), shape);
}

namespace detail {

// Records that `peer` passed other arguments: the first field in which `theirs` differs from `mine`.
template <int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void record_call_mismatch(const signal_pads<MaxRanks>& s, int block, int peer,
                                                              const call_fingerprint& mine, const gpu::vec16& theirs,
                                                              bool map) {
  std::uint32_t field = 0, a = 0, b = 0;
  const std::uint32_t c = map ? static_cast<std::uint32_t>(checked_collective::tile_allreduce) : mine.w[0] >> 24;
  if (map) {
    // A tile map: tiles, tile rows, tile columns, output columns, one word each.
    for (int i = 3; i >= 0; --i)
      if (mine.w[i] != theirs.w[i]) {
        field = static_cast<std::uint32_t>(call_field::map_tiles) + static_cast<std::uint32_t>(i);
        a = mine.w[i];
        b = theirs.w[i];
      }
  } else {
    // Fields in the order a reader would look at them: the first that differs is reported.
    const std::uint32_t mc[7] = {mine.w[0] >> 24, (mine.w[0] >> 16) & 0xFFu, (mine.w[0] >> 8) & 0xFFu,
                                 mine.w[0] & 0xFFu, mine.w[1], mine.w[2] & 0xFFFFu,
                                 mine.w[3]};
    const std::uint32_t tc[7] = {theirs.w[0] >> 24, (theirs.w[0] >> 16) & 0xFFu, (theirs.w[0] >> 8) & 0xFFu,
                                 theirs.w[0] & 0xFFu, theirs.w[1], theirs.w[2] & 0xFFFFu, theirs.w[3]};
    const bool count_high_differs = (mine.w[2] >> 16) != (theirs.w[2] >> 16);
    for (int i = 6; i >= 0; --i)
      if (mc[i] != tc[i] || (i == 4 && count_high_differs)) {
        field = static_cast<std::uint32_t>(i + 1);
        a = mc[i];
        b = tc[i];
      }
  }
  record_error(s, errc::mismatch, peer, (c << 8) | field, block, 0u, b, a);
}

// Records a misuse found on this rank (an invalid_argument record).
template <int MaxRanks>
RCCLX_HOST_DEVICE inline void record_misuse(const signal_pads<MaxRanks>& s, misuse what, int block, std::uint32_t a,
                                            std::uint32_t b) {
  record_error(s, errc::invalid_argument, s.rank, static_cast<std::uint32_t>(what), block, 0u, a, b);
}

RCCLX_HOST_DEVICE RCCLX_FORCEINLINE gpu::vec16 as_vec(const call_fingerprint& f) {
  gpu::vec16 v;
  for (int i = 0; i < 4; ++i) v.w[i] = f.w[i];
  return v;
}

// Zeroed memory reads as flag 0 ("nothing yet"): a call flag of 0 (a counter reset to 2^32 - 1)
// is sent as 2^31, which has the same parity.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t nonzero_flag(std::uint32_t f) { return f ? f : 0x80000000u; }

}  // namespace detail

// Publishes `fp` as the packet at `packet` (check_packet(this rank, flag, slot)) of the call whose
// flag is `flag` (one thread).
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void check_publish_at(unsigned char* packet, std::uint32_t flag,
                                                          const call_fingerprint& fp) {
  ll_write(packet, 0, detail::as_vec(fp), detail::nonzero_flag(flag), 16);
}
// Publishes `fp` as (this rank, slot)'s packet of the call whose flag is `flag` (one thread).
template <int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void check_publish(const signal_pads<MaxRanks>& s, int slot, std::uint32_t flag,
                                                       const call_fingerprint& fp) {
  check_publish_at(s.check_packet(s.rank, detail::nonzero_flag(flag), slot), flag, fp);
}

// One peer's fingerprint packet (slot, flag) compared with `fp`, split into issue() and poll() so
// that a reader of LL packets folds it into its own wait (core::ll_wait_batch's `extra`): the
// fingerprint and the data then cost one round trip together, where a wait for the fingerprint
// before the data costs one more (measured on an H200, 8 emulated ranks: +0.9 us per call).
// check_verify runs one per peer it serves. The peer defaults to the thread rank (the LL one-shot's
// threads each serve one peer; needs a group of at least as many threads as ranks).
template <int MaxRanks>
struct check_poller {
  const signal_pads<MaxRanks>& s;
  const call_fingerprint& fp;
  const unsigned char* pkt;
  std::uint32_t flag;
  int peer, block;
  int state;  // 1 matched (or nothing to check), 0 waiting, -1 failed
  ll_packet q;
  bool map;  // fp is a tile map's fingerprint (the mismatch record names its fields)
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE check_poller(const Group& g, const signal_pads<MaxRanks>& pads, int slot,
                                                   std::uint32_t check_flag, const call_fingerprint& f, int blk)
      : check_poller(pads, slot, check_flag, f, blk, g.thread_rank(), false) {}
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE check_poller(const signal_pads<MaxRanks>& pads, int slot, std::uint32_t check_flag,
                                                   const call_fingerprint& f, int blk, int p, bool is_map)
      : check_poller(pads, nullptr, check_flag, f, blk, p, is_map) {
    if (state == 0) pkt = pads.check_packet(peer, flag, slot);
  }
  // The same with the packet's address computed by the caller (`packet`: check_packet(p, flag, slot)).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE check_poller(const signal_pads<MaxRanks>& pads, const unsigned char* packet,
                                                   std::uint32_t check_flag, const call_fingerprint& f, int blk, int p,
                                                   bool is_map)
      : s(pads), fp(f), pkt(packet), flag(detail::nonzero_flag(check_flag)), peer(p), block(blk),
        state(p < pads.num_ranks && p != pads.rank ? 0 : 1), q{}, map(is_map) {}
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void issue() {
    if (state == 0) ll_load(pkt, 0, q, 16);
  }
  // Looks at the packet issue() (or the previous poll()) loaded; reloads it if it has not landed.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int poll() {
    if (state != 0) return state;
    if (!ll_landed(q, flag)) {
      ll_load(pkt, 0, q, 16);
      return 0;
    }
    const gpu::vec16 theirs = ll_payload(q);
    if (RCCLX_UNLIKELY(theirs.w[0] != fp.w[0] || theirs.w[1] != fp.w[1] || theirs.w[2] != fp.w[2] ||
                       theirs.w[3] != fp.w[3])) {
      detail::record_call_mismatch(s, block, peer, fp, theirs, map);
      state = -1;
    } else {
      state = 1;
    }
    return state;
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void expired() {
    detail::record_timeout(s, block, peer, barrier_kind::check, flag, static_cast<std::uint32_t>(q.w[0] >> 32));
  }
};

namespace detail {
// Polls `c` (issued) until its packet landed, bounded (expired() on expiry): true if it matched (or
// had nothing to check); false on a mismatch (c.state < 0) or when the wait ended first.
template <int MaxRanks, class Expired>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool check_polled(const signal_pads<MaxRanks>& s, check_poller<MaxRanks>& c,
                                                      Expired&& expired) {
  int x = c.poll();
  if (x == 0 && !spin_bounded(
                    s,
                    [&] {
                      x = c.poll();
                      return x != 0;
                    },
                    expired))
    return false;
  return x > 0;
}
// check_polled with the check's own timeout record.
template <int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool check_settled(const signal_pads<MaxRanks>& s, check_poller<MaxRanks>& c) {
  return check_polled(s, c, [&] { c.expired(); });
}
// check_settled for a reader that polls beside other waits which name a late peer first: a wait
// as long as theirs that records nothing (and stops once this rank recorded an error), then, if the
// packet still has not landed, check_settled's own (a peer whose flags came without a packet: not
// built with RCCLX_CHECKS).
template <int MaxRanks>
RCCLX_HOST_DEVICE inline bool check_settled_after(const signal_pads<MaxRanks>& s, check_poller<MaxRanks>& c) {
  if (RCCLX_LIKELY(check_polled(s, c, [] {}))) return true;
  if (c.state != 0 || gpu::load_relaxed_system(&s.err->code) != 0u) return false;
  return check_settled(s, c);
}
}  // namespace detail

// Compares the packet (slot, flag) of every peer this thread serves (p = thread_rank, + group size,
// ...) with `fp`, waiting (bounded) for those not there yet. Not group-collective: merge the result
// into a group vote (g.sync_or(!ok)) before the first output is written. False on a mismatch (the
// record names the field and both values) or an expired wait (barrier_kind::check; `block` in the
// records). `map`: fp is a tile map's fingerprint. `only`: serve this one peer only (>= 0).
// `below`: serve only peers 0 .. below - 1 (those that publish this packet: a tree tile map's owners).
template <class Group, int MaxRanks>
RCCLX_HOST_DEVICE inline bool check_verify(const Group& g, const signal_pads<MaxRanks>& s, int slot, std::uint32_t flag,
                                           const call_fingerprint& fp, int block, bool map = false, int only = -1,
                                           int below = max_ranks) {
  if (only >= 0 && g.thread_rank() != 0) return true;  // one thread serves that peer
  const int end = below < s.num_ranks ? below : s.num_ranks;
  for (int p = only >= 0 ? only : g.thread_rank(); p < end; p += g.size()) {
    check_poller<MaxRanks> c(s, slot, flag, fp, block, p, map);
    c.issue();
    if (!detail::check_settled(s, c)) return false;
    if (only >= 0) break;
  }
  return true;
}

// One checked call of slot `slot` (a block, or a tile call's control slot), over the words it
// owns: the slot's check epoch (check_epochs[slot]: its checked calls, advanced by the
// constructor) and its fingerprint packets. The fingerprint is kept by reference: it must outlive
// the object.
//
//   const core::check_session<8> check(g, pads, block, fp);   // group-collective: publish
//   ... publish data, issue loads ...
//   if (g.sync_or(!check.verify(g, block))) return false;     // before any output
template <int MaxRanks>
class check_session {
 public:
  // Group-collective, once per checked call by every block that takes part: advances the slot's
  // check epoch and publishes `fp` (check_begin).
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE check_session(const Group& g, const signal_pads<MaxRanks>& s, int slot,
                                                    const call_fingerprint& fp)
      : s_(s), fp_(fp), slot_(slot) {
    std::uint32_t* c = s.check_epoch_slot(slot);
    flag_ = detail::next_call_flag(*c);  // as core::ll_session
    g.sync();
    if (g.thread_rank() == 0) {
      *c = flag_;
      check_publish(s, slot, flag_, fp);
    }
  }
  // The same for a checked call that runs the LL protocol: both epochs read before a single group
  // sync (one round trip and one sync, not two of each); `ll_flag` gets the call's LL flag
  // (check_ll_begin).
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE check_session(const Group& g, const signal_pads<MaxRanks>& s, int slot,
                                                    const call_fingerprint& fp, std::uint32_t& ll_flag)
      : s_(s), fp_(fp), slot_(slot) {
    std::uint32_t* c = s.check_epoch_slot(slot);
    std::uint32_t* l = s.ll_epoch_slot(slot);
    const std::uint32_t f = detail::next_call_flag(*c), lf = detail::next_call_flag(*l);
    flag_ = f;
    g.sync();
    if (g.thread_rank() == 0) {
      *c = flag_;
      *l = lf;
      check_publish(s, slot, flag_, fp);
    }
    ll_flag = lf;
  }

  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t flag() const { return flag_; }
  // check_verify of this call (not group-collective; `block` named in the records).
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool verify(const Group& g, int block) const {
    return check_verify(g, s_, slot_, flag_, fp_, block);
  }
  // The poller of the peer this thread serves (the thread rank), for an LL reader's wait.
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE check_poller<MaxRanks> poller(const Group& g, int block) const {
    return check_poller<MaxRanks>(g, s_, slot_, flag_, fp_, block);
  }

 private:
  const signal_pads<MaxRanks>& s_;
  const call_fingerprint& fp_;
  int slot_;
  std::uint32_t flag_;
};

// Group-collective, once per checked call by every block that takes part: advances the block's
// check counter and publishes `fp` (check_session's constructor). Returns the call's check flag
// (for check_verify).
template <class Group, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t check_begin(const Group& g, const signal_pads<MaxRanks>& s,
                                                              int block, const call_fingerprint& fp) {
  return check_session<MaxRanks>(g, s, block, fp).flag();
}

// check_begin and core::ll_begin in one (check_session's second constructor). Returns the check
// flag; `ll_flag` gets the call's LL flag.
template <class Group, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t check_ll_begin(const Group& g, const signal_pads<MaxRanks>& s,
                                                                 int block, const call_fingerprint& fp,
                                                                 std::uint32_t& ll_flag) {
  return check_session<MaxRanks>(g, s, block, fp, ll_flag).flag();
}

}  // namespace core
RCCLX_NAMESPACE_END
