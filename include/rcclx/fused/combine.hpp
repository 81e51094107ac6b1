// rcclx/fused/combine.hpp: cross-rank combine for use inside your own kernel: each rank writes a
// tile of records (any trivially copyable struct), raises the tile's flag, and every rank gets the
// combine of all ranks' records, folded in rank order 0..N-1: the same bits on every rank.
//
//   // every block of every rank, same grid, tile t handled by the same block on every rank:
//   rcclx::fused::combine<rcclx::fused::argmax::record, rcclx::fused::argmax, 8> c(table, slots, tile_records,
//                                                                                 num_records);
//   for (int t = blockIdx.x; t < c.num_tiles(); t += gridDim.x) {
//     compute_records(t, c.input(t));             // this rank's records [t * tile_records, ...)
//     c.publish(g, t);                            // flag up for the ranks that read it
//   }
//   for (int t = blockIdx.x; t < c.num_tiles(); t += gridDim.x)
//     if (!c.reduce(g, t, [&](std::size_t i, const auto& r) { out[i] = r; })) break;  // record i of all ranks
//   c.finish(g, gridDim.x);                       // every block, once, even after a failure
//
// A combine (the Combine parameter, e.g. the built-ins of fused/combine_ops.hpp) folds records in
// FP32 (or whatever its accumulator holds):
//   struct my_combine {
//     RCCLX_HOST_DEVICE acc init(const record& r0) const;           // rank 0's record
//     RCCLX_HOST_DEVICE void fold(acc& a, const record& r) const;   // ranks 1, 2, ..., N-1 in order
//     RCCLX_HOST_DEVICE record finalize(const acc& a) const;        // what every rank gets
//   };
// One thread folds one record index over the ranks (the records of a tile are spread over the
// group's threads): a record is the unit of work, so keep it as small as the merge allows (an
// attention head, a row's argmax).
//
// A sliced combine (lse_merge) also splits a record into `slices` independent parts, each folded
// by its own thread: reduce_slices() hands `sink(i, j, slice)` slice j of record i, consecutive
// threads on consecutive slices of a record (16-byte loads side by side), the same bits as reduce():
//   struct my_sliced_combine {                                         // the three above, and
//     static constexpr int slices = ...;                               // parts of a record
//     struct slice { ... };                                            // one part of a record
//     RCCLX_HOST_DEVICE slice load_slice(const record& r, int j) const;            // part j of r
//     RCCLX_HOST_DEVICE void store_slice(record& r, int j, const slice& s) const;  // tree: publish
//     RCCLX_HOST_DEVICE slice_acc init_slice(const slice& s0) const;   // rank 0's part
//     RCCLX_HOST_DEVICE void fold_slice(slice_acc& a, const slice& s) const;
//     RCCLX_HOST_DEVICE slice finalize_slice(const slice_acc& a) const;
//   };
// A thread loads the slice of up to 8 ranks at once (all in flight), then folds them in order.
//
// A selection combine (topk) keeps the first `entries` entries of the ranks' sorted lists:
// reduce_entries() gives every entry of every rank's list a thread, which finds the entry's place
// in the result by counting the entries of the other lists that come before it, and hands
// `sink(i, place, entry)` the entries whose place is below `entries`: each place of each record
// exactly once. With storage the group shares (entries_storage: a block's shared memory), the
// lists are staged there first and searched there (merge_entries); without, searched where they
// are (place_among). The same bits as reduce() when the fold is a rank-order merge that keeps the
// lower rank's entry on a tie (topk::merge):
//   struct my_selection {                                              // the three above, and
//     static constexpr int entries = ...;                              // entries of a record's list
//     struct entry { ... };
//     RCCLX_HOST_DEVICE entry load_entry(const record& r, int p) const;             // entry p of r
//     RCCLX_HOST_DEVICE void store_entry(record& r, int p, const entry& e) const;   // tree: publish
//     RCCLX_HOST_DEVICE static bool before(const entry& a, const entry& b);         // strict order
//     RCCLX_HOST_DEVICE static std::uint64_t key(const entry& e);  // optional: before(a, b) exactly
//   };                                                               // when key(a) > key(b)
// A record's list must be sorted by before() (ties in any order); the result is sorted by (entry,
// rank, position).
//
// Algorithms (Algo), as fused::tile_allreduce (the same exchange: fused/detail/tile_exchange.hpp):
//   flat: every rank folds every tile from all N buffers. Per tile: N-1 flag stores, N-1 polls, N
//         tile reads (N-1 from peers). One step; the decode-size choice.
//   tree: tile t's owner (tiles in N contiguous chunks, chunk c owned by rank c) folds it, writes
//         the finalized records into its own buffer and raises a result flag on every other rank,
//         which reads them from the owner. Per tile: 2(N-1) flag stores, N reads by the owner, 1 by
//         each other rank. Two steps.
//   automatic: flat or tree by the built-in table for the message (num_tiles x tile bytes).
// Flat and tree give the same bits: the owner runs the very fold a flat rank runs and publishes its
// finalized record; the other ranks copy it.
//
// Protocol and rules: those of fused::tile_allreduce (tile flags, core/tile_flags.hpp, in the
// signal-pad slots `slots` handed out by the pads' owner; bounded waits recorded as
// barrier_kind::tile with the missing rank; alternating buffer halves; finish() once per block per
// call). Every rank makes every call with the same tile_records and num_records. The symmetric
// buffer holds workspace_bytes() bytes; the table is the one of tile_allreduce (its layout does not
// depend on the element type; this class reads it as words). In the checked mode (RCCLX_CHECKS) a
// call is fingerprinted as a combine: the record type's size, the Combine (its check_id, or a digest
// of its shape), the record count, records per tile, the algorithm and the region; ranks that
// differ in any of them get errc::mismatch naming the field, before any output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "../core/error.hpp"
#include "../core/peer_table.hpp"
#include "../kernel/reduce.hpp"
#include "detail/tile_exchange.hpp"
#include "merge_entries.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {

namespace detail {
// Words (floats) of one tile of `records` records: whole 16-byte vectors, so every tile starts
// 16-byte aligned.
template <class Record>
RCCLX_HOST_DEVICE constexpr std::size_t combine_tile_words(std::size_t records) {
  return round16(records * sizeof(Record)) / sizeof(float);
}

// Is Combine sliced (combine::reduce_slices)? It declares `slices` and the slice members.
template <class Combine, class = void>
struct is_sliced_combine : std::false_type {};
template <class Combine>
struct is_sliced_combine<Combine, std::void_t<decltype(Combine::slices), typename Combine::slice>>
    : std::true_type {};

// Is Combine a selection (combine::reduce_entries)? It declares `entries` and `entry`.
template <class Combine, class = void>
struct is_selection_combine : std::false_type {};
template <class Combine>
struct is_selection_combine<Combine, std::void_t<decltype(Combine::entries), typename Combine::entry>>
    : std::true_type {};

// The combine op's identity in the checked mode's fingerprint: Combine::check_id where it declares
// one (the built-ins of combine_ops.hpp: 1..4), else a digest in [0x80, 0xFF] of its shape (the
// sizes of the op and its accumulator, its slices or entries): ranks that pass different combines
// of one shape are not told apart.
template <class Combine, class = void>
struct has_check_id : std::false_type {};
template <class Combine>
struct has_check_id<Combine, std::void_t<decltype(Combine::check_id)>> : std::true_type {};
template <class Combine, class Acc>
RCCLX_HOST_DEVICE constexpr std::uint32_t combine_check_id() {
  if constexpr (has_check_id<Combine>::value) {
    return static_cast<std::uint32_t>(Combine::check_id) & 0x7Fu;
  } else {
    std::uint32_t h = static_cast<std::uint32_t>(sizeof(Combine)) * 31u + static_cast<std::uint32_t>(sizeof(Acc)) * 7u;
    if constexpr (is_sliced_combine<Combine>::value) h += static_cast<std::uint32_t>(Combine::slices) * 3u + 1u;
    if constexpr (is_selection_combine<Combine>::value) h += static_cast<std::uint32_t>(Combine::entries) * 5u + 2u;
    return 0x80u | (h & 0x7Fu);
  }
}
}  // namespace detail
template <class Record, class Combine, int MaxRanks = max_ranks, algorithm Algo = algorithm::flat>
class combine {
  static_assert(std::is_trivially_copyable<Record>::value,
                "rcclx::fused::combine: Record must be trivially copyable (it crosses ranks as bytes)");
  static_assert(alignof(Record) <= 16, "rcclx::fused::combine: Record's alignment must be at most 16 bytes");
  static_assert(Algo == algorithm::flat || Algo == algorithm::tree || Algo == algorithm::automatic,
                "rcclx::fused::combine: Algo must be algorithm::flat, tree or automatic");
  using words = detail::tile_exchange<float, MaxRanks, Algo, core::op_sum>;  // the exchange, over the records' bytes

 public:
  using record_type = Record;
  using combine_type = Combine;
  using accumulator_type = decltype(std::declval<const Combine&>().init(std::declval<const Record&>()));
  static_assert(std::is_same<decltype(std::declval<const Combine&>().finalize(std::declval<const accumulator_type&>())),
                             Record>::value,
                "rcclx::fused::combine: Combine::finalize(const acc&) must return the Record");
  static constexpr algorithm algo = Algo;

  // Tiles of a call of num_records records in tiles of tile_records.
  RCCLX_HOST_DEVICE static constexpr int tiles_for(std::size_t tile_records, std::size_t num_records) {
    return tile_records == 0 ? 0 : static_cast<int>((num_records + tile_records - 1) / tile_records);
  }

  // Bytes each symmetric buffer needs (two halves of inputs, and for tree the results).
  RCCLX_HOST_DEVICE static constexpr std::size_t workspace_bytes(std::size_t tile_records, std::size_t num_records) {
    return words::workspace_bytes(detail::combine_tile_words<Record>(tile_records), tiles_for(tile_records, num_records));
  }

  // The algorithm a call of num_records records in tiles of tile_records runs on num_ranks ranks,
  // known on the host before launch (what resolved() says in the kernel): Algo, or for automatic
  // the built-in table's choice for the message (its tiles, each padded to 16-byte vectors).
  RCCLX_HOST_DEVICE static constexpr algorithm resolve(std::size_t tile_records, std::size_t num_records,
                                                      int num_ranks) {
    if (Algo != algorithm::automatic) return Algo;
    const std::size_t tile_bytes = detail::combine_tile_words<Record>(tile_records) * sizeof(float);
    return dda::select_algorithm(static_cast<std::size_t>(tiles_for(tile_records, num_records)) * tile_bytes, num_ranks,
                                 gpu::build_arch);
  }

  // Host-side checks of a call (throws rcclx::error naming the argument and the limit).
  static void check(const char* who, const core::peer_table<Record, MaxRanks>& t, tile_slots slots,
                    std::size_t tile_records, std::size_t num_records) {
    const std::string w(who);
    if (t.num_ranks() < 1 || t.num_ranks() > MaxRanks)
      throw error(errc::invalid_argument, w + ": num_ranks = " + std::to_string(t.num_ranks()) + " is outside [1, " +
                                              std::to_string(MaxRanks) + "] (MaxRanks)");
    if (tile_records == 0)
      throw error(errc::invalid_argument, w + ": tile_records must be positive");
    if ((num_records + tile_records - 1) / tile_records > static_cast<std::size_t>(slots.max_tiles))
      throw error(errc::invalid_argument, w + ": num_records = " + std::to_string(num_records) + " in tiles of " +
                                              std::to_string(tile_records) + " records is more than " +
                                              std::to_string(slots.max_tiles) + " tiles (tile_slots.max_tiles)");
    words::check(who, t.template as<float>(), slots, detail::combine_tile_words<Record>(tile_records),
                 tiles_for(tile_records, num_records));
  }

  // This rank's view `t` (kept by reference: it must outlive the object). Reads the call counter:
  // construct once per block per call.
  RCCLX_HOST_DEVICE combine(const core::peer_table<Record, MaxRanks>& t, tile_slots slots, std::size_t tile_records,
                            std::size_t num_records, tile_reducer reducer = tile_reducer::same_block,
                            const Combine& op = Combine{})
      : w_(as_words(t), slots, detail::combine_tile_words<Record>(tile_records), tiles_for(tile_records, num_records),
           reducer),
        t_(&as_words(t)), tile_records_(tile_records), num_records_(num_records), op_(op) {
    describe_call();
  }

  // The call in region `r` of the buffers and pads (core/region.hpp), sized by need().
  RCCLX_HOST_DEVICE combine(const core::peer_table<Record, MaxRanks>& t, const core::region& r, std::size_t tile_records,
                            std::size_t num_records, tile_reducer reducer = tile_reducer::same_block,
                            const Combine& op = Combine{})
      : w_(as_words(t), r, detail::combine_tile_words<Record>(tile_records), tiles_for(tile_records, num_records),
           reducer),
        t_(&as_words(t)), tile_records_(tile_records), num_records_(num_records), op_(op) {
    describe_call();
  }

  // What a call of up to max_records records in tiles of tile_records needs of its region:
  // workspace_bytes of Algo (automatic: the tree formula), with tiles_for(...) pad slots.
  RCCLX_HOST_DEVICE static constexpr core::region_need need(std::size_t tile_records, std::size_t max_records) {
    return words::need(detail::combine_tile_words<Record>(tile_records), tiles_for(tile_records, max_records));
  }

  RCCLX_HOST_DEVICE algorithm resolved() const { return w_.resolved(); }
  RCCLX_HOST_DEVICE int num_tiles() const { return w_.num_tiles(); }
  RCCLX_HOST_DEVICE std::size_t tile_records() const { return tile_records_; }
  RCCLX_HOST_DEVICE std::size_t num_records() const { return num_records_; }
  RCCLX_HOST_DEVICE int rank() const { return w_.rank(); }
  RCCLX_HOST_DEVICE int num_ranks() const { return w_.num_ranks(); }
  RCCLX_HOST_DEVICE int owner(int tile) const { return w_.owner(tile); }
  RCCLX_HOST_DEVICE bool owns(int tile) const { return w_.owns(tile); }

  // Records of `tile` (the last tile may be short).
  RCCLX_HOST_DEVICE std::size_t records_in(int tile) const {
    const std::size_t first = static_cast<std::size_t>(tile) * tile_records_;
    return first >= num_records_ ? 0 : (num_records_ - first < tile_records_ ? num_records_ - first : tile_records_);
  }

  // Where this rank writes its records of `tile`: records_in(tile) records, 16-byte aligned. Record
  // i of the tile is record tile * tile_records + i of the call.
  RCCLX_HOST_DEVICE Record* input(int tile) const { return reinterpret_cast<Record*>(w_.input(tile)); }

  // Group-collective, after the whole group wrote input(tile): raises the tile's flag for the
  // ranks that read it (flat: all; tree: the owner).
  template <class Group>
  RCCLX_HOST_DEVICE void publish(const Group& g, int tile) const {
    w_.publish(g, tile);
  }

  // Group-collective: publish(g, t) for t = first, first + step, ... below num_tiles().
  template <class Group>
  RCCLX_HOST_DEVICE void publish_strided(const Group& g, int first, int step) const {
    w_.publish_strided(g, first, step);
  }

  // Group-collective: the combine of every rank's records of `tile`, handed to `sink(i, record)`
  // once per record (i = the record's index in the call), each by the thread that folded or read it.
  // flat: waits for every rank and folds. tree: the owner waits, folds, stores the finalized records
  // in its results and publishes them; the others wait for them and read them. False if a wait
  // expired (the error is recorded): the sink was not called.
  template <class Group, class Sink>
  RCCLX_HOST_DEVICE bool reduce(const Group& g, int tile, Sink&& sink) const {
    const std::size_t n = records_in(tile), first = static_cast<std::size_t>(tile) * tile_records_;
    const std::size_t tid = static_cast<std::size_t>(g.thread_rank()), step = static_cast<std::size_t>(g.size());
    return on_tile(
        g, tile,
        [&](Record* res) {
          for (std::size_t i = tid; i < n; i += step) {
            const Record r = fold(tile, i);
            if (res) res[i] = r;
            sink(first + i, r);
          }
        },
        [&](const Record* res) {
          for (std::size_t i = tid; i < n; i += step) {
            const Record r = res[i];
            sink(first + i, r);
          }
        });
  }

  // Group-collective: reduce() for a sliced Combine, a thread per (record, slice): slice j of
  // record i handed to `sink(i, j, slice)` (i = the record's index in the call, j in
  // [0, Combine::slices)) by the thread that folded or read it; thread k of the group takes the
  // tile's slice k, k + size, ... (record k / slices, slice k % slices), so a record's slices are
  // loaded by neighbouring threads. The same bits as reduce() (the Combine's promise). Tree: the
  // owner stores each finalized slice into its published result (store_slice), the others read it
  // (load_slice). False if a wait expired (the error is recorded): the sink was not called.
  template <class Group, class Sink>
  RCCLX_HOST_DEVICE bool reduce_slices(const Group& g, int tile, Sink&& sink) const {
    static_assert(detail::is_sliced_combine<Combine>::value,
                  "rcclx::fused::combine::reduce_slices: Combine is not sliced (no `slices` and `slice`; use reduce)");
    constexpr std::size_t parts = static_cast<std::size_t>(Combine::slices);
    static_assert(parts >= 1, "rcclx::fused::combine::reduce_slices: Combine::slices must be positive");
    const std::size_t n = records_in(tile) * parts, first = static_cast<std::size_t>(tile) * tile_records_;
    const std::size_t tid = static_cast<std::size_t>(g.thread_rank()), step = static_cast<std::size_t>(g.size());
    return on_tile(
        g, tile,
        [&](Record* res) {
          for (std::size_t k = tid; k < n; k += step) {
            const std::size_t i = k / parts;
            const int j = static_cast<int>(k % parts);
            const typename Combine::slice s = merged_slice(tile, i, j);
            if (res) op_.store_slice(res[i], j, s);
            sink(first + i, j, s);
          }
        },
        [&](const Record* res) {
          for (std::size_t k = tid; k < n; k += step) {
            const std::size_t i = k / parts;
            const int j = static_cast<int>(k % parts);
            sink(first + i, j, op_.load_slice(res[i], j));
          }
        });
  }

  // Group-collective: reduce() for a selection Combine (topk), a thread per entry of every rank's
  // list: entry `place` of record i's result handed to `sink(i, place, entry)` (i = the record's
  // index in the call, place in [0, Combine::entries)), exactly once, by the thread that placed or
  // read it. Every rank's lists must be sorted (Combine::before). The same bits as reduce().
  //   reduce_entries(g, tile, st, sink): the group stages a record's lists in `st` (memory it
  //     shares: entries_storage, e.g. a block's shared memory), then places them there
  //     (merge_entries), a record at a time. The fast one.
  //   reduce_entries(g, tile, sink): no storage; a record at a time, its entries that can be in
  //     the result (merge_entries' bound) search the lists where they are (place_among).
  // Tree: the owner stores each placed entry into its published result (store_entry), the others
  // read them (load_entry). False if a wait expired (the error is recorded): the sink was not called.
  template <class Group, class Sink>
  RCCLX_HOST_DEVICE bool reduce_entries(const Group& g, int tile, Sink&& sink) const {
    return select(g, tile, sink, [&](std::size_t i, const auto& place_sink) {
      using entry = typename Combine::entry;
      constexpr int k = Combine::entries;
      const int n = num_ranks(), q = (k + n - 1) / n - 1;
      const auto list = [&](int s) -> const Record& { return input_of(s, tile)[i]; };
      const auto before = [](const entry& a, const entry& b) { return Combine::before(a, b); };
      entry tau;
      const int tr = detail::tau_rank(before, n, q, [&](int s) { return op_.load_entry(list(s), q); }, tau);
      for (int x = g.thread_rank(); x < n * k; x += g.size()) {  // position-major, as merge_entries
        const int r = x % n, p = x / n;
        const entry e = op_.load_entry(list(r), p);
        if (detail::after(before, e, r, p, tau, tr, q)) continue;  // no place in the result
        const int place = place_among<Combine, MaxRanks>(op_, e, r, p, n, list);
        if (place < k) place_sink(place, e);
      }
    });
  }
  template <class Group, class Sink>
  RCCLX_HOST_DEVICE bool reduce_entries(const Group& g, int tile, entries_storage<Combine, MaxRanks>& st,
                                        Sink&& sink) const {
    return select(g, tile, sink, [&](std::size_t i, const auto& place_sink) {
      merge_entries<Combine, MaxRanks>(g, op_, num_ranks(), st,
                                       [&](int s) -> const Record& { return input_of(s, tile)[i]; }, place_sink);
    });
  }

  // Group-collective, once per block per call (core::tile_flags::finish).
  template <class Group>
  RCCLX_HOST_DEVICE void finish(const Group& g, int num_blocks) const {
    w_.finish(g, num_blocks);
  }

 private:
  // The table as words: the same layout for every element type (core::peer_table::as).
  RCCLX_HOST_DEVICE static const core::peer_table<float, MaxRanks>& as_words(const core::peer_table<Record, MaxRanks>& t) {
    static_assert(sizeof(core::peer_table<float, MaxRanks>) == sizeof(core::peer_table<Record, MaxRanks>),
                  "rcclx::fused::combine: peer_table layout must not depend on the element type");
    return reinterpret_cast<const core::peer_table<float, MaxRanks>&>(t);
  }

  // Checked mode: the call as the peers must see it: a combine of num_records records of this
  // Record in tiles of tile_records, with this Combine (not the exchange's words).
  RCCLX_HOST_DEVICE void describe_call() {
#if RCCLX_CHECKS
    w_.describe_as(core::checked_collective::combine, core::type_id<Record>(),
                   detail::combine_check_id<Combine, accumulator_type>(), num_records_, tile_records_);
#endif
  }

  RCCLX_HOST_DEVICE Record* results_of(int r, int tile) const {
    return reinterpret_cast<Record*>(w_.results(r) +
                                     static_cast<std::size_t>(tile) * detail::combine_tile_words<Record>(tile_records_) *
                                         sizeof(float));
  }

  RCCLX_HOST_DEVICE const Record* input_of(int r, int tile) const {
    // input() of rank r: this rank's input moved to r's buffer (the same offset in every buffer).
    const unsigned char* mine = reinterpret_cast<const unsigned char*>(w_.input(tile));
    const core::peer_table<float, MaxRanks>& t = *t_;
    return reinterpret_cast<const Record*>(reinterpret_cast<const unsigned char*>(t.data[r]) +
                                           (mine - reinterpret_cast<const unsigned char*>(t.data[rank()])));
  }

  // Rank p's record i of `tile`, by address: a fold reads the fields it needs where they lie (a
  // whole record copied into registers first would spill for the large ones, topk's). A loop up to
  // n: several ranks' records in flight at once (the loop tested per rank waits for each in turn).
  struct record_source : kernel::source_base {
    static constexpr bool one_at_a_time = true;
    static constexpr bool up_to_n = true;
    using loaded = const Record*;
    const combine& c;
    int tile;
    std::size_t i;
    RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void load(int p, const Record*& x) const { x = c.input_of(p, tile) + i; }
  };

  // Slice j of rank p's record i of `tile`: loaded by value, a batch of ranks at a time (all in
  // flight), then folded. A slice is left unset until loaded: fold_ranks value-initialises its
  // batch, and zeros for the ranks past n (never read) cost registers (sm_90: 79 -> 99 per thread).
  struct loaded_slice {
    typename Combine::slice s;
    RCCLX_HOST_DEVICE RCCLX_FORCEINLINE loaded_slice() {}
  };
  struct slice_source : kernel::source_base {
    static constexpr bool rank0_untested = true;
    using loaded = loaded_slice;
    const combine& c;
    int tile;
    std::size_t i;
    int j;
    RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void load(int p, loaded& x) const {
      x.s = c.op_.load_slice(c.input_of(p, tile)[i], j);
    }
  };

  // Record i of `tile` folded over the ranks in order 0..N-1 (kernel::fold_ranks: init on rank 0's
  // record, fold on the others'), finalized. The one place that does the arithmetic: a flat rank
  // and a tree owner run the same code.
  RCCLX_HOST_DEVICE Record fold(int tile, std::size_t i) const {
    static_assert(std::is_default_constructible<accumulator_type>::value,
                  "rcclx::fused::combine: Combine's accumulator must be default-constructible");
    accumulator_type acc;
    (void)kernel::fold_ranks<MaxRanks, 1>(record_source{{}, *this, tile, i}, num_ranks(),
                                          [&](int p, const record_source&, const Record* r) {
                                            if (p == 0) acc = op_.init(*r);
                                            else op_.fold(acc, *r);
                                          });
    return op_.finalize(acc);
  }

  // Slice j of record i of `tile`, folded over the ranks in order 0..N-1 (up to 8 ranks' slices
  // loaded at once) and finalized. (auto: declared for every Combine, instantiated for sliced
  // ones only.)
  RCCLX_HOST_DEVICE auto merged_slice(int tile, std::size_t i, int j) const {
    using slice = typename Combine::slice;
    using slice_acc = decltype(op_.init_slice(std::declval<const slice&>()));
    static_assert(std::is_default_constructible<slice_acc>::value,
                  "rcclx::fused::combine: Combine's slice accumulator must be default-constructible");
    slice_acc acc;
    (void)kernel::fold_ranks<MaxRanks, kernel::peer_batch<MaxRanks, detail::all_peers>>(
        slice_source{{}, *this, tile, i, j}, num_ranks(), [&](int p, const slice_source&, const loaded_slice& x) {
          if (p == 0) acc = op_.init_slice(x.s);
          else op_.fold_slice(acc, x.s);
        });
    return op_.finalize_slice(acc);
  }

  // reduce_entries' protocol around `merge(i, place_sink)`, which calls place_sink(place, entry)
  // for every place of record i of the tile (group-collective, once per record).
  template <class Group, class Sink, class Merge>
  RCCLX_HOST_DEVICE bool select(const Group& g, int tile, Sink& sink, const Merge& merge) const {
    static_assert(detail::is_selection_combine<Combine>::value,
                  "rcclx::fused::combine::reduce_entries: Combine is not a selection (no `entries` and `entry`; use "
                  "reduce)");
    constexpr std::size_t k = static_cast<std::size_t>(Combine::entries);
    const std::size_t recs = records_in(tile), first = static_cast<std::size_t>(tile) * tile_records_;
    return on_tile(
        g, tile,
        [&](Record* res) {
          for (std::size_t i = 0; i < recs; ++i)
            merge(i, [&](int place, const typename Combine::entry& e) {
              if (res) op_.store_entry(res[i], place, e);
              sink(first + i, place, e);
            });
        },
        [&](const Record* res) {
          for (std::size_t x = static_cast<std::size_t>(g.thread_rank()); x < recs * k;
               x += static_cast<std::size_t>(g.size()))
            sink(first + x / k, static_cast<int>(x % k), op_.load_entry(res[x / k], static_cast<int>(x % k)));
        });
  }

  // The protocol around reduce's, reduce_slices' and reduce_entries' work on `tile`. Where this
  // rank folds the tile (flat: every rank; tree: the owner): waits for every rank's input, runs
  // owned(res) (res: this rank's results to publish under tree, else null) and under tree
  // publishes them. Elsewhere (tree): waits for the owner's results and runs read(results). False
  // if a wait expired (the error is recorded): neither ran.
  template <class Group, class Owned, class Read>
  RCCLX_HOST_DEVICE bool on_tile(const Group& g, int tile, const Owned& owned, const Read& read) const {
    if (w_.owns(tile)) {
      if (!w_.wait_inputs(g, tile)) return false;
      Record* res = w_.resolved() == algorithm::tree ? results_of(rank(), tile) : nullptr;
      owned(res);
      if (res) w_.publish_result(g, tile);
      w_.input_kept(g, tile);
      return true;
    }
    if (!w_.wait_result(g, tile)) return false;
    read(static_cast<const Record*>(results_of(owner(tile), tile)));
    w_.input_kept(g, tile);
    return true;
  }

  words w_;
  const core::peer_table<float, MaxRanks>* t_;
  std::size_t tile_records_;
  std::size_t num_records_;
  Combine op_;
};

}  // namespace fused
RCCLX_NAMESPACE_END
