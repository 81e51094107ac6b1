// rcclx/core/tile_flags.hpp: the tile-flag protocol: one flag per (tile, sender) instead of a block
// barrier, for calls whose blocks exchange tiles inside a user's kernel (fused::tile_allreduce and
// fused::combine run on it). A producer raises a tile's flag on the ranks that read the tile, a
// reader waits (bounded) for the flags it needs, and every block counts itself out with finish().
//
//   const rcclx::core::tile_flags<8> f(pads, slots);   // every block, once per call: reads the epoch
//   ... write tile t ...; g.sync();
//   f.raise(t, p);                                     // tile t's flag up on rank p (one thread)
//   if (!f.wait(t, p, t)) ...                          // rank p's flag of tile t (bounded)
//   f.finish(g, gridDim.x);                            // every block, once per call
//
// Words (core/signal_pad.hpp), in the slot range tile_slots{first, max_tiles} handed out by the pads'
// owner (core/slot_ranges.hpp): tile i's flags are slot first + 1 + i's flag words (one per sender,
// written only by that sender, store-release at system scope); the control row tile_control[first]
// holds this rank's
//   [calls_word]    calls completed: every flag of a call carries the epoch, calls + 1
//   [arrived_word]  blocks of this rank that called finish(), ever
//   [began_word]    arrived_word's value when the current call began
//   [launch_word]   the missing-finish detector's last launch and call (launch_start, launch_verdict)
// Nothing else touches them (the barrier's counters and the call check's epochs are their own).
//
// Protocol. The epoch is the same on every rank (every rank makes every call): raising tile t for
// peer p stores it into p's flag word [first + 1 + t][r]; a wait for p is a bounded load-acquire spin
// until [first + 1 + t][p] reaches it. The epoch names the call, not the block, so any block of a
// rank can wait for a tile. Epochs live on the device and only grow (modulo 2^32): graph-replay-safe,
// no reset needed; waits expire after the pads' timeout and record barrier_kind::tile (block = the
// tile). The last block of a rank to reach finish() advances the call counter: a call's users may
// alternate what they keep by the call's parity (fused::tile_allreduce's buffer halves), since the
// flags of call k + 1 prove the peers finished call k (each publishes them after its call k ended).
//
// Rules: every rank makes every call, with the same tiles; every block constructs the object and
// calls finish() once per call (with the grid's block count); all blocks of all ranks are resident
// at once (blocks wait for blocks of other ranks). One call per kernel: the call counter advances
// when the kernel's blocks finish.
#pragma once

#include <cstdint>

#include "../gpu/atomic.hpp"
#include "../gpu/group.hpp"
#include "barrier.hpp"
#include "call_check.hpp"
#include "error.hpp"
#include "signal_pad.hpp"
#include "slot_ranges.hpp"
#include "tile_audit.hpp"

RCCLX_NAMESPACE_BEGIN
namespace core {

template <int MaxRanks>
class tile_flags {
 public:
  // The words of a slot's control row (signal_pads::tile_control_slot).
  static constexpr int calls_word = 0, arrived_word = 1, began_word = 2, launch_word = 3;
  static_assert(launch_word < tile_control_words, "rcclx::core::tile_flags: the control row has no room");
  static_assert(calls_word == audit_calls_word, "core::audit_last_calls reads the calls word");

  // Reads this rank's call counter: construct once per block per call. `s` is kept by reference:
  // it must outlive the object (a kernel argument, a table in device memory).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE tile_flags(const signal_pads<MaxRanks>& s, tile_slots slots)
      : tile_flags(s, slots, [] {}) {}
  // ... calling before_acquire() just before the counter's read (once its address is known): loads
  // it issues share the read's round trip, and none of them waits behind the acquire.
  template <class BeforeAcquire>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE tile_flags(const signal_pads<MaxRanks>& s, tile_slots slots,
                                                 BeforeAcquire&& before_acquire)
      : s_(&s), control_(s.tile_control_slot(slots.first)), slots_(slots) {
    before_acquire();
#if RCCLX_CHECKS
    // The missing-finish detector's first look at launch_word (launch_start), loaded before the
    // counter's acquire so that the two round trips overlap: any value will do, its exchange checks it.
    launch_seen_ = gpu::load_relaxed_system(control_ + launch_word);
#endif
    // Acquire: this thread's later accesses (finish()'s count included) come after the counter's
    // read, whatever the compiler does with the loads; see finish().
    const std::uint32_t call = gpu::load_acquire_system(control_ + calls_word);
    epoch_ = call + 1u;
    arrived_before_ = gpu::load_relaxed_system(control_ + began_word);
  }

  // This call's flag value: calls completed + 1.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t epoch() const { return epoch_; }
  // Calls completed before this one (its parity alternates from call to call).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t calls() const { return epoch_ - 1u; }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE tile_slots slots() const { return slots_; }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE const signal_pads<MaxRanks>& pads() const { return *s_; }

  // Raises flag `tile` on rank p (one thread; the writes it publishes must come before, e.g. a
  // group sync after the group wrote them).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void raise(int tile, int p) const {
    gpu::store_release_system(s_->inbox_slot(p, slot_of(tile), s_->rank), epoch_);
  }

  // Waits until rank p's flag `tile` on this rank carries this call's epoch: bounded, recorded as
  // barrier_kind::tile with block = `tile_named` on expiry.
  RCCLX_HOST_DEVICE bool wait(int tile, int p, int tile_named) const {
    return detail::wait_flag(*s_, s_->inbox_slot(s_->rank, slot_of(tile), p), epoch_, tile_named, p,
                             barrier_kind::tile);
  }

#if RCCLX_CHECKS
  // Checked mode (core/call_check.hpp): a fingerprint of the call (`packet` 0) or of what it
  // applies to (1: fused::tile_allreduce's tile map) in the check packets of the slot range's first
  // slots, under this call's epoch: the tile call's checks have no epoch of their own. publish_check
  // is one thread's, before the flags it goes with.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void publish_check(int packet, const call_fingerprint& fp) const {
    check_publish_at(packet_of(s_->rank, packet), epoch_, fp);
  }
  // The check packet `packet` (0, 1) of `owner` for this call: the pad arithmetic made once per
  // thread, the same offset from every owner's flags.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE unsigned char* packet_of(int owner, int packet) const {
    if (packet_off_ < 0)
      packet_off_ = s_->check_packet(s_->rank, detail::nonzero_flag(epoch_), slots_.first) -
                    reinterpret_cast<unsigned char*>(s_->inbox[s_->rank]);
    return reinterpret_cast<unsigned char*>(s_->inbox[owner]) + packet_off_ + packet * static_cast<std::ptrdiff_t>(check_packet_bytes);
  }
  // Checked mode, one of `lanes` threads (`lane`: 0 .. lanes - 1) that look at the peers' check
  // packets while other threads wait for their flags: the packets of peers lane, lane + lanes, ...
  // (every peer but this rank): the call's (0) compared with `call` when it is given, the tile
  // map's (1) with `map` for peers below map_below. Each is polled quietly as long as a flag wait
  // (the flag's own wait names a late peer), then as check_verify does (its records, `tile` named).
  RCCLX_HOST_DEVICE bool verify_packets(int lane, int lanes, int tile, const call_fingerprint* call,
                                        const call_fingerprint* map, int map_below) const {
    const call_fingerprint& any = call ? *call : *map;
    for (int p = lane; p < s_->num_ranks; p += lanes) {
      if (p == s_->rank) continue;
      check_poller<MaxRanks> a(*s_, packet_of(p, 0), epoch_, any, tile, call ? p : s_->num_ranks, false);
      check_poller<MaxRanks> b(*s_, packet_of(p, 1), epoch_, map ? *map : any, tile,
                               map && p < map_below ? p : s_->num_ranks, true);
      a.issue();
      b.issue();
      if (!detail::check_settled_after(*s_, a) || !detail::check_settled_after(*s_, b)) return false;
    }
    return true;
  }
#endif

  // Group-collective, every block, once per call: counts the block; the last block of this rank to
  // be counted advances the call counter. It only touches the control words, which the
  // constructor read, so it may come at any point the whole group reaches after the constructor,
  // and the object stays usable for the rest of the call. At the end of the kernel, its round trip
  // (the count's atomic) is the kernel's last step; earlier, e.g. right after publishing while the
  // flags are on their way, it overlaps the wait (the AllReduce + RMSNorm kernels: 0.15-0.3 us per
  // call on one H200, docs/performance.md).
  template <class Group>
  RCCLX_HOST_DEVICE void finish(const Group& g, int num_blocks) const {
    g.sync();
    if (g.thread_rank() == 0) {
      // Relative counts, so any common starting value works (emulated_world::reset(value) sets
      // them all to value).
      // No fence. The control words (the counter, began_word) only have to be read before this
      // block is counted, so that none of its threads can see the last block's update of this
      // call: every thread read them in the constructor (the counter with an acquire load), and the
      // group sync above completes each thread's earlier loads before thread 0 counts (on the
      // host the fetch_add itself is acq_rel). The outputs need no ordering here: the next call is
      // a later kernel, and peers reuse what a call wrote only after this rank's flags of the next
      // call (see Protocol). A system-scope fence here waited for the block's last stores to land:
      // 0.4-0.5 us per call of the tile-flag AllReduce + RMSNorm kernels on one H200
      // (docs/performance.md).
      count_close(count_arrive(), num_blocks);
    }
  }

  // finish()'s count in two steps (the checked mode, fused/detail/tile_exchange.hpp, counts from
  // any one thread of the block after a group sync, with its audit between them): count_arrive()
  // counts the block and returns the rank's blocks counted ever (arrivals(): this call's so far,
  // this one included); count_close() then advances the call counter when that was the last block
  // (the counter is still what the constructor read: only this store changes it, so no load).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t count_arrive() const {
    return gpu::fetch_add_local(control_ + arrived_word, 1u) + 1u;
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t arrivals(std::uint32_t now) const { return now - arrived_before_; }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void count_close(std::uint32_t now, int num_blocks) const {
    if (arrivals(now) != static_cast<std::uint32_t>(num_blocks)) return;
    gpu::store_relaxed_system(control_ + began_word, now);
    gpu::store_relaxed_system(control_ + calls_word, epoch_);
  }

#if RCCLX_CHECKS
  // Checked mode: did the previous call on these slots leave its call counter where it was (a block
  // that skipped finish())? Its flags would then pass this call's waits; the answer yes is recorded
  // (misuse::missing_finish). launch_word holds the launch and the call (low 15 and 16 bits) of the
  // last object constructed there, and bit 31 once the answer was yes: the first thread of a new
  // launch to see the word finds the previous launch with this same call number (yes) or the one
  // before (no) and leaves the answer for the rest of its launch, which may construct objects of
  // the call any number of times. Every thread gets the same answer. Unknown launches pass.
  // With the checked mode's look at the previous call (fused/detail/tile_exchange.hpp): a thread
  // about to decide for a new launch whose previous call did finish first runs on_new_launch() (at
  // most once; true: it recorded a problem), and a yes from it is the launch's answer too, so every
  // block of the launch refuses; the thread that decided then runs on_decided() (e.g. notes this
  // call for the next call's look). An object constructed after the call counter advanced within
  // its own launch (a finish() count smaller than the blocks that call it, a block counted twice, or
  // a second call in one kernel) runs on_late() and gets yes.
  // In two steps, so that the compare-and-swap's round trip overlaps the caller's work until the
  // answer is needed: launch_start() decides at once or issues the exchange (launch_try), and
  // launch_verdict() looks at it (launch_settle: and tries again from what it found).
  struct launch_step {
    std::uint32_t prev = 0, want = 0, got = 0;
    int found = -1;     // on_new_launch's answer, once asked
    bool bad = false;   // a new launch with the call number of the previous one
    int answer = -1;    // decided without an exchange: 1 yes, 0 no; -1: look at `got`
  };
  template <class OnNewLaunch, class OnLate>
  RCCLX_HOST_DEVICE launch_step launch_try(std::uint32_t prev, int found, OnNewLaunch&& on_new_launch,
                                           OnLate&& on_late) const {
    launch_step st;
    st.prev = prev;
    st.found = found;
    const std::uint32_t launch = gpu::launch_id() & 0x7FFFu;
    constexpr std::uint32_t yes = 0x80000000u;
    const bool same_call = (prev & 0xFFFFu) == (epoch_ & 0xFFFFu);
    if (launch == 0) {
      st.answer = 0;
    } else if (same_call && ((prev >> 16) & 0x7FFFu) == launch) {
      st.answer = (prev & yes) != 0 ? 1 : 0;  // this launch decided
    } else if (((prev >> 16) & 0x7FFFu) == launch && (prev & 0xFFFFu) == ((epoch_ - 1u) & 0xFFFFu)) {
      on_late();  // this launch's previous call ended while this launch runs
      st.answer = 1;
    } else {
      st.bad = same_call;
      if (!st.bad && st.found < 0) st.found = on_new_launch() ? 1 : 0;
      st.want = ((launch << 16) | (epoch_ & 0xFFFFu)) | (st.bad || st.found > 0 ? yes : 0u);
      st.got = gpu::compare_exchange_local(control_ + launch_word, prev, st.want);
    }
    return st;
  }
  // The two steps kept in this object (one launch verdict per call): launch_start() issues, true
  // from launch_pending() until launch_verdict() (same callbacks) gave the answer.
  template <class OnNewLaunch, class OnLate>
  RCCLX_HOST_DEVICE void launch_start(OnNewLaunch&& on_new_launch, OnLate&& on_late) const {
    launch_ = launch_try(launch_seen_, -1, on_new_launch, on_late);
    launch_pending_ = true;
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool launch_pending() const { return launch_pending_; }
  // Is launch_start()'s answer known without its exchange, or a refusal whatever the exchange finds
  // (launch_verdict() then has nothing to wait for)?
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool launch_known() const {
    return launch_.answer >= 0 || launch_.bad || launch_.found > 0;
  }
  template <class OnNewLaunch, class OnDecided, class OnLate>
  RCCLX_HOST_DEVICE bool launch_verdict(OnNewLaunch&& on_new_launch, OnDecided&& on_decided, OnLate&& on_late) const {
    launch_pending_ = false;
    return launch_settle(launch_, on_new_launch, on_decided, on_late);
  }
  template <class OnNewLaunch, class OnDecided, class OnLate>
  RCCLX_HOST_DEVICE bool launch_settle(launch_step st, OnNewLaunch&& on_new_launch, OnDecided&& on_decided,
                                       OnLate&& on_late) const {
    for (;;) {
      if (st.answer >= 0) return st.answer != 0;
      if (st.got == st.prev) {
        if (RCCLX_UNLIKELY(st.bad))
          record_error(*s_, errc::invalid_argument, s_->rank, static_cast<std::uint32_t>(misuse::missing_finish),
                       slots_.first, 0u, epoch_, 0u);
        else
          on_decided();
        return st.bad || st.found > 0;
      }
      st = launch_try(st.got, st.found, on_new_launch, on_late);
    }
  }
#endif

 private:
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int slot_of(int tile) const { return slots_.first + 1 + tile; }

  const signal_pads<MaxRanks>* s_;
  std::uint32_t* control_;  // this rank's control row: its address computed once (pad layout arithmetic)
  tile_slots slots_;
  std::uint32_t epoch_ = 0;           // this call's flag value: the call counter + 1
  std::uint32_t arrived_before_ = 0;  // blocks finished before this call
#if RCCLX_CHECKS
  std::uint32_t launch_seen_ = 0;  // launch_word as the constructor read it (launch_start)
  mutable launch_step launch_{};   // launch_start()'s step, settled by launch_verdict()
  mutable bool launch_pending_ = false;
  mutable std::ptrdiff_t packet_off_ = -1;  // packet_of's offset from an owner's flags (-1: not computed)
#endif
};

}  // namespace core
RCCLX_NAMESPACE_END
