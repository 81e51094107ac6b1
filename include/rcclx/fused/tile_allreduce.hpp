// rcclx/fused/tile_allreduce.hpp: tile-level AllReduce for use inside your own kernel: a producer
// writes a tile into its symmetric buffer and raises the tile's flag; the tile's reducer reduces it
// as soon as the flags of all ranks are up, and hands the sums to an epilogue. No block barrier.
//
//   // every block of every rank, same grid, tile t handled by the same block on every rank:
//   rcclx::fused::tile_allreduce<rcclx::bf16, 8> ar(table, slots, tile_elems, num_tiles);
//   for (int t = blockIdx.x; t < num_tiles; t += gridDim.x) {
//     compute_tile(t, ar.input(t));            // this rank's contribution, tile_elems elements
//     ar.publish(g, t);                        // flag up for the ranks that read it
//   }
//   for (int t = blockIdx.x; t < num_tiles; t += gridDim.x)
//     if (!ar.reduce<1>(g, t, map, epi)) break;  // waits for every rank's tile t; epi gets the sums
//   ar.finish(g, gridDim.x);                   // every block, once, even after a failure
//
// Algorithms (Algo):
//   flat: every rank reduces every tile from all N buffers. Per tile: N-1 flag stores, N-1 polls,
//         N tile reads (N-1 from peers). One step; the decode-size choice.
//   tree: tile t's owner (tiles split into N contiguous chunks, chunk c owned by rank c) reduces it,
//         writes the result into its own buffer and raises a result flag on every other rank, which
//         then reads the result from the owner. Per tile: 2(N-1) flag stores (1 per producer, N-1 by
//         the owner), N reads by the owner, 1 read by each other rank: 2(N-1)/N of a tile crosses
//         links per rank (the ring minimum). Two steps.
//   automatic: flat or tree for the whole message (num_tiles x tile_elems elements) by the built-in
//         table of this build's architecture (dda::select_algorithm, gpu::build_arch), chosen by the
//         constructor, the same on every rank; both are compiled. resolved() says which.
// Every rank's epilogue sees the same values: the AllReduce result rounded once to T (as
// dda::allreduce would output it), widened to FP32, reduced in rank order 0..N-1 in FP32. Flat and
// tree give the same bits.
//
// Protocol. Flags live in the peer table's signal pads, in the slot range `slots` (one slot per
// tile plus a control slot): keep it apart from the blocks that barrier-based collectives (dda) use
// on the same pads. Slot s of rank r has, like a barrier block, an inbox word per sender (written
// only by that sender, store-release at system scope). Every flag of a call carries the call's
// epoch, e = the rank's call counter (control slot) + 1, the same on every rank (every rank makes
// every call): publishing tile t to peer p stores e into p's inbox[t][r]; a wait for p is a bounded
// load-acquire spin until inbox[t][p] reaches e. The epoch names the call, not the block, so any
// block of a rank can wait for a tile (tile_reducer::any_block). Epochs live on the device and only
// grow (modulo 2^32), so the protocol is graph-replay-safe and needs no reset; waits expire after
// the pads' timeout and record an error (barrier_kind::tile, block = the tile).
// Buffers: each call uses one half of every symmetric buffer, alternating from call to call (the
// control slot holds a per-rank call counter, advanced by the last block to reach finish()). The tile
// flags of call k+1 prove the peers finished call k (each peer publishes them after its call k
// ended), so when call k+2 overwrites call k's half nobody reads it any more: no end barrier, and
// the tile count and size may change from call to call.
//
// Rules: every rank runs every call with the same num_tiles and tile_elems; every block constructs
// the object and calls finish() once (with the grid's block count); within a call, one block per
// rank writes and publishes tile t, and (tile_reducer::same_block, the default) the same block
// reduces it; with tile_reducer::any_block any one block of the rank may reduce it (publish then
// raises the tile's flag for this rank's own blocks too, and the waits include it); every rank
// reduces every tile (flat) or calls reduce on every tile (tree); all blocks of all ranks are
// resident at once (blocks wait for blocks of other ranks). One call per kernel: the call counter
// advances when the kernel's blocks finish.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "../core/barrier.hpp"
#include "../core/call_check.hpp"
#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../core/peer_table.hpp"
#include "../dda/detail/tiles.hpp"
#include "../dda/select.hpp"
#include "../gpu/atomic.hpp"
#include "../gpu/group.hpp"
#include "../gpu/memory.hpp"
#include "epilogue.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {

// The signal-pad slots (blocks of core::signal_pads) a tile-level AllReduce uses: `first` is its
// control slot, tile t uses slot first + 1 + t. The pads need max_blocks >= end().
struct tile_slots {
  int first;      // first slot (e.g. the number of barrier blocks other collectives may use)
  int max_tiles;  // tiles a call may have

  RCCLX_HOST_DEVICE constexpr int end() const { return first + 1 + max_tiles; }
};

// Pad slots (max_blocks) for barrier-based collectives with up to barrier_blocks blocks plus tile
// AllReduces with up to max_tiles tiles at tile_slots{barrier_blocks, max_tiles}.
RCCLX_HOST_DEVICE constexpr int pad_blocks_for(int barrier_blocks, int max_tiles) {
  return barrier_blocks + 1 + max_tiles;
}

namespace detail {
RCCLX_HOST_DEVICE constexpr std::size_t round16(std::size_t b) { return (b + 15) / 16 * 16; }
inline constexpr std::size_t default_results = ~std::size_t{0};
inline constexpr int all_peers = RCCLX_DETAIL_DDA_PEER_BATCH;  // reduce's default PeersInFlight

// A map's shape for the checked mode: {tiles, tile rows, tile columns, output columns}; a map type
// of your own is described by its tile count and tile size only.
RCCLX_HOST_DEVICE inline core::call_fingerprint map_fingerprint(const tile_map& m) {
  return {{static_cast<std::uint32_t>(m.num_tiles()), static_cast<std::uint32_t>(m.tile_rows),
           static_cast<std::uint32_t>(m.tile_cols), static_cast<std::uint32_t>(m.cols)}};
}
RCCLX_HOST_DEVICE inline core::call_fingerprint map_fingerprint(const row_tiles& m) {
  return {{static_cast<std::uint32_t>(m.rows), 1u, static_cast<std::uint32_t>(m.cols), static_cast<std::uint32_t>(m.cols)}};
}
template <class Map>
RCCLX_HOST_DEVICE inline core::call_fingerprint map_fingerprint(const Map& m) {
  return {{static_cast<std::uint32_t>(m.num_tiles()), 0u, static_cast<std::uint32_t>(m.tile_elems()), 0u}};
}
// Are the map's columns (words 2 and 3 of its fingerprint) known to be whole vectors?
RCCLX_HOST_DEVICE constexpr bool map_columns_checked(const tile_map&) { return true; }
RCCLX_HOST_DEVICE constexpr bool map_columns_checked(const row_tiles&) { return true; }
template <class Map>
RCCLX_HOST_DEVICE constexpr bool map_columns_checked(const Map&) { return false; }

// Checked mode: did the previous call on these slots leave its call counter where it was (a block
// that skipped finish())? Its flags would then pass this call's waits. The slot's word holds the
// launch and the call (low 15 and 16 bits) of the last object constructed there, and bit 31 once
// the answer was yes: the first thread of a new launch to see the word finds the previous launch
// with this same call number (yes) or the one before (no) and leaves the answer for the rest of
// its launch, which may construct objects of the call any number of times. Every thread gets the
// same answer; typically a warp's worth of compare-and-swaps per call. Unknown launches pass.
template <int MaxRanks>
RCCLX_HOST_DEVICE inline bool previous_call_unfinished(const core::signal_pads<MaxRanks>& s, int slot,
                                                       std::uint32_t epoch) {
  const std::uint32_t launch = gpu::launch_id() & 0x7FFFu;
  if (launch == 0) return false;
  constexpr std::uint32_t yes = 0x80000000u;
  std::uint32_t* w = s.check_epoch_slot(slot);
  const std::uint32_t mine = (launch << 16) | (epoch & 0xFFFFu);
  std::uint32_t prev = gpu::load_relaxed_system(w);
  for (;;) {
    const bool same_call = (prev & 0xFFFFu) == (epoch & 0xFFFFu);
    if (same_call && ((prev >> 16) & 0x7FFFu) == launch) return (prev & yes) != 0;  // this launch decided
    const bool bad = same_call;  // a new launch with the call number of the previous one
    const std::uint32_t want = mine | (bad ? yes : 0u);
    const std::uint32_t got = gpu::compare_exchange_local(w, prev, want);
    if (got == prev) {
      if (bad) core::detail::record_misuse(s, core::misuse::missing_finish, slot, epoch, 0u);
      return bad;
    }
    prev = got;
  }
}
}  // namespace detail

// Which block of a rank reduces a tile (the same on every rank and every block of a call).
// same_block: the block that wrote and published it. any_block: any one block of the rank, e.g. a
// GEMM whose blocks with fewer tiles reduce the tiles of blocks that are still multiplying; each
// publish also stores a flag for this rank's own blocks (one more store per tile).
enum class tile_reducer { same_block, any_block };

template <class T, int MaxRanks = max_ranks, algorithm Algo = algorithm::flat, class ReduceOp = core::op_sum>
class tile_allreduce {
  static_assert(Algo == algorithm::flat || Algo == algorithm::tree || Algo == algorithm::automatic,
                "rcclx::fused::tile_allreduce: Algo must be algorithm::flat, tree or automatic");
  static_assert(std::is_same<T, float>::value || std::is_same<T, bf16>::value || std::is_same<T, fp16>::value,
                "rcclx::fused::tile_allreduce: T must be float, rcclx::bf16 or rcclx::fp16");

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

  // Host-side checks of a call (throws rcclx::error naming the argument and the limit). The device
  // API trusts its arguments; this is what a launcher should call first.
  static void check(const char* who, const core::peer_table<T, MaxRanks>& t, tile_slots slots, std::size_t tile_elems,
                    int num_tiles, std::size_t results_bytes = detail::default_results) {
    const std::string w(who);
    if (tile_elems == 0 || tile_elems % vec_elems != 0)
      throw error(errc::invalid_argument, w + ": tile_elems = " + std::to_string(tile_elems) +
                                              " must be a positive multiple of " + std::to_string(vec_elems) +
                                              " (16-byte vectors of " + core::type_name<T>() + ")");
    if (num_tiles < 0 || num_tiles > slots.max_tiles)
      throw error(errc::invalid_argument, w + ": num_tiles = " + std::to_string(num_tiles) + " is outside [0, " +
                                              std::to_string(slots.max_tiles) + "] (tile_slots.max_tiles)");
    if (slots.first < 0 || slots.max_tiles < 0 || slots.end() > t.signals.max_blocks)
      throw error(errc::invalid_argument,
                  w + ": tile_slots{first = " + std::to_string(slots.first) + ", max_tiles = " +
                      std::to_string(slots.max_tiles) + "} needs signal-pad slots [" + std::to_string(slots.first) +
                      ", " + std::to_string(slots.end()) + ") but the pads have max_blocks = " +
                      std::to_string(t.signals.max_blocks));
    for (int p = 0; p < t.num_ranks(); ++p) {
      if (!t.data[p]) throw error(errc::invalid_argument, w + ": table.data[" + std::to_string(p) + "] is null");
      if (!gpu::is_aligned(t.data[p], 16))
        throw error(errc::misaligned, w + ": table.data[" + std::to_string(p) + "] is not 16-byte aligned");
    }
    const std::size_t need = workspace_bytes(tile_elems, num_tiles, results_bytes);
    if (need / 2 > half_bytes(t.capacity_bytes))
      throw error(errc::invalid_argument, w + ": " + std::to_string(num_tiles) + " tiles of " +
                                              std::to_string(tile_elems) + " elements need " + std::to_string(need) +
                                              " bytes of symmetric buffer (two halves" +
                                              (Algo == algorithm::tree ? std::string(", with results") : std::string()) +
                                              ") but it has " + std::to_string(t.capacity_bytes));
  }

  // This rank's view `t` (kept by reference: it must outlive the object, e.g. a kernel argument or
  // a table in device memory). Reads the call counter: construct once per block per call.
  RCCLX_HOST_DEVICE tile_allreduce(const core::peer_table<T, MaxRanks>& t, tile_slots slots, std::size_t tile_elems,
                                   int num_tiles, tile_reducer reducer = tile_reducer::same_block)
      : t_(&t), slots_(slots), tile_elems_(tile_elems), num_tiles_(num_tiles),
        any_block_(reducer == tile_reducer::any_block) {
    // Acquire: this thread's later accesses (finish()'s count included) come after the counter's
    // read, whatever the compiler does with the loads; see finish().
    const std::uint32_t call = gpu::load_acquire_system(t.signals.counter_slot(slots.first, 0));
    epoch_ = call + 1u;
    arrived_before_ = gpu::load_relaxed_system(t.signals.inbox_slot(t.rank(), slots.first, 0));
    base_ = (call & 1u) ? half_bytes(t.capacity_bytes) : 0;
    results_ = detail::round16(static_cast<std::size_t>(num_tiles) * tile_elems * sizeof(T));
    if constexpr (Algo == algorithm::automatic)  // the same choice on every rank: same tiles, same build
      tree_ = dda::select_algorithm(static_cast<std::size_t>(num_tiles) * tile_elems * sizeof(T), t.num_ranks(),
                                    gpu::build_arch) == algorithm::tree;
#if RCCLX_CHECKS
    fp_ = core::fingerprint<T, ReduceOp>(core::checked_collective::tile_allreduce, resolved(),
                                         static_cast<std::size_t>(num_tiles), 0, tile_elems);
    if (num_tiles > 0) bad_ = detail::previous_call_unfinished(t.signals, slots.first, epoch_);
#endif
  }

  // The algorithm this call runs: Algo, or for automatic the built-in table's choice for the whole
  // message (num_tiles x tile_elems elements) on this build's architecture (dda/select.hpp).
  RCCLX_HOST_DEVICE algorithm resolved() const { return is_tree() ? algorithm::tree : algorithm::flat; }

  RCCLX_HOST_DEVICE int num_tiles() const { return num_tiles_; }
  RCCLX_HOST_DEVICE std::size_t tile_elems() const { return tile_elems_; }
  RCCLX_HOST_DEVICE int rank() const { return t_->rank(); }
  RCCLX_HOST_DEVICE int num_ranks() const { return t_->num_ranks(); }

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
  RCCLX_HOST_DEVICE T* input(int tile) const { return input_of(rank(), tile); }

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
    if (g.thread_rank() == 0) core::check_publish(t_->signals, slots_.first, epoch_, fp_);
#endif
    g.sync();  // the group's writes of the slot happen before the release below
    for (int p = g.thread_rank(); p < num_ranks(); p += g.size()) announce(slot, tile, p);
  }

  // Group-collective: publish(g, t) for every tile t = first, first + step, ... below num_tiles(),
  // after the group wrote all of them: one group sync, and every (tile, peer) flag stored by its own
  // thread at once instead of one tile after another.
  template <class Group>
  RCCLX_HOST_DEVICE void publish_strided(const Group& g, int first, int step) const {
    const int n = num_ranks();
    const int count = first < num_tiles_ ? (num_tiles_ - 1 - first) / step + 1 : 0;
#if RCCLX_CHECKS
    if (g.thread_rank() == 0 && count > 0) core::check_publish(t_->signals, slots_.first, epoch_, fp_);
#endif
    g.sync();
    for (int i = g.thread_rank(); i < count * n; i += g.size()) {
      const int tile = first + (i / n) * step;
      announce(tile, tile, i % n);
    }
  }

  // Group-collective: waits until every rank published `tile` (flat, or tree on the owner).
  // False if a wait expired (the error is recorded): leave without touching peer memory.
  template <class Group>
  RCCLX_HOST_DEVICE bool wait_inputs(const Group& g, int tile) const {
    const core::signal_pads<MaxRanks>& s = t_->signals;
    const int slot = slot_of(tile);
    bool failed = false;
    for (int p = g.thread_rank(); p < s.num_ranks && !failed; p += g.size()) {
      if (!flags_between(s.rank, p)) continue;
      failed = !wait_tile(s.inbox_slot(s.rank, slot, p), tile, p);
    }
    return !g.sync_or(failed || !call_agrees(g, tile));
  }

  // Group-collective: wait_inputs for every tile t = first, first + step, ... below num_tiles() at
  // once (each thread polls the flags of other (tile, peer) pairs), e.g. before reducing a block's
  // grid-stride tiles: one flag latency instead of one per tile. Flat, or tree where this rank owns
  // the tiles (tiles it does not own are skipped).
  template <class Group>
  RCCLX_HOST_DEVICE bool wait_inputs_strided(const Group& g, int first, int step) const {
    const core::signal_pads<MaxRanks>& s = t_->signals;
    const int n = s.num_ranks;
    const int count = first < num_tiles_ ? (num_tiles_ - 1 - first) / step + 1 : 0;
    bool failed = false;
    for (int i = g.thread_rank(); i < count * n && !failed; i += g.size()) {
      const int tile = first + (i / n) * step, p = i % n, slot = slot_of(tile);
      if (!flags_between(s.rank, p) || owner(tile) != s.rank) continue;
      failed = !wait_tile(s.inbox_slot(s.rank, slot, p), tile, p);
    }
    return !g.sync_or(failed || !call_agrees(g, first));
  }

  // Tree, group-collective on the owner after the whole group wrote the tile's result: raises the
  // result flag on every other rank.
  template <class Group>
  RCCLX_HOST_DEVICE void publish_result(const Group& g, int tile) const {
    const core::signal_pads<MaxRanks>& s = t_->signals;
    const int slot = slot_of(tile);
    g.sync();
    for (int p = g.thread_rank(); p < s.num_ranks; p += g.size()) {
      if (p == s.rank) continue;
      gpu::store_release_system(s.inbox_slot(p, slot, s.rank), epoch_);
    }
  }

  // Tree, group-collective: waits for the owner's result of `tile` (returns true at once on the owner).
  template <class Group>
  RCCLX_HOST_DEVICE bool wait_result(const Group& g, int tile) const {
    const core::signal_pads<MaxRanks>& s = t_->signals;
    const int slot = slot_of(tile), o = owner(tile);
    bool failed = false;
    if (o != s.rank) {
      for (int p = g.thread_rank(); p < s.num_ranks; p += g.size()) {
        if (p != o) continue;
        failed = !wait_tile(s.inbox_slot(s.rank, slot, o), tile, o);
      }
    }
    return !g.sync_or(failed || !call_agrees(g, tile));
  }

  // Tree, group-collective: wait_result for every tile t = first, first + step, ... below
  // num_tiles() at once (each thread polls the flags of other tiles), e.g. before copying a block's
  // grid-stride tiles from their owners.
  template <class Group>
  RCCLX_HOST_DEVICE bool wait_results_strided(const Group& g, int first, int step) const {
    const core::signal_pads<MaxRanks>& s = t_->signals;
    const int count = first < num_tiles_ ? (num_tiles_ - 1 - first) / step + 1 : 0;
    bool failed = false;
    for (int i = g.thread_rank(); i < count && !failed; i += g.size()) {
      const int tile = first + i * step, o = owner(tile), slot = slot_of(tile);
      if (o == s.rank) continue;
      failed = !wait_tile(s.inbox_slot(s.rank, slot, o), tile, o);
    }
    return !g.sync_or(failed || !call_agrees(g, first));
  }

  // Group-collective: the AllReduce of `tile`, handed to `epi` (a fused::epilogue, or any callable
  // with its signature) in chunks of VecsPerThread vectors per thread (thread i holds vectors
  // i, i + G, ... of the chunk, G = g.size()). map (tile_map, row_tiles) places the tile's elements
  // in the output; vectors outside it (the padding of edge tiles) are neither read nor passed on,
  // so producers need not write them. With a row-wide epilogue the whole tile must fit in one
  // chunk: VecsPerThread * G >= tile_elems / vec_elems.
  // PeersInFlight: peers' vectors loaded at once per held vector (registers: 16 bytes each) before
  // they are summed. The default (8) hides the most latency; a kernel whose occupancy is set by
  // another phase (a GEMM main loop) passes fewer so the reduction needs no more registers than
  // that phase: the sum is the same (rank order), it only takes more round trips.
  // Loads: the cache policy of the loads of the ranks' inputs. cache_hint::streaming (evict-first)
  // keeps them from pushing out of L2 what a concurrent phase reuses: a GEMM main loop's operands
  // while other blocks reduce finished tiles (examples/04_gemm_allreduce). The result is the same.
  // flat: waits for every rank and reduces. tree: the owner waits, reduces, stores the T result in
  // results(owner) and publishes it; the others wait for it and read it. False if a wait expired.
  template <int VecsPerThread, int PeersInFlight = detail::all_peers, gpu::cache_hint Loads = gpu::cache_hint::normal,
            class Group, class Map, class Epilogue>
  RCCLX_HOST_DEVICE bool reduce(const Group& g, int tile, const Map& map, const Epilogue& epi) const {
    return reduce_parts<VecsPerThread, PeersInFlight, Loads>(g, tile, 1, 0, map, epi);
  }

  // Group-collective, flat or tree owner only: waits for every rank's `tile`, reduces it and hands
  // it to `epi`, publishing nothing. A tree kernel with its own result payload (e.g. normalised rows)
  // writes it into results(rank()) from its epilogue and then calls publish_result.
  template <int VecsPerThread, int PeersInFlight = detail::all_peers, gpu::cache_hint Loads = gpu::cache_hint::normal,
            class Group, class Map, class Epilogue>
  RCCLX_HOST_DEVICE bool reduce_owned(const Group& g, int tile, const Map& map, const Epilogue& epi) const {
    if (!map_fits(g, tile, map)) return false;
    if (!wait_inputs(g, tile)) return false;
    if (!map_agrees(g, tile, map)) return false;
    reduce_visit<VecsPerThread, PeersInFlight, Loads>(g, tile, map, epi, [](std::size_t, const gpu::vec16&) {});
    return true;
  }

  // Group-collective: the AllReduce of the sum of `parts` tiles: tile, tile + stride, ... (each
  // written by its producer as a tile of its own and published with publish_part(g, slot, tile)),
  // handed to `epi` at tile's place in `map`. For a producer that splits one output tile's work
  // across blocks, e.g. a GEMM splitting the K range of its last round (examples/04_gemm_allreduce):
  // the sum across the ranks adds the parts too, in FP32, parts outer and ranks inner (the same
  // order on every rank), rounded to T once. Tree: tile's owner sums every part of every rank and
  // publishes the result in tile's place; the other ranks wait for it and read it (call it on every
  // rank, as reduce). Flat and tree give the same bits. Same template parameters as reduce();
  // parts = 1 is reduce(). False if a wait expired.
  template <int VecsPerThread, int PeersInFlight = detail::all_peers, gpu::cache_hint Loads = gpu::cache_hint::normal,
            class Group, class Map, class Epilogue>
  RCCLX_HOST_DEVICE bool reduce_parts(const Group& g, int tile, int parts, int stride, const Map& map,
                                      const Epilogue& epi) const {
    if (!map_fits(g, tile, map)) return false;
    const auto wait_parts = [&] {
      for (int q = 0; q < parts; ++q)
        if (!wait_inputs(g, tile + q * stride)) return false;
      return map_agrees(g, tile, map);
    };
    if (!is_tree()) {
      if (!wait_parts()) return false;
      reduce_visit<VecsPerThread, PeersInFlight, Loads>(g, tile, map, epi, [](std::size_t, const gpu::vec16&) {},
                                                        parts, stride);
      return true;
    }
    if constexpr (Algo != algorithm::flat) {
      const std::size_t tile_off = static_cast<std::size_t>(tile) * tile_elems_;
      const int o = owner(tile);
      if (o == rank()) {
        if (!wait_parts()) return false;
        T* res = reinterpret_cast<T*>(results(o)) + tile_off;
        reduce_visit<VecsPerThread, PeersInFlight, Loads>(
            g, tile, map, epi, [&](std::size_t vi, const gpu::vec16& v) { gpu::store16(res + vi * vec_elems, v); },
            parts, stride);
        publish_result(g, tile);
        return true;
      }
      if (!wait_result(g, tile) || !map_agrees(g, tile, map)) return false;
      const T* res = reinterpret_cast<const T*>(results(o)) + tile_off;
      visit<VecsPerThread>(g, tile, map, epi,
                           [&](std::size_t vi, gpu::vec16& v) { v = gpu::load16(res + vi * vec_elems); });
      return true;
    } else {
      return true;  // not reached: flat returned above
    }
  }

  // Group-collective, every block, once per call: counts the block; the last block of this rank to
  // be counted advances the call counter (the next call uses the other half of the buffers). It
  // only touches the control words, which the constructor read, so it may come at any point the
  // whole group reaches after the constructor, and the object stays usable for the rest of the
  // call. At the end of the kernel, its round trip (the count's atomic) is the kernel's last step;
  // earlier, e.g. right after publishing while the flags are on their way, it overlaps the wait
  // (the AllReduce + RMSNorm kernels: 0.15-0.3 us per call on one H200, docs/fusion.md, design
  // notes).
  template <class Group>
  RCCLX_HOST_DEVICE void finish(const Group& g, int num_blocks) const {
    if (num_tiles_ <= 0) return;  // an empty call touched nothing: it keeps the half
#if RCCLX_CHECKS
    // A call refused for a missing finish() before it counts nothing: its blocks all keep the
    // call number they were refused with (the pads need a reset, as after any error).
    if (bad_) return;
#endif
    g.sync();
    if (g.thread_rank() == 0) {
      // Control slot of this rank: counter[0] = calls completed, counter[1] = blocks that finished
      // (ever), own inbox[0] = that count when the current call began. Relative counts, so any
      // common starting value works (emulated_world::reset(value) sets them all to value).
      const core::signal_pads<MaxRanks>& s = t_->signals;
      std::uint32_t* call = s.counter_slot(slots_.first, 0);
      std::uint32_t* arrived = s.counter_slot(slots_.first, 1);
      std::uint32_t* arrived_before = s.inbox_slot(s.rank, slots_.first, 0);
      // No fence. The control words (the counter, arrived_before) only have to be read before this
      // block is counted, so that none of its threads can see the last block's update of this
      // call: every thread read them in the constructor (the counter with an acquire load), and the
      // group sync above completes each thread's earlier loads before thread 0 counts (on the
      // host the fetch_add itself is acq_rel). The outputs need no ordering here: the next call is
      // a later kernel, and peers reuse this call's half only after this rank's flags of the next
      // call (see Protocol). A system-scope fence here waited for the block's last stores to land:
      // 0.4-0.5 us per call of the tile-flag AllReduce + RMSNorm kernels on one H200
      // (docs/fusion.md, design notes).
      const std::uint32_t now = gpu::fetch_add_local(arrived, 1u) + 1u;
      if (now - arrived_before_ == static_cast<std::uint32_t>(num_blocks)) {
        gpu::store_relaxed_system(arrived_before, now);
        // The counter is still what the constructor read (only this store changes it): no load.
        gpu::store_relaxed_system(call, epoch_);
      }
    }
  }

 private:
  // Tree: tiles of one owner's chunk (tile t belongs to rank t / tiles_per_owner()).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int tiles_per_owner() const {
    const int n = num_ranks();
    return num_tiles_ > n ? (num_tiles_ + n - 1) / n : 1;
  }

  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool is_tree() const {
    if constexpr (Algo == algorithm::automatic) return tree_;
    else return Algo == algorithm::tree;
  }

  // Checked mode: did every peer make this call (count, shape, type, op, algorithm)? Not
  // group-collective (the callers fold it into their vote). Always true without RCCLX_CHECKS.
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool call_agrees(const Group& g, int tile) const {
#if RCCLX_CHECKS
    return !bad_ && core::check_verify(g, t_->signals, slots_.first, epoch_, fp_, tile);
#else
    (void)g;
    (void)tile;
    return true;
#endif
  }

  // Checked mode, group-collective: the map fits this call (its tiles, the vector width; otherwise
  // an invalid_argument record) and its fingerprint is published for the peers' map_agrees.
  template <class Group, class Map>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool map_fits(const Group& g, int tile, const Map& map) const {
#if RCCLX_CHECKS
    const core::call_fingerprint f = detail::map_fingerprint(map);
    core::misuse m{};
    std::uint32_t a = 0, b = 0;
    if (bad_) {
      return false;
    } else if (detail::map_columns_checked(map) &&
               ((f.w[2] % static_cast<std::uint32_t>(vec_elems)) != 0 || (f.w[3] % static_cast<std::uint32_t>(vec_elems)) != 0)) {
      m = core::misuse::map_vector_width;
      a = f.w[3] % static_cast<std::uint32_t>(vec_elems) != 0 ? f.w[3] : f.w[2];
      b = static_cast<std::uint32_t>(vec_elems);
    } else if (static_cast<std::size_t>(map.tile_elems()) > tile_elems_) {
      m = core::misuse::map_tile_too_large;
      a = static_cast<std::uint32_t>(map.tile_elems());
      b = static_cast<std::uint32_t>(tile_elems_);
    } else if (static_cast<std::size_t>(map.num_tiles()) > static_cast<std::size_t>(num_tiles_)) {
      m = core::misuse::map_too_many_tiles;
      a = static_cast<std::uint32_t>(map.num_tiles());
      b = static_cast<std::uint32_t>(num_tiles_);
    }
    if (m != core::misuse{}) {
      if (g.thread_rank() == 0) core::detail::record_misuse(t_->signals, m, tile, a, b);
      return false;
    }
    if (g.thread_rank() == 0) core::check_publish(t_->signals, slots_.first + 1, epoch_, f);
#else
    (void)g;
    (void)tile;
    (void)map;
#endif
    return true;
  }

  // Checked mode, group-collective, after the waits: this rank's map is the one every rank that
  // reduces uses (flat: every rank; tree: the owners, the only ranks sure to pass a map: a tree
  // kernel may call reduce_owned on its own tiles alone). A tree rank that only reads results with
  // another map fails alone; the owners' outputs are right for theirs.
  template <class Group, class Map>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool map_agrees(const Group& g, int tile, const Map& map) const {
#if RCCLX_CHECKS
    const int per = tiles_per_owner();
    const int owners = is_tree() && num_tiles_ > 0 ? (num_tiles_ + per - 1) / per : num_ranks();
    const bool ok = core::check_verify(g, t_->signals, slots_.first + 1, epoch_, detail::map_fingerprint(map), tile,
                                       true, -1, owners);
    return !g.sync_or(!ok);
#else
    (void)g;
    (void)tile;
    (void)map;
    return true;
#endif
  }

  // Do input flags pass between ranks a and b? Between two ranks always; from a rank to itself only
  // under any_block (with same_block the block that wrote a tile is the one that reduces it).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool flags_between(int a, int b) const { return a != b || any_block_; }

  // Waits until *flag reaches this call's epoch (the wait of `tile` for rank `peer`): bounded, and
  // recorded as barrier_kind::tile on expiry.
  RCCLX_HOST_DEVICE bool wait_tile(const std::uint32_t* flag, int tile, int peer) const {
    return core::detail::wait_flag(t_->signals, flag, epoch_, tile, peer, core::barrier_kind::tile);
  }

  // The flag of `slot` (holding `tile`, or a part of it) for rank p: this call's epoch into p's
  // inbox, when p reduces the tile (flat: every rank; tree: the tile's owner), and when p is this
  // rank only under any_block (otherwise the reducing block is the one that wrote the tile).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void announce(int slot, int tile, int p) const {
    const core::signal_pads<MaxRanks>& s = t_->signals;
    const int r = s.rank;
    if (!flags_between(r, p)) return;
    if (!is_tree() || p == owner(tile)) gpu::store_release_system(s.inbox_slot(p, slot_of(slot), r), epoch_);
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

  RCCLX_HOST_DEVICE int slot_of(int tile) const { return slots_.first + 1 + tile; }

  RCCLX_HOST_DEVICE T* input_of(int r, int tile) const {
    return reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(t_->data[r]) + base_) +
           static_cast<std::size_t>(tile) * tile_elems_;
  }

  // Every rank's input of `tile`, copied out of the table once (the table may live in global memory).
  RCCLX_HOST_DEVICE dda::detail::peer_ptrs<T, MaxRanks> sources(int tile) const {
    dda::detail::peer_ptrs<T, MaxRanks> src(*t_);
    const std::size_t off = base_ / sizeof(T) + static_cast<std::size_t>(tile) * tile_elems_;
    for (int j = 0; j < MaxRanks; ++j)
      if (j < src.n) src.p[j] += off;
    return src;
  }

  // visit() with every held vector summed over the ranks (then passed to `sink(vi, sum)`), and over
  // `parts` tiles tile, tile + part_stride, ... when parts > 1 (reduce_parts).
  template <int VPT, int PeersInFlight, gpu::cache_hint Loads, class Group, class Map, class Epilogue, class Sink>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void reduce_visit(const Group& g, int tile, const Map& map, const Epilogue& epi,
                                                        Sink&& sink, int parts = 1, int part_stride = 0) const {
    static_assert(PeersInFlight >= 1, "rcclx::fused::tile_allreduce: PeersInFlight must be >= 1");
    constexpr int batch = PeersInFlight < RCCLX_DETAIL_DDA_PEER_BATCH ? PeersInFlight : RCCLX_DETAIL_DDA_PEER_BATCH;
    if constexpr (batch >= RCCLX_DETAIL_DDA_PEER_BATCH || batch >= MaxRanks) {
      if (parts == 1) {
        // Every peer at once (the DDA kernels' loop): pointers copied out of the table once per tile.
        const auto src = sources(tile);
        visit<VPT>(g, tile, map, epi, [&](std::size_t vi, gpu::vec16& v) {
          v = dda::detail::reduce_vec<ReduceOp, Loads>(src, vi * vec_elems);
          sink(vi, v);
        });
        return;
      }
    }
    // `batch` peers at a time, addresses taken from the table at each use (no pointer array held
    // in registers); the same rank-order sum as dda::detail::reduce_vec, so the same bits.
    using traits = core::value_traits<T>;
    using acc_t = typename traits::acc_type;
    const ReduceOp op{};
    const int n = num_ranks();
    const std::size_t first = base_ / sizeof(T) + static_cast<std::size_t>(tile) * tile_elems_;
    const std::size_t part_step = static_cast<std::size_t>(part_stride) * tile_elems_;
    visit<VPT>(g, tile, map, epi, [&](std::size_t vi, gpu::vec16& out) {
      acc_t acc[vec_elems] = {};  // set by part 0's rank 0 vector (n >= 1)
      for (int q = 0; q < parts; ++q) {
        const std::size_t off = first + q * part_step + vi * vec_elems;
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
        for (int p0 = 0; p0 < MaxRanks; p0 += batch) {  // compile-time trip count: constant indices
          if (p0 >= n) break;
          gpu::vec16 v[batch] = {};
          for (int j = 0; j < batch; ++j)
            if (p0 + j < n) v[j] = gpu::load16<Loads>(t_->data[p0 + j] + off);
          for (int j = 0; j < batch; ++j) {
            if (p0 + j >= n) continue;
            if (q == 0 && p0 + j == 0) {
              traits::unpack(v[j], acc);
            } else {
              acc_t x[vec_elems];
              traits::unpack(v[j], x);
              for (int i = 0; i < vec_elems; ++i) acc[i] = op(acc[i], x[i]);
            }
          }
        }
      }
      out = traits::pack(acc);
      sink(vi, out);
    });
  }

  // Runs `get(vector_index, v)` for the vectors of `tile` this thread holds that lie inside the
  // output, chunk by chunk, and the epilogue on each chunk.
  template <int VPT, class Group, class Map, class Epilogue, class Get>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void visit(const Group& g, int tile, const Map& map, const Epilogue& epi,
                                                 Get&& get) const {
    using traits = core::value_traits<T>;
    constexpr int e = vec_elems;
    const std::size_t vecs = tile_elems_ / e, gs = static_cast<std::size_t>(g.size());
    const std::size_t tid = static_cast<std::size_t>(g.thread_rank());
    for (std::size_t c = 0; c < vecs; c += gs * VPT) {
      float v[VPT][e];
      const held_vectors<Map, e> held{map, static_cast<std::size_t>(tile), c + tid, gs, vecs};
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
      for (int k = 0; k < VPT; ++k) {
        if (held.holds(k)) {
          gpu::vec16 x;
          get(c + static_cast<std::size_t>(k) * gs + tid, x);
          traits::unpack(x, v[k]);
        } else {
          for (float& x : v[k]) x = 0.0f;  // not passed to the stages
        }
      }
      epi(g, v, held);
    }
  }

  const core::peer_table<T, MaxRanks>* t_;
  tile_slots slots_;
  std::size_t tile_elems_;
  int num_tiles_;
  bool any_block_;
  bool tree_ = Algo == algorithm::tree;  // automatic: the constructor's choice
  std::uint32_t epoch_ = 0;           // this call's flag value: the call counter + 1
  std::uint32_t arrived_before_ = 0;  // blocks finished before this call (control slot)
  std::size_t base_ = 0;     // byte offset of this call's half
  std::size_t results_ = 0;  // byte offset of the results inside a half
#if RCCLX_CHECKS
  core::call_fingerprint fp_{};  // this call, as the peers must see it (core/call_check.hpp)
  bool bad_ = false;             // a missing finish() was found: nothing is reduced
#endif
};

}  // namespace fused
RCCLX_NAMESPACE_END
