// rcclx/core/barrier.hpp: per-block barriers across ranks: graph-replay-safe, wrap-around-safe,
// bounded. Block b of rank r synchronises with block b of every peer, so all ranks must launch
// the same grid and partition work the same way.
//
//   if (!rcclx::core::barrier(g, pads, blockIdx.x, rcclx::core::barrier_kind::start)) return;
//   ... read peers' buffers ...
//   if (!rcclx::core::barrier(g, pads, blockIdx.x, rcclx::core::barrier_kind::end)) return;
//
// core::barrier is barrier_session(g, pads, block).sync(kind); barrier_session also offers its two
// halves, arrive() and wait(). Words: slot b's row of the pad's counters and flags
// (core/signal_pad.hpp).
// Protocol (thread p of the group serves peer p): counters[b][p] += 1 -> e; store-release e into
// peer p's inbox[b][r]; then spin (load-acquire) until own inbox[b][p] has reached e. The counters live
// in device memory and are advanced by the device, so a replayed graph continues the sequence
// (no host epoch in kernel arguments: the flaw of QuickReduce and early NCCLX DDA). Flags only
// grow, so a fast peer already at barrier k+1 (it wrote e+1) also satisfies barrier k: no flag is
// ever overwritten by a smaller value and no reset is needed. Comparisons are modulo 2^32.
// Every wait is bounded by pads.timeout_ns: on expiry the first failing thread fills the rank's
// error record (core::record_error: waiting rank, missing rank, barrier kind, block, call), every
// block then leaves, and the host turns the record into rcclx::error(errc::timeout). After an
// error the pads must be reset (zeroed on every rank) before the next use.
// Cost: one flag store and one poll per peer per block; the store and the poll for all peers run
// in parallel across the group's threads.
#pragma once

#include <cstdint>

#include "../gpu/atomic.hpp"
#include "../gpu/clock.hpp"
#include "../gpu/group.hpp"
#include "error.hpp"
#include "signal_pad.hpp"

RCCLX_NAMESPACE_BEGIN
namespace core {

namespace detail {

// A bounded wait on `peer` expired (barrier_kind `kind`, the flag `call` awaited, `observed` seen).
template <int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void record_timeout(const signal_pads<MaxRanks>& s, int block, int peer,
                                                        barrier_kind kind, std::uint32_t call,
                                                        std::uint32_t observed) {
  record_error_words(s.err, static_cast<std::uint32_t>(errc::timeout), static_cast<std::uint32_t>(s.rank),
                     static_cast<std::uint32_t>(peer), static_cast<std::uint32_t>(kind), static_cast<std::uint32_t>(block),
                     call, observed, 0u, false);  // `reserved` unused
}

// The bounded spin every device wait is made of: calls ready() until it returns true. Every 64th
// round it leaves (false) if another thread of this rank already failed, and once the pads'
// bound has expired it calls expired() (which records the error) and leaves (false); then pauses.
template <int MaxRanks, class Ready, class Expired>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool spin_bounded(const signal_pads<MaxRanks>& s, Ready&& ready, Expired&& expired) {
  const std::uint64_t limit = s.timeout_ns ? s.timeout_ns : default_timeout_ns;
  const std::uint64_t t0 = gpu::clock_ns();
  for (std::uint32_t spins = 1;; ++spins) {
    if (ready()) return true;
    if ((spins & 63u) == 0u) {
      if (RCCLX_UNLIKELY(gpu::load_relaxed_system(&s.err->code) != 0u)) return false;
      if (RCCLX_UNLIKELY(gpu::clock_ns() - t0 > limit)) {
        expired();
        return false;
      }
      gpu::spin_pause();
    }
  }
}

// Spins until *flag reaches `expected`. False if the bound expired (record written) or another
// thread of this rank already failed (then this thread leaves without writing a record).
template <int MaxRanks>
RCCLX_HOST_DEVICE inline bool wait_flag(const signal_pads<MaxRanks>& s, const std::uint32_t* flag,
                                        std::uint32_t expected, int block, int peer,
                                        barrier_kind kind) {
  std::uint32_t v = gpu::load_acquire_system(flag);
  if (RCCLX_LIKELY(gpu::counter_reached(v, expected))) return true;
  return spin_bounded(
      s,
      [&] {
        // Poll relaxed (no cache invalidation per poll); once the flag has arrived, one acquire load
        // (it reads the same or a later value: flags only grow) orders this thread's later reads.
        v = gpu::load_relaxed_system(flag);
        if (!gpu::counter_reached(v, expected)) return false;
        (void)gpu::load_acquire_system(flag);
        return true;
      },
      [&] { record_timeout(s, block, peer, kind, expected, v); });
}

// wait_flag with also() run before every reload of the flag (the checked mode's check packets
// polled beside a tile flag, fused/detail/tile_exchange.hpp).
template <int MaxRanks, class Also>
RCCLX_HOST_DEVICE inline bool wait_flag(const signal_pads<MaxRanks>& s, const std::uint32_t* flag,
                                        std::uint32_t expected, int block, int peer, barrier_kind kind, Also&& also) {
  std::uint32_t v = gpu::load_acquire_system(flag);
  if (RCCLX_LIKELY(gpu::counter_reached(v, expected))) return true;
  return spin_bounded(
      s,
      [&] {
        also();
        v = gpu::load_relaxed_system(flag);
        if (!gpu::counter_reached(v, expected)) return false;
        (void)gpu::load_acquire_system(flag);
        return true;
      },
      [&] { record_timeout(s, block, peer, kind, expected, v); });
}

}  // namespace detail

// One barrier of (rank, block) with block `block` of every peer, over the words it owns: slot
// `block`'s counter row (its epoch: barriers completed with each peer, advanced by arrive()) and
// flag words. Group-collective: every thread of `g` calls each member. sync() = arrive() + wait();
// split, other work may run between the announcement and the wait.
//
//   core::barrier_session<gpu::block_group, 8> b(g, pads, blockIdx.x);
//   if (!b.sync(core::barrier_kind::start)) return;
template <class Group, int MaxRanks>
class barrier_session {
 public:
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE barrier_session(const Group& g, const signal_pads<MaxRanks>& s, int block)
      : g_(g), s_(s), block_(block) {}

  // Announces this rank's arrival to every peer (after the whole group's earlier reads and writes).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void arrive() const {
    g_.sync();  // the whole group's earlier reads/writes happen before this rank's release
    // Announce to every peer first, then wait: a thread serving several peers (small groups, the
    // host backend) must not hold back its announcement to one peer while waiting for another.
    for (int p = g_.thread_rank(); p < s_.num_ranks; p += g_.size()) {
      if (p == s_.rank) continue;
      std::uint32_t* counter = s_.counter_slot(block_, p);
      const std::uint32_t e = *counter + 1u;
      *counter = e;
      gpu::store_release_system(s_.inbox_slot(p, block_, s_.rank), e);
    }
  }

  // Waits for every peer's arrival of this epoch. False (in every thread) if a wait failed: the
  // caller must then leave the kernel without touching peer memory.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool wait(barrier_kind kind) const {
    bool failed = false;
    for (int p = g_.thread_rank(); p < s_.num_ranks && !failed; p += g_.size()) {
      if (p == s_.rank) continue;
      const std::uint32_t e = *s_.counter_slot(block_, p);
      failed = !detail::wait_flag(s_, s_.inbox_slot(s_.rank, block_, p), e, block_, p, kind);
    }
    return !g_.sync_or(failed);  // and every thread sees the peers' data the waiting threads acquired
  }

  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool sync(barrier_kind kind) const {
    arrive();
    return wait(kind);
  }

 private:
  Group g_;
  const signal_pads<MaxRanks>& s_;
  int block_;
};

// Signals arrival of (rank, block) to every peer and waits for theirs (barrier_session::sync).
// Group-collective: every thread of `g` must call it. Returns false (in every thread) if a wait
// failed; the caller must then leave the kernel without touching peer memory.
template <class Group, int MaxRanks>
RCCLX_HOST_DEVICE inline bool barrier(const Group& g, const signal_pads<MaxRanks>& s, int block,
                                      barrier_kind kind) {
  return barrier_session<Group, MaxRanks>(g, s, block).sync(kind);
}

// Non-blocking check the host (or a kernel) can use: has this rank recorded an error?
template <int MaxRanks>
RCCLX_HOST_DEVICE inline bool has_error(const signal_pads<MaxRanks>& s) {
  return gpu::load_relaxed_system(&s.err->code) != 0u;
}

}  // namespace core
RCCLX_NAMESPACE_END
