// rcclx/fused/detail/tile_exchange.hpp: one call of a tile-level collective over a peer table: the
// buffer halves, which rank reduces a tile (flat, tree, automatic), and the tile flags
// (core::tile_flags) raised and awaited around it. fused::tile_allreduce (sums of T) and
// fused::combine (folds of records) are this exchange plus their arithmetic; the publish and wait
// members below are part of their public API.
// Buffers: each call uses one half of every symmetric buffer, alternating by the parity of the tile
// flags' call counter (core/tile_flags.hpp). The flags of call k+1 prove the peers finished call k,
// so when call k+2 overwrites call k's half nobody reads it any more: no end barrier, and the tile
// count and size may change from call to call. A half holds every tile's input and, for tree, the
// owners' results. Flags: tile t's flag goes to every rank that reduces it (flat: all; tree: its
// owner), this rank included only under tile_reducer::any_block; tree owners raise a result flag on
// every other rank. Checked mode (RCCLX_CHECKS): detail/call_checks.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../../core/call_check.hpp"
#include "../../core/error.hpp"
#include "../../core/ops.hpp"
#include "../../core/peer_table.hpp"
#include "../../core/region.hpp"
#include "../../core/slot_ranges.hpp"
#include "../../core/tile_audit.hpp"
#include "../../core/tile_flags.hpp"
#include "../../dda/select.hpp"
#include "../../gpu/group.hpp"
#include "../../gpu/memory.hpp"
#include "../../kernel/reduce.hpp"
#include "call_checks.hpp"
#include "input_hash.hpp"
#include "../stage_check.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {

// The pad slots of a tile-level collective and the pad size for them (core/slot_ranges.hpp): the
// pads' owner hands ranges out (emulated_world::reserve_tile_slots, communicator::reserve_tile_slots).
using core::pad_blocks_for;
using core::tile_slots;

namespace detail {
inline constexpr int all_peers = RCCLX_DETAIL_PEER_BATCH;  // reduce's default PeersInFlight

// T: the element type of the inputs (16-byte vectors of it); ReduceOp names the call in the
// checked mode's fingerprint.
template <class T, int MaxRanks, algorithm Algo, class ReduceOp>
class tile_exchange {
  static_assert(Algo == algorithm::flat || Algo == algorithm::tree || Algo == algorithm::automatic,
                "rcclx::fused: Algo must be algorithm::flat, tree or automatic");

 public:
  using value_type = T;
  static constexpr int vec_elems = gpu::elems_per_vec16<T>;
  static constexpr algorithm algo = Algo;  // as given; resolved() says what a call runs

  // Bytes each symmetric buffer needs: two halves, each with every tile's input (num_tiles x
  // tile_elems elements) and, for tree, results_bytes of published results (default: one tile of
  // T per tile).
  RCCLX_HOST_DEVICE static constexpr std::size_t workspace_bytes(std::size_t tile_elems, int num_tiles,
                                                                 std::size_t results_bytes = detail::default_results) {
    return 2 * half_need(tile_elems, num_tiles, results_bytes);
  }

  // Host-side checks of a call (throws rcclx::error naming the argument and the limit). Without
  // RCCLX_CHECKS the device API trusts its arguments; with it the constructors check the same (and
  // the region) on the device. This is what a launcher should call first.
  static void check(const char* who, const core::peer_table<T, MaxRanks>& t, tile_slots slots, std::size_t tile_elems,
                    int num_tiles, std::size_t results_bytes = detail::default_results) {
    detail::check_tile_call(who, t, slots, tile_elems, num_tiles, vec_elems,
                            workspace_bytes(tile_elems, num_tiles, results_bytes), half_bytes(t.capacity_bytes),
                            Algo == algorithm::tree);
  }

  // This rank's view `t` (kept by reference: it must outlive the object, e.g. a kernel argument or
  // a table in device memory). Reads the call counter: construct once per block per call.
  // Checked mode (RCCLX_CHECKS): the arguments are checked as check() does, against
  // core::whole_buffer(t.capacity_bytes, slots) (results_bytes: the tree results the caller lays out);
  // a problem is recorded and the call refused (bad_) before it touches a flag or a buffer.
  RCCLX_HOST_DEVICE tile_exchange(const core::peer_table<T, MaxRanks>& t, tile_slots slots, std::size_t tile_elems,
                                  int num_tiles, tile_reducer reducer = tile_reducer::same_block,
                                  std::size_t results_bytes = detail::default_results)
      : tile_exchange(t, core::whole_buffer(t.capacity_bytes, slots), tile_elems, num_tiles, reducer, results_bytes) {}

  // The call in region `r` (core/region.hpp): its bytes [r.offset, r.offset + r.bytes) of every
  // rank's buffer, in two halves, and its pad slots r.slots (the constructor above: the whole buffer).
  RCCLX_HOST_DEVICE tile_exchange(const core::peer_table<T, MaxRanks>& t, const core::region& r, std::size_t tile_elems,
                                  int num_tiles, tile_reducer reducer = tile_reducer::same_block,
                                  std::size_t results_bytes = detail::default_results)
      : t_(&t), rank_(t.signals.rank), num_ranks_(t.signals.num_ranks), max_blocks_(t.signals.max_blocks),
        own_(t.data[t.signals.rank]), capacity_(t.capacity_bytes),
#if RCCLX_CHECKS
        flags_(t.signals, detail::slots_in_pads(max_blocks_, r.slots),
               [&] { probe_load(t, detail::slots_in_pads(max_blocks_, r.slots)); }),
#else
        flags_(t.signals, r.slots),
#endif
        tile_elems_(tile_elems), num_tiles_(num_tiles), any_block_(reducer == tile_reducer::any_block) {
    base_ = r.offset + ((flags_.calls() & 1u) ? half_bytes(r.bytes) : 0);
    results_ = detail::round16(static_cast<std::size_t>(num_tiles) * tile_elems * sizeof(T));
    if constexpr (Algo == algorithm::automatic) tree_ = choose_tree(num_ranks_, tile_elems, num_tiles);
#if RCCLX_CHECKS
    check_call(r, results_bytes);
#else
    (void)results_bytes;
#endif
  }

#if RCCLX_CHECKS
  // Checked mode, for a collective built on this exchange that names its own arguments
  // (fused::combine: records, not words): the call's fingerprint with collective `c`, type and op
  // identities, count and shape replaced (the algorithm and the region's digest kept). Before any
  // publish.
  RCCLX_HOST_DEVICE void describe_as(core::checked_collective c, std::uint32_t type, std::uint32_t op, std::size_t count,
                                     std::size_t shape) {
    const core::call_fingerprint f = fp();
    fp_ = core::fingerprint_words(c, type, op, f.w[0] & 0xFFu, count, f.w[2] & 0xFFFFu, shape);
  }
#endif

  // For a kernel whose only writes after its publishes are its epilogues' stages, each checked
  // against the call's region (fused/stage_check.hpp), e.g. the library's own fused kernels: the
  // checked mode's input hashes (a store into a published input while peers may read it) have
  // nothing to find there and are not taken. Before the first publish; nothing without RCCLX_CHECKS.
  RCCLX_HOST_DEVICE void inputs_written_by_stages_only() {
#if RCCLX_CHECKS
    hash_inputs_ = false;
#endif
  }

  // What a call of up to max_tiles tiles of tile_elems elements needs of a region (core/region.hpp):
  // workspace_bytes of Algo (automatic: the tree formula, which covers either choice).
  RCCLX_HOST_DEVICE static constexpr core::region_need need(std::size_t tile_elems, int max_tiles,
                                                            std::size_t results_bytes = detail::default_results) {
    return core::region_need{workspace_bytes(tile_elems, max_tiles, results_bytes), max_tiles,
                             Algo == algorithm::flat   ? core::sized_for_flat
                             : Algo == algorithm::tree ? core::sized_for_tree
                                                       : core::sized_for_any};
  }

  // The algorithm this call runs: Algo, or for automatic the built-in table's choice for the whole
  // message (num_tiles x tile_elems elements) on this build's architecture (dda/select.hpp).
  RCCLX_HOST_DEVICE algorithm resolved() const { return is_tree() ? algorithm::tree : algorithm::flat; }

  RCCLX_HOST_DEVICE int num_tiles() const { return num_tiles_; }
  RCCLX_HOST_DEVICE std::size_t tile_elems() const { return tile_elems_; }
  RCCLX_HOST_DEVICE int rank() const { return rank_; }
  RCCLX_HOST_DEVICE int num_ranks() const { return num_ranks_; }

  // The rank that reduces `tile`: tree: the owner of its chunk; flat: every rank (this one).
  RCCLX_HOST_DEVICE int owner(int tile) const {
    if constexpr (Algo == algorithm::flat) {
      return rank();
    } else {
      if (!is_tree()) return rank();
      return tile / tiles_per_owner();
    }
  }
  RCCLX_HOST_DEVICE bool owns(int tile) const { return owner(tile) == rank(); }

  // Where this rank writes its contribution to `tile` (tile_elems elements, 16-byte aligned).
  // Checked mode: a call whose arguments or region were refused in the constructor gives, for a
  // tile that would lie outside this rank's buffer, the buffer's start, so that a kernel that writes
  // its tiles anyway (before it sees the refusal) stays inside the allocation where one tile fits it.
  RCCLX_HOST_DEVICE T* input(int tile) const {
    T* const in =
        reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(own_) + base_) + static_cast<std::size_t>(tile) * tile_elems_;
#if RCCLX_CHECKS
    if (RCCLX_UNLIKELY(bad_)) {
      const auto lo = reinterpret_cast<std::uintptr_t>(own_), p = reinterpret_cast<std::uintptr_t>(in);
      if (p < lo || p - lo > capacity_ || capacity_ - (p - lo) < tile_elems_ * sizeof(T)) return own_;
    }
#endif
    return in;
  }

  // Tree: this call's result area of `rank` (results_bytes bytes, 16-byte aligned). The generic
  // reduce() keeps tile t's T result at offset t * tile_elems * sizeof(T); a kernel with its own
  // payload (reduce_owned + publish_result) lays it out as it likes.
  RCCLX_HOST_DEVICE unsigned char* results(int r) const {
    return reinterpret_cast<unsigned char*>(t_->data[r]) + base_ + results_;
  }

  // Group-collective, after the whole group wrote input(tile): raises the tile's flag for the
  // ranks that read it (flat: all; tree: the owner), this one included under any_block.
  template <class Group>
  RCCLX_HOST_DEVICE void publish(const Group& g, int tile) const {
    publish_part(g, tile, tile);
  }

  // Group-collective, after the whole group wrote input(slot), one part of `tile` (see reduce_parts):
  // raises the slot's flag for the ranks that reduce `tile` (flat: all; tree: tile's owner, which
  // sums all of its parts). With slot == tile it is publish(g, tile).
  template <class Group>
  RCCLX_HOST_DEVICE void publish_part(const Group& g, int slot, int tile) const {
#if RCCLX_CHECKS
    if (bad() || !tile_in_range(g, slot)) return;
    if (!publish_allowed(g)) return;  // the group sync below, with the audit thread's verdict
    first_hash_pass(g, slot, 1, 1, true);
#else
    g.sync();  // the group's writes of the slot happen before the release below
#endif
    for (int p = g.thread_rank(); p < num_ranks(); p += g.size()) announce(slot, tile, p);
#if RCCLX_CHECKS
    first_hash_pass(g, slot, 1, 1, false);
    published(g, slot, 1, 1);
#endif
  }

  // Group-collective: publish(g, t) for every tile t = first, first + step, ... below num_tiles(),
  // after the group wrote all of them: one group sync, and every (tile, peer) flag stored by its own
  // thread at once instead of one tile after another.
  template <class Group>
  RCCLX_HOST_DEVICE void publish_strided(const Group& g, int first, int step) const {
    const int n = num_ranks();
#if RCCLX_CHECKS
    if (bad() || !step_positive(g, first, step)) return;
#endif
    const int count = strided_count(first, step);
#if RCCLX_CHECKS
    if (count > 0 && !tile_in_range(g, first)) return;
    if (!publish_allowed(g)) return;
    first_hash_pass(g, first, step, count, true);
#else
    g.sync();
#endif
    for (int i = g.thread_rank(); i < count * n; i += g.size()) {
      const int tile = first + (i / n) * step;
      announce(tile, tile, i % n);
    }
#if RCCLX_CHECKS
    first_hash_pass(g, first, step, count, false);
    published(g, first, step, count);
#endif
  }

  // Group-collective: waits until every rank published `tile` (flat, or tree on the owner).
  // False if a wait expired (the error is recorded): leave without touching peer memory.
  // Checked mode: also `map_fp` (a tile map's, from ranks below map_below) in the call check's round trip.
  template <class Group>
  RCCLX_HOST_DEVICE bool wait_inputs(const Group& g, int tile, const core::call_fingerprint* map_fp = nullptr,
                                     int map_below = 0) const {
#if RCCLX_CHECKS
    if (bad() || !tile_in_range(g, tile)) return false;
#endif
    bool failed = false;
#if RCCLX_CHECKS
    // The audit thread (the group's last: no flag of its own to wait for when the group has more
    // threads than there are ranks) looks at the publish marks while the others wait. Under
    // same_block the mark says already whether this block published the tile: a misuse whatever
    // the peers do, named before the waits (whose spins end at the record), since a block that
    // reduces before it publishes may wait for peers that wait for it.
    const bool auditor = g.thread_rank() == audit_thread(g);
    audit_pre pre{};
    if (auditor) {
      pre = audit_load(tile, true);  // issued first: its round trip rides the step's
      failed = audit_step();
      if (!failed) failed = !audit_settle();  // a second publisher (the thread that marked)
      if (!failed) failed = !audit_mark_ok(tile, pre);
    }
#endif
    for (int p = g.thread_rank(); p < num_ranks_ && !failed; p += g.size()) {
      if (!flags_between(rank_, p)) continue;
      failed = !flags_.wait(tile, p, tile);
    }
#if RCCLX_CHECKS
    // The check lanes, beside the flag waits: the published tile's first hash pass, then the
    // peers' check packets (the call's fingerprint, `map_fp` of ranks below map_below).
    const detail::hash_lanes l = lanes(g);
    if (l.in()) {
      held_hash_.hash_out(l);
      if (!failed) failed = !flags_.verify_packets(l.lane, l.lanes, tile, &fp(), map_fp, map_below);
    }
    if (!failed) failed = refused();  // the audit thread's answers (audit_step), before any output
    if (!failed && auditor) failed = !audit_reduce(tile, pre);
#else
    (void)map_fp, (void)map_below;
#endif
    return voted(g, failed);
  }

  // Group-collective: wait_inputs for every tile t = first, first + step, ... below num_tiles() at
  // once (each thread polls the flags of other (tile, peer) pairs), e.g. before reducing a block's
  // grid-stride tiles: one flag latency instead of one per tile. Flat, or tree where this rank owns
  // the tiles (tiles it does not own are skipped).
  template <class Group>
  RCCLX_HOST_DEVICE bool wait_inputs_strided(const Group& g, int first, int step) const {
    const int n = num_ranks_;
#if RCCLX_CHECKS
    if (bad() || !step_positive(g, first, step)) return false;
#endif
    const int count = strided_count(first, step);
#if RCCLX_CHECKS
    if (count > 0 && !tile_in_range(g, first)) return false;
    const int mine = audit_thread(g) - g.thread_rank();  // this thread's first tile's audit words, loaded before the waits
    const audit_pre pre = mine < count ? audit_load(first + mine * step, mine == 0) : audit_pre{};
#endif
    bool failed = false;
#if RCCLX_CHECKS
    failed = !audit_settle();  // a second publisher, named before any wait
    if (!failed && g.thread_rank() == audit_thread(g)) failed = audit_step();
#endif
    for (int i = g.thread_rank(); i < count * n && !failed; i += g.size()) {
      const int tile = first + (i / n) * step, p = i % n;
      if (!flags_between(rank_, p) || owner(tile) != rank_) continue;
      failed = !flags_.wait(tile, p, tile);
    }
#if RCCLX_CHECKS
    if (!failed) failed = refused();
    for (int i = mine; i < count && !failed; i += g.size()) {
      const int tile = first + i * step;
      if (owner(tile) != rank_) continue;
      const audit_pre q = i == mine ? pre : audit_load(tile, false);
      failed = !audit_mark_ok(tile, q) || !audit_reduce(tile, q);
    }
#endif
    return voted(g, failed || !call_agrees(g, first));
  }

  // Tree, group-collective on the owner after the whole group wrote the tile's result: raises the
  // result flag on every other rank.
  template <class Group>
  RCCLX_HOST_DEVICE void publish_result(const Group& g, int tile) const {
#if RCCLX_CHECKS
    if (bad() || !tile_in_range(g, tile)) return;
#endif
    g.sync();
    for (int p = g.thread_rank(); p < num_ranks_; p += g.size()) {
      if (p == rank_) continue;
      flags_.raise(tile, p);
    }
  }

  // Tree, group-collective: waits for the owner's result of `tile` (returns true at once on the owner).
  template <class Group>
  RCCLX_HOST_DEVICE bool wait_result(const Group& g, int tile) const {
#if RCCLX_CHECKS
    if (bad() || !tile_in_range(g, tile)) return false;
#endif
    const int o = owner(tile);
    bool failed = false;
#if RCCLX_CHECKS
    if (g.thread_rank() == audit_thread(g)) failed = audit_step();  // before any wait: its records come first
#endif
    if (o != rank_ && !failed) {
      for (int p = g.thread_rank(); p < num_ranks_; p += g.size()) {
        if (p != o) continue;
        failed = !flags_.wait(tile, o, tile);
      }
    }
    return voted(g, failed || !call_agrees(g, tile));
  }

  // Tree, group-collective: wait_result for every tile t = first, first + step, ... below
  // num_tiles() at once (each thread polls the flags of other tiles), e.g. before copying a block's
  // grid-stride tiles from their owners.
  template <class Group>
  RCCLX_HOST_DEVICE bool wait_results_strided(const Group& g, int first, int step) const {
#if RCCLX_CHECKS
    if (bad() || !step_positive(g, first, step)) return false;
#endif
    const int count = strided_count(first, step);
#if RCCLX_CHECKS
    if (count > 0 && !tile_in_range(g, first)) return false;
#endif
    bool failed = false;
#if RCCLX_CHECKS
    if (g.thread_rank() == audit_thread(g)) failed = audit_step();  // before any wait: its records come first
#endif
    for (int i = g.thread_rank(); i < count && !failed; i += g.size()) {
      const int tile = first + i * step, o = owner(tile);
      if (o == rank_) continue;
      failed = !flags_.wait(tile, o, tile);
    }
    return voted(g, failed || !call_agrees(g, first));
  }

  // Group-collective, at the end of a reduce of the `parts` slots tile, tile + stride, ... (after its
  // epilogue): checked mode, their input hashes' second pass (core/tile_audit.hpp: input_changed);
  // nothing otherwise. The reduces of tile_allreduce and combine call it after a successful reduce.
  // The pass is taken at the group's next input_kept or in finish() (beside its count's round
  // trip): an input changed before then is named as well (peers may read it until they finish).
  template <class Group>
  RCCLX_HOST_DEVICE void input_kept(const Group& g, int tile, int parts = 1, int stride = 0) const {
#if RCCLX_CHECKS
    if (bad() || !hash_inputs_) return;
    if (kept_parts_ > 0) g.sync(), hash_kept(g);  // (a sync: the group's stores, the epilogue's, before the loads)
    kept_tile_ = tile, kept_parts_ = parts, kept_stride_ = stride;
    if (finished_) g.sync(), hash_kept(g);  // after finish(): at once
#else
    (void)g, (void)tile, (void)parts, (void)stride;
#endif
  }

  // Group-collective, every block, once per call: counts the block; the last block of this rank to
  // be counted advances the call counter (the next call uses the other half of the buffers):
  // core::tile_flags::finish, which says where it may come.
  template <class Group>
  RCCLX_HOST_DEVICE void finish(const Group& g, int num_blocks) const {
    if (num_tiles_ <= 0) return;  // an empty call touched nothing: it keeps the half
#if RCCLX_CHECKS
    // A call refused (its arguments, or the missing-finish detector: the audit thread's answer,
    // shared by the group sync finish() makes anyway) counts nothing: its blocks all keep the call
    // number they were refused with (the pads need a reset, as after any error).
    const bool auditor = g.thread_rank() == audit_thread(g);
    if (auditor) (void)audit_launch(true);
    if (RCCLX_UNLIKELY(g.sync_or(refused()))) {
      // Constructed after the call counter advanced in this launch: this block is one more than
      // the count (GPUs name the count against the grid first).
      if (late_ && auditor)
        record(core::misuse::finish_twice, flags_.slots().first, static_cast<std::uint32_t>(num_blocks) + 1u,
               static_cast<std::uint32_t>(num_blocks));
      return;
    }
    // The audit thread counts the block (core::tile_flags::count_arrive); the check lanes take the
    // input hashes' passes still to take and, in block 0, look at the previous call, beside the
    // count's round trip.
    std::uint32_t counted = 0;
    if (auditor) {
      counted = flags_.count_arrive();
      (void)audit_settle();  // a mark no wait looked at
    }
    const detail::hash_lanes l = lanes(g);
    const look_back_step look = look_back_issue(l);
    if (l.in()) held_hash_.hash_out(l);
    hash_kept(g);
    look_back_settle(l, look);
    finished_ = true;
    if (auditor) {
      audit_finish(num_blocks, flags_.arrivals(counted));
      flags_.count_close(counted, num_blocks);
    }
#else
    flags_.finish(g, num_blocks);
#endif
  }

 protected:
  // Tiles first, first + step, ... below num_tiles() (step > 0).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int strided_count(int first, int step) const {
    return first < num_tiles_ ? (num_tiles_ - 1 - first) / step + 1 : 0;
  }

  // Tree: tiles of one owner's chunk (tile t belongs to rank t / tiles_per_owner()).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int tiles_per_owner() const {
    const int n = num_ranks();
    return num_tiles_ > n ? (num_tiles_ + n - 1) / n : 1;
  }

  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool is_tree() const {
    if constexpr (Algo == algorithm::automatic) return tree_;
    else return Algo == algorithm::tree;
  }

  // Group-collective, the end of every wait: true when no thread of the group failed; checked mode,
  // the check lanes hash a published tile's first pass first (its loads landed during the wait).
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool voted(const Group& g, bool failed) const {
#if RCCLX_CHECKS
    const detail::hash_lanes l = lanes(g);
    if (l.in()) held_hash_.hash_out(l);  // a published tile's first hash pass, its loads landed
#endif
    return !g.sync_or(failed);
  }

  // Checked mode: did every peer make this call (count, shape, type, op, algorithm: the check
  // lanes' look at the packets), and the audit thread's refusals (missing finish, region, the
  // reduce's map)? Not group-collective (the callers fold it into their vote). Always true without
  // RCCLX_CHECKS.
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool call_agrees(const Group& g, int tile) const {
#if RCCLX_CHECKS
    if (g.thread_rank() == audit_thread(g) && audit_step()) return false;
    if (refused()) return false;
    const detail::hash_lanes l = lanes(g);
    return !l.in() || flags_.verify_packets(l.lane, l.lanes, tile, &fp(), nullptr, 0);
#else
    (void)g, (void)tile;
    return true;
#endif
  }

#if RCCLX_CHECKS
  // The constructor's loads for its checks, just before the flags' acquire of the call counter,
  // which orders every later load, so that they share its round trip: in every thread the audit rows'
  // address (audit_row_of: a look at the table); in the block's last thread (which starts the call's
  // checks: check_call) the slot range `slots` (as the flags use it: of slot 0 when the range is not
  // inside the pads, a refused call)'s binding words and every rank's buffer pointer (probe_),
  // looked at after the acquire (audit_arguments, audit_overlap).
  RCCLX_HOST_DEVICE void probe_load(const core::peer_table<T, MaxRanks>& t, tile_slots slots) {
    audit_rows_ = core::audit_row(t.signals, slots.first + 1);
    if (!gpu::last_thread_of_block()) return;
    probe_.bound = core::audit_bound_words_at(audit_rows_ - core::audit_row_words, slots.first);
    for (int p = 0; p < MaxRanks; ++p) probe_.data[p] = reinterpret_cast<std::uintptr_t>(t.data[p]);
    probe_.loaded = true;
  }

  // The constructors' checks. Every thread: the arguments' problems that need no load (the tiles,
  // the slot range, the region against the buffer and the resolved algorithm's bytes) refuse the
  // call at once (bad_), unrecorded: every thread knows before it touches a flag or a buffer. The
  // block's last thread starts the audit (audit_launch: the whole check, recorded, and the region's
  // binding), so that the answers have landed by the time the first publish's sync shares them.
  RCCLX_HOST_DEVICE void check_call(const core::region& r, std::size_t results_bytes) {
    region_ = r;
    // results_ (set by the constructors): the inputs' bytes of a half (a call with fewer than 0
    // tiles is refused before they are looked at).
    results_bytes_ = is_tree() ? detail::round16(results_bytes == detail::default_results ? results_ : results_bytes) : 0;
    bad_ = static_cast<bool>(detail::find_call_problem(max_blocks_, capacity_, r, tile_elems_, num_tiles_,
                                                       static_cast<std::size_t>(vec_elems),
                                                       results_ + results_bytes_, half_bytes(r.bytes), is_tree(), nullptr));
    if (gpu::last_thread_of_block()) {
      audit_start();
      (void)audit_launch();
    }
  }

  // The audit thread's look at the arguments (detail::find_call_problem, every rank's buffer pointer
  // included, in the order check() names them), recorded (block: the slot range's first). True: a
  // problem. The constructor's check of every thread (bad_) found those that need no load: with
  // none of them and every buffer pointer sound there is nothing to name, and the whole check (cold
  // code a correct call steps over) runs only to name the first problem in check()'s order.
  RCCLX_HOST_DEVICE bool audit_arguments() const {
    const detail::buffer_masks buffers = RCCLX_LIKELY(probe_.loaded)
                                             ? detail::buffer_masks_of(probe_.data, num_ranks_, region_.offset)
                                             : detail::load_buffer_masks(*t_, region_.offset);
    if (RCCLX_LIKELY(!bad_ && (buffers.null_ranks | buffers.misaligned_ranks) == 0u)) return false;
    const detail::call_problem p = detail::find_call_problem(max_blocks_, capacity_, region_, tile_elems_, num_tiles_,
                                                             static_cast<std::size_t>(vec_elems), results_ + results_bytes_,
                                                             half_bytes(region_.bytes), is_tree(), &buffers);
    if (RCCLX_LIKELY(!p)) return false;
    record(p.what, region_.slots.first, p.a, p.b, p.call);
    return true;
  }

  // Refused so far (the arguments, a step, or a verdict the group shared: the same in every
  // thread of the group)?
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool bad() const { return bad_; }

  // Refused? bad(), or in the audit thread its own refusals (the arguments, the region, the
  // missing-finish detector's answer once audit_launch settled it).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool refused() const { return bad_ || launch_bad_; }
  RCCLX_HOST_DEVICE bool launch_verdict() const {
    // The range was bound by audit_start, which issued the step this settles.
    return flags_.launch_verdict([] { return false; },
                                 [&] { detail::audit_note_call(audit_row_of(0), flags_.slots(), flags_.epoch(), num_tiles_, is_tree()); },
                                 [&] { late_ = true; });
  }

  // The audit thread (and the block's last thread in the constructor), at every step: once per
  // call, checks the arguments (audit_arguments), binds the slot range to the region's bytes
  // (audit_overlap: another range in flight over them refuses the call) and starts the
  // missing-finish detector (core::tile_flags::launch_start: its compare-and-swap), so that their
  // round trips are the audit thread's alone; settles the detector's answer when it is known
  // without the exchange or, with `decide` (before any output: a wait's vote, finish()), waiting
  // for it (issued in the constructor, it has landed by then). True: the call is refused.
  RCCLX_HOST_DEVICE bool audit_launch(bool decide = false) const {
    if (RCCLX_UNLIKELY(!launch_started_)) audit_start();  // started by the constructor unless the group is not the block
    if (flags_.launch_pending() && (decide || flags_.launch_known()) && launch_verdict()) launch_bad_ = true;
    return launch_bad_;
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void audit_start() const {
    launch_started_ = true;
    if (audit_arguments()) launch_bad_ = true;  // bad_ or a rank's buffer pointer
    if (num_tiles_ > 0 && !launch_bad_ && audit_overlap(probe_.bound, probe_.loaded)) launch_bad_ = true;
    if (num_tiles_ > 0 && !launch_bad_)
      flags_.launch_start([] { return false; }, [&] { late_ = true; });  // the range is bound above
  }

  // The audit thread before a wait's vote: audit_launch (decided) and the reduce's map and stages
  // (map_bad_: tile_allreduce::map_fits). True: the call is refused.
  RCCLX_HOST_DEVICE bool audit_step() const { return audit_launch(true) || map_bad_; }

  // Group-collective, the sync before a publish's flags: the audit thread starts the call's
  // checks (audit_launch); a refusal it knows already is shared by the sync and refuses the
  // publish in every thread.
  template <class Group>
  RCCLX_HOST_DEVICE bool publish_allowed(const Group& g) const {
    const bool auditor = g.thread_rank() == audit_thread(g);
    if (g.sync_or(auditor && audit_launch())) return bad_ = true, false;
    return true;
  }

  // The end of a publish of `count` tiles first, first + step, ...: beside the flag threads'
  // release stores, the audit thread writes its check packets (publish_checks) at the call's first
  // publish, and marks the tiles (the i-th tile's by the i-th thread from the audit thread down).
  // After the syncs, not before: no thread waits for them.
  template <class Group>
  RCCLX_HOST_DEVICE void published(const Group& g, int first, int step, int count) const {
    const int i0 = audit_thread(g) - g.thread_rank();
    if (i0 == 0 && count > 0 && !packets_out_) publish_checks(), packets_out_ = true;
    for (int i = i0; i >= 0 && i < count; i += g.size()) audit_publish(first + i * step);
  }

  // The group's check lanes (the input hashes, the peers' check packets): the warps after those
  // whose threads raise or wait for flags (thread ranks below num_ranks) and, when there are two
  // such warps or more, before the last (the audit thread's, whose own steps then run beside
  // theirs); every thread when the group has no such warp. Their loads and exchanges stay out of
  // the flag threads' warps, whose release stores and acquire loads would wait for them.
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE detail::hash_lanes lanes(const Group& g) const {
    constexpr int W = RCCLX_WARP_SIZE;
    const int size = g.size(), n = num_ranks() < size ? num_ranks() : size;
    const int w = (n + W - 1) / W * W;
    if (w >= size) return detail::hash_lanes(g, 0, size);
    return detail::hash_lanes(g, w, size - w >= 2 * W && size % W == 0 ? size - W : size);
  }

  // A thread about to decide for a new launch: binds the call's slot range to this rank's bytes of
  // its region and compares them with every other range bound on this rank (core::audit_bind):
  // region_overlap_slots / region_overlap_bytes. True: refused (recorded here, or by the thread of
  // this launch that decided the range: core::bind_verdict::follows).
  // bound: the range's words as loaded before when `loaded` (otherwise loaded now); this rank's
  // buffer pointer as the constructor read it (own_).
  // The words by reference and a flag, never a pointer chosen at run time: that would keep the whole
  // object in local memory (tests/compile's ptxas check).
  RCCLX_HOST_DEVICE bool audit_overlap(const core::bound_words& bound, bool loaded) const {
    const core::signal_pads<MaxRanks>& s = t_->signals;
    const auto lo = reinterpret_cast<std::uintptr_t>(own_) + region_.offset;
    const core::bind_verdict v = loaded ? core::audit_bind(s, flags_.slots(), lo, lo + region_.bytes, bound)
                                        : core::audit_bind(s, flags_.slots(), lo, lo + region_.bytes);
    if (RCCLX_LIKELY(!v.refused())) return false;
    if (!v.follows) record(v.what, flags_.slots().first, v.other, v.mine);  // a follower's decider records
    return true;
  }

  // The stage_context of this call on `map` (fused/stage_check.hpp): a stage may not write this
  // rank's bytes of the region but the call's own results area (tree: the owner's published results).
  template <class Map>
  RCCLX_HOST_DEVICE stage_context stage_context_for(const Map& map) const {
    const unsigned char* lo = reinterpret_cast<const unsigned char*>(own_) + region_.offset;
    return detail::call_stage_context<T>(map, lo, lo + region_.bytes, results(rank()), is_tree() ? results_bytes_ : 0);
  }

  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void record(core::misuse m, int block, std::uint32_t a, std::uint32_t b, std::uint32_t call = 0) const {
    core::record_error(t_->signals, errc::invalid_argument, t_->signals.rank, static_cast<std::uint32_t>(m), block, call, a, b);
  }

  // Group-uniform: is `tile` one of the call's (otherwise recorded: tile_out_of_range)?
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool tile_in_range(const Group& g, int tile) const {
    if (RCCLX_LIKELY(tile >= 0 && tile < num_tiles_)) return true;
    if (g.thread_rank() == 0)
      record(core::misuse::tile_out_of_range, tile, static_cast<std::uint32_t>(tile), static_cast<std::uint32_t>(num_tiles_));
    return false;
  }

  // Group-uniform: is a strided publish or wait's step positive (otherwise recorded: arg_step)?
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool step_positive(const Group& g, int first, int step) const {
    return RCCLX_LIKELY(step > 0) || refuse_step(g, first, step);
  }

  // Group-uniform: are the `parts` slots tile, tile + stride, ... of a reduce_parts distinct, i.e.
  // not one slot counted as every part (stride 0 with several parts: recorded as arg_step)?
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool parts_distinct(const Group& g, int tile, int parts, int stride) const {
    return parts <= 1 || stride != 0 || refuse_step(g, tile, stride);
  }

  // Records arg_step (the step or stride, the first tile) and stops the call: false.
  template <class Group>
  RCCLX_HOST_DEVICE bool refuse_step(const Group& g, int first, int step) const {
    if (g.thread_rank() == 0)
      record(core::misuse::arg_step, first, static_cast<std::uint32_t>(step), static_cast<std::uint32_t>(first));
    bad_ = true;  // the call's tiles are not known: it stops here
    return false;
  }

  // This rank's audit row of `tile` (core/tile_audit.hpp): the first row's address comes from probe_load.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t* audit_row_of(int tile) const {
    return audit_rows_ + static_cast<std::size_t>(tile) * core::audit_row_words;
  }

  // One of the check lanes `l` (lanes(g), l.in()), with the input hashes taken: xors the hash of this
  // rank's input of `slot` into its input hash word.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void audit_hash(const detail::hash_lanes& l, int slot) const {
    detail::xor_input_hash(l, input(slot), tile_elems_ / vec_elems,
                           audit_row_of(slot) + core::audit_hash_word(flags_.epoch()));
  }

  // Group-collective, in a publish of `count` tiles first, first + step, ... after the sync that
  // ordered the group's writes of them, called before the flags (before_flags) and after: the check
  // lanes' first hash pass of the tiles, then a group sync, so that the pass reads the tiles before
  // any later write of the group (a store into a published input is what the two passes are there
  // to name). One tile of at most held_hash_vecs vectors per lane: before the flags, its loads
  // issued and the hash taken by the group's next wait (or finish, or publish), whose round trip
  // they ride; the flag threads' release stores then wait for the group's earlier writes alone
  // while the others go on (after them, every thread would wait for the release at the sync).
  // Otherwise (a round trip per tile): after the flags, beside their release.
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void first_hash_pass(const Group& g, int first, int step, int count,
                                                           bool before_flags) const {
    if (!hash_inputs_ || count <= 0) return;
    const detail::hash_lanes l = lanes(g);
    const std::size_t vecs = tile_elems_ / vec_elems;
    const bool held = count == 1 && held_hash_.fits(l, vecs);  // the same in every thread of the group
    if (held != before_flags) return;
    if (l.in()) {
      held_hash_.hash_out(l);  // an earlier tile's, still held
      if (held)
        held_hash_.load(l, input(first), vecs, audit_row_of(first) + core::audit_hash_word(flags_.epoch()));
      else
        for (int i = 0; i < count; ++i) audit_hash(l, first + i * step);
    }
    g.sync();
  }

  // The call's fingerprint (core/call_check.hpp), as the peers must see it: made by the threads that
  // need it (the audit thread for its packet, the check lanes for the peers'), once.
  RCCLX_HOST_DEVICE const core::call_fingerprint& fp() const {
    if (!fp_ready_) {
      fp_ = core::fingerprint<T, ReduceOp>(core::checked_collective::tile_allreduce, resolved(),
                                           static_cast<std::size_t>(num_tiles_),
                                           static_cast<int>(core::region_digest(core::region{region_.offset, region_.bytes, tile_slots{0, 0}, 0u, 0u})),
                                           tile_elems_);
      fp_ready_ = true;
    }
    return fp_;
  }

  // The grid's block 0 in finish() (a call not refused): the look at the previous call on the slot
  // range (its kernel ended before this one began) by the first whole warp of the check lanes
  // (detail::previous_call_issue / previous_call_settle: the first batch's loads issued before the
  // hash passes, compared after them, so that their round trips overlap each other's and the
  // count's), or by the first check lane alone where the lanes hold no whole warp
  // (detail::audit_previous_call). width 0: this thread does not look.
  struct look_back_step {
    detail::previous_look p;
    int width = 0;
  };
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE look_back_step look_back_issue(const detail::hash_lanes& l) const {
    constexpr int W = RCCLX_WARP_SIZE;
    look_back_step st;
    if (!l.in() || gpu::block_id() != 0 || num_tiles_ <= 0) return st;
    const bool warp = W > 1 && l.first % W == 0 && l.lanes >= W;
    if (warp ? l.lane >= W : l.lane != 0) return st;
    st.width = warp ? W : 1;
    if (warp) st.p = detail::previous_call_issue(audit_row_of(0), flags_.slots().max_tiles, flags_.epoch(), l.lane);
    return st;
  }
  RCCLX_HOST_DEVICE void look_back_settle(const detail::hash_lanes& l, const look_back_step& st) const {
    if (st.width == 1)
      detail::audit_previous_call(t_->signals, audit_row_of(0), flags_.slots().max_tiles, flags_.epoch());
    else if (st.width > 1)
      detail::previous_call_settle(t_->signals, audit_row_of(0), flags_.slots().max_tiles, flags_.epoch(), l.lane,
                                   st.width, st.p);
  }

  // The audit thread, beside a call's first publish's flags (published): the call's fingerprint
  // packet and, when the kernel declared its tile map, the map's (so that the peers' check lanes
  // find both with the flags or just after them: they look at them as long as at a flag).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void publish_checks() const {
    flags_.publish_check(0, fp());
    if (map_declared_) flags_.publish_check(1, map_fp_);
  }

  // The tile map the call's reduces use, declared before its first publish (tile_allreduce::declare_map).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void declare_map_fp(const core::call_fingerprint& f) {
    map_fp_ = f;
    map_declared_ = true;
  }

  // Group-collective: the second pass of the tiles input_kept left (after a group sync; the check
  // lanes hash, every thread forgets them).
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void hash_kept(const Group& g) const {
    const detail::hash_lanes l = lanes(g);
    if (l.in() && hash_inputs_)
      for (int q = 0; q < kept_parts_; ++q) audit_hash(l, kept_tile_ + q * kept_stride_);
    kept_parts_ = 0;
  }

  // The thread that marks a block's first published tile and audits its first reduced one (the
  // i-th: audit_thread(g) - i, modulo the group): the group's last, which raises no flag and waits
  // for none when the group has more threads than there are ranks, so that the exchange's round
  // trip runs beside the flags' instead of after them.
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE static int audit_thread(const Group& g) { return g.size() - 1; }

  // One thread, after the flags of `tile` went up: this block's publish mark; a mark of this call
  // already there is a second publisher (published_twice: another block, or another rank's blocks
  // on this rank's table). The old mark is looked at later (audit_settle: the thread's next
  // publish, reduce or finish), so that the exchange's round trip does not hold the thread up.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void audit_publish(int tile) const {
    (void)audit_settle();
    pending_mark_ = gpu::exchange_local(audit_row_of(tile) + core::audit_mark_word(flags_.epoch()),
                                        core::audit_mark(flags_.epoch(), gpu::block_id()));
    pending_tile_ = tile;
  }
  // The old mark of this thread's last publish: false (and recorded) if another publisher of the
  // call had marked the tile.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool audit_settle() const {
    if (pending_tile_ < 0) return true;
    const int tile = pending_tile_;
    pending_tile_ = -1;
    if (RCCLX_LIKELY(!core::audit_mark_of(pending_mark_, flags_.epoch()))) return true;
    record(core::misuse::published_twice, tile, pending_mark_ & 0xFFFFu,
           static_cast<std::uint32_t>(gpu::block_id()) & 0xFFFFu);
    return false;
  }

  // What audit_reduce looks at, loaded by its thread before the flag waits so that the loads'
  // latency hides behind them: the tile's publish mark (same_block: this block's, stored by this
  // thread when it published) and, with_error, this rank's error record's code.
  struct audit_pre { std::uint32_t mark = 0, error = 0; };
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE audit_pre audit_load(int tile, bool with_error) const {
    audit_pre p;
    if (!any_block_) p.mark = gpu::load_relaxed_system(audit_row_of(tile) + core::audit_mark_word(flags_.epoch()));
    if (with_error) p.error = gpu::load_relaxed_system(&t_->signals.err->code);
    return p;
  }

  // One thread, after the waits for `tile`'s inputs (and audit_mark_ok) and before any output: the
  // tile is marked consumed; false when a second publisher was found or this rank had recorded an
  // error (a misuse found by another block or another call: every block refuses from then on).
  RCCLX_HOST_DEVICE bool audit_reduce(int tile, const audit_pre& p) const {
    if (!audit_settle()) return false;
    gpu::store_relaxed_system(audit_row_of(tile) + core::audit_consumed_word(flags_.epoch()), flags_.epoch());
    return p.error == 0u;
  }
  // Under same_block: did this block publish `tile` in this call (p.mark)? Otherwise recorded
  // (reduced_before_publish, reducer_not_publisher).
  RCCLX_HOST_DEVICE bool audit_mark_ok(int tile, const audit_pre& p) const {
    if (any_block_) return true;
    const detail::call_problem v = detail::reducer_mark_problem(p.mark, flags_.epoch(), tile, gpu::block_id());
    if (RCCLX_UNLIKELY(static_cast<bool>(v))) return record(v.what, tile, v.a, v.b), false;
    return true;
  }

  // The audit thread of each block in finish(), after counting the block (arrivals: this call's
  // blocks counted so far, this one included): the count against the grid where it is known
  // (finish_count) and against the call (finish_twice).
  RCCLX_HOST_DEVICE void audit_finish(int num_blocks, std::uint32_t arrivals) const {
    (void)audit_settle();
    const int grid = gpu::grid_blocks();
    const int first = flags_.slots().first;
    if (RCCLX_UNLIKELY(grid > 0 && num_blocks != grid))
      record(core::misuse::finish_count, first, static_cast<std::uint32_t>(num_blocks), static_cast<std::uint32_t>(grid));
    else if (RCCLX_UNLIKELY(arrivals > static_cast<std::uint32_t>(num_blocks)))
      record(core::misuse::finish_twice, first, arrivals, static_cast<std::uint32_t>(num_blocks));
  }
#endif

  // Do input flags pass between ranks a and b? Between two ranks always; from a rank to itself only
  // under any_block (with same_block the block that wrote a tile is the one that reduces it).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool flags_between(int a, int b) const { return a != b || any_block_; }

  // The flag of `slot` (holding `tile`, or a part of it) for rank p: raised when p reduces the tile
  // (flat: every rank; tree: the tile's owner), and when p is this rank only under any_block
  // (otherwise the reducing block is the one that wrote the tile).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void announce(int slot, int tile, int p) const {
    if (!flags_between(rank_, p)) return;
    if (!is_tree() || p == owner(tile)) flags_.raise(slot, p);
  }

  // automatic: tree for the whole message? (dda::select_algorithm: the same choice on every rank:
  // same tiles, same build)
  RCCLX_HOST_DEVICE static bool choose_tree(int num_ranks, std::size_t tile_elems, int num_tiles) {
    if constexpr (Algo == algorithm::automatic)
      return dda::select_algorithm(static_cast<std::size_t>(num_tiles) * tile_elems * sizeof(T), num_ranks,
                                   gpu::build_arch) == algorithm::tree;
    else
      return Algo == algorithm::tree;
  }

  RCCLX_HOST_DEVICE static constexpr std::size_t half_need(std::size_t tile_elems, int num_tiles,
                                                           std::size_t results_bytes) {
    const std::size_t in = detail::round16(static_cast<std::size_t>(num_tiles) * tile_elems * sizeof(T));
    if (Algo == algorithm::flat) return in;
    return in + detail::round16(results_bytes == detail::default_results ? in : results_bytes);
  }

  // Bytes of one half: the halves sit at 0 and half_bytes (16-byte aligned).
  RCCLX_HOST_DEVICE static constexpr std::size_t half_bytes(std::size_t capacity) {
    return (capacity / 2) & ~std::size_t{15};
  }

  const core::peer_table<T, MaxRanks>* t_;
  // The table's scalars the call uses, read before flags_'s acquire of the call counter (which
  // empties the L1 cache on NVIDIA, so that every later look at the table is a round trip to L2).
  int rank_, num_ranks_, max_blocks_;
  T* own_;
  std::size_t capacity_;
#if RCCLX_CHECKS
  detail::call_probe<MaxRanks> probe_{};  // the constructor's checks (probe_load, beside flags_'s read of the counter)
  std::uint32_t* audit_rows_ = nullptr;    // audit_row_of's first row (probe_load)
#endif
  core::tile_flags<MaxRanks> flags_;
  std::size_t tile_elems_;
  int num_tiles_;
  bool any_block_;
  bool tree_ = Algo == algorithm::tree;  // automatic: the constructor's choice
  std::size_t base_ = 0;     // byte offset of this call's half
  std::size_t results_ = 0;  // byte offset of the results inside a half
#if RCCLX_CHECKS
  mutable core::call_fingerprint fp_{};  // this call, as the peers must see it (fp())
  mutable bool fp_ready_ = false;
  mutable bool bad_ = false;     // a misuse was found (and recorded): nothing is published (after it) or reduced
  mutable bool late_ = false, finished_ = false;  // constructed after this launch's call ended; finish() ran
  core::region region_{};                             // the call's region (the whole buffer without one)
  std::size_t results_bytes_ = 0;                      // tree: the results area of a half
  mutable std::uint32_t pending_mark_ = 0;             // this thread's last publish: the mark it replaced
  mutable int pending_tile_ = -1;                      // ... of this tile (-1: none pending)
  mutable int kept_tile_ = 0, kept_parts_ = 0, kept_stride_ = 0;  // input_kept's pass still to take
  static constexpr int held_hash_vecs = 2;
  mutable detail::held_input_hash<held_hash_vecs> held_hash_{};  // a publish's first hash pass, loaded
  core::call_fingerprint map_fp_{};                               // the declared tile map's fingerprint
  bool map_declared_ = false;
  mutable bool launch_started_ = false;  // the audit thread started the missing-finish detector
  mutable bool launch_bad_ = false;      // ... and its answer refuses the call (the audit thread's alone)
  mutable bool packets_out_ = false;     // the audit thread wrote the check packets
  mutable bool map_bad_ = false;         // the audit thread refused a reduce's map or stages (map_fits)
  bool hash_inputs_ = true;              // take the input hashes (inputs_written_by_stages_only: not)
#endif
};

}  // namespace detail
}  // namespace fused
RCCLX_NAMESPACE_END
