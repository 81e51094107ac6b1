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
// Regions: a kernel that runs several calls (or calls next to other users of the buffer) gives
// each a core::region (core/region.hpp, handed out by a region_plan and sized by need()): the call
// then uses [r.offset, r.offset + r.bytes) of every rank's buffer and the pad slots r.slots. The
// constructors without a region use the whole buffer.
//
// Protocol (core/tile_flags.hpp, buffers and flags: fused/detail/tile_exchange.hpp). Flags live in
// the peer table's signal pads, in the slot range `slots` (a control slot and one slot per tile),
// handed out by the pads' owner (emulated_world::reserve_tile_slots,
// communicator::reserve_tile_slots): apart from the blocks barrier-based collectives (dda) use on
// the same pads. Every flag of a call carries the call's epoch, so any block of a rank can wait for
// a tile (tile_reducer::any_block); waits are bounded and record barrier_kind::tile, block = the
// tile. Each call uses one half of every symmetric buffer, alternating from call to call: no end
// barrier, and the tile count and size may change from call to call.
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
#include <type_traits>

#include "../core/float_types.hpp"
#include "../core/ops.hpp"
#include "../core/peer_table.hpp"
#include "../gpu/memory.hpp"
#include "../kernel/reduce.hpp"
#include "../kernel/vector_io.hpp"
#include "detail/map_check.hpp"
#include "detail/tile_exchange.hpp"
#include "epilogue.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {

template <class T, int MaxRanks = max_ranks, algorithm Algo = algorithm::flat, class ReduceOp = core::op_sum>
class tile_allreduce : public detail::tile_exchange<T, MaxRanks, Algo, ReduceOp> {
  static_assert(core::is_float_type_v<T>, "rcclx::fused::tile_allreduce: T must be float, rcclx::bf16 or rcclx::fp16");
  using base = detail::tile_exchange<T, MaxRanks, Algo, ReduceOp>;

 public:
  using base::vec_elems;
  using base::num_ranks;
  using base::owner;
  using base::publish_result;
  using base::rank;
  using base::results;
  using base::wait_inputs;
  using base::wait_result;

  // This rank's view `t` (kept by reference: it must outlive the object, e.g. a kernel argument or
  // a table in device memory). Reads the call counter: construct once per block per call. The
  // rest of the call's API (publish, the waits, finish, input, results, owner, check,
  // workspace_bytes) is the exchange's (fused/detail/tile_exchange.hpp).
  // results_bytes: the tree results the kernel lays out (reduce_owned + publish_result), only
  // checked (RCCLX_CHECKS) against the buffer.
  RCCLX_HOST_DEVICE tile_allreduce(const core::peer_table<T, MaxRanks>& t, tile_slots slots, std::size_t tile_elems,
                                   int num_tiles, tile_reducer reducer = tile_reducer::same_block,
                                   std::size_t results_bytes = detail::default_results)
      : base(t, slots, tile_elems, num_tiles, reducer, results_bytes) {}

  // The call in region `r` of the buffers and pads (core/region.hpp; a region_plan hands them out,
  // sized by need()): its halves lie in [r.offset, r.offset + r.bytes), its flags in r.slots.
  RCCLX_HOST_DEVICE tile_allreduce(const core::peer_table<T, MaxRanks>& t, const core::region& r, std::size_t tile_elems,
                                   int num_tiles, tile_reducer reducer = tile_reducer::same_block,
                                   std::size_t results_bytes = detail::default_results)
      : base(t, r, tile_elems, num_tiles, reducer, results_bytes) {}

  // Declares the tile map this call's reduces will use (every block, before its first publish; a
  // map is a few integers). Checked mode (RCCLX_CHECKS): the map's fingerprint then goes out with
  // the call's, ahead of the flags, and the peers' flag waits find it there; an undeclared map is
  // published by the first reduce, after the flags, and a wait may take one more round trip for
  // it. A reduce with another map than the one declared is refused (errc::mismatch naming this
  // rank and the map's field). Unchecked builds: nothing.
  template <class Map>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void declare_map(const Map& map) {
#if RCCLX_CHECKS
    this->declare_map_fp(detail::map_fingerprint(map));
#else
    (void)map;
#endif
  }

  // What a call of up to max_tiles tiles of tile_elems elements needs of its region: workspace_bytes
  // of Algo (automatic: the tree formula), sized_for 1 (flat), 2 (tree) or 3 (automatic).
  using base::need;

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
    if (!map_fits<VecsPerThread>(g, tile, map, epi)) return false;
#if RCCLX_CHECKS
    const core::call_fingerprint map_fp = detail::map_fingerprint(map);  // checked beside the flags
    if (!wait_inputs(g, tile, &map_fp, map_owners())) return false;
#else
    if (!wait_inputs(g, tile)) return false;
    if (!map_agrees(g, tile, map)) return false;
#endif
    reduce_visit<VecsPerThread, PeersInFlight, Loads>(g, tile, map, epi, [](std::size_t, const gpu::vec16&) {});
    this->input_kept(g, tile);
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
#if RCCLX_CHECKS
    if (!this->parts_distinct(g, tile, parts, stride)) return false;
#endif
    if (!map_fits<VecsPerThread>(g, tile, map, epi)) return false;
#if RCCLX_CHECKS
    // The map's fingerprint is compared with the last part's call check (one round trip for both).
    const core::call_fingerprint map_fp = detail::map_fingerprint(map);
    const auto wait_parts = [&] {
      for (int q = 0; q < parts; ++q)
        if (!wait_inputs(g, tile + q * stride, q == parts - 1 ? &map_fp : nullptr, map_owners())) return false;
      return true;
    };
#else
    const auto wait_parts = [&] {
      for (int q = 0; q < parts; ++q)
        if (!wait_inputs(g, tile + q * stride)) return false;
      return map_agrees(g, tile, map);
    };
#endif
    if (!is_tree()) {
      if (!wait_parts()) return false;
      reduce_visit<VecsPerThread, PeersInFlight, Loads>(g, tile, map, epi, [](std::size_t, const gpu::vec16&) {},
                                                        parts, stride);
      this->input_kept(g, tile, parts, stride);
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
        this->input_kept(g, tile, parts, stride);
        return true;
      }
      if (!wait_result(g, tile) || !map_agrees(g, tile, map)) return false;
      const T* res = reinterpret_cast<const T*>(results(o)) + tile_off;
      visit<VecsPerThread>(g, tile, map, epi,
                           [&](std::size_t vi, gpu::vec16& v) { v = gpu::load16(res + vi * vec_elems); });
      this->input_kept(g, tile, parts, stride);
      return true;
    } else {
      return true;  // not reached: flat returned above
    }
  }

 private:
  using base::base_;
  using base::flags_;
  using base::is_tree;
  using base::num_tiles_;
  using base::t_;
  using base::tile_elems_;
  using base::tiles_per_owner;

  // Checked mode, group-collective, the audit thread's look (the others go on): the map fits this
  // call (its tiles, the vector width; otherwise an invalid_argument record), the epilogue's stages
  // accept the call (epi.check, when it has one: fused/stage_check.hpp; call = the fault's stage)
  // and the map is the one declared, or its fingerprint is published for the peers' map_agrees. A
  // misfit refuses the reduce at its wait's vote (map_bad_), before any output. False: the call
  // was refused already.
  template <int VPT, class Group, class Map, class Epilogue>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool map_fits(const Group& g, int tile, const Map& map, const Epilogue& epi) const {
#if RCCLX_CHECKS
    if (this->bad()) return false;
    // The audit thread's: a misfit refuses the reduce at the vote of its wait (before any output).
    if (g.thread_rank() != this->audit_thread(g)) return true;
    const core::call_fingerprint f = detail::map_fingerprint(map);
    core::misuse m{};
    std::uint32_t a = 0, b = 0, call = 0;
    stage_fault fault{}, row{};
    if constexpr (detail::is_row_wide<Epilogue>::value)
      row = detail::row_wide_fault<vec_elems>(map, static_cast<std::size_t>(g.size()) * VPT);
    if constexpr (detail::has_stage_check<Epilogue>::value) {
      fault = epi.check(this->stage_context_for(map));
      if (fault.what == core::misuse::stage_writes_symmetric) fault.b = static_cast<std::uint32_t>(rank());
    }
    if (detail::map_columns_checked(map) &&
               ((f.w[2] % static_cast<std::uint32_t>(vec_elems)) != 0 || (f.w[3] % static_cast<std::uint32_t>(vec_elems)) != 0)) {
      m = core::misuse::map_vector_width;
      a = f.w[3] % static_cast<std::uint32_t>(vec_elems) != 0 ? f.w[3] : f.w[2];
      b = static_cast<std::uint32_t>(vec_elems);
    } else if (const std::uint32_t tc = detail::ragged_tile_cols_misfit(map, vec_elems)) {
      m = core::misuse::map_vector_width;
      a = tc;
      b = static_cast<std::uint32_t>(vec_elems);
    } else if (detail::map_tile_misfit(map, tile_elems_)) {
      m = core::misuse::map_tile_too_large;
      a = static_cast<std::uint32_t>(map.tile_elems());
      b = static_cast<std::uint32_t>(tile_elems_);
    } else if (static_cast<std::size_t>(map.num_tiles()) > static_cast<std::size_t>(num_tiles_)) {
      m = core::misuse::map_too_many_tiles;
      a = static_cast<std::uint32_t>(map.num_tiles());
      b = static_cast<std::uint32_t>(num_tiles_);
    } else if (row) {  // a row-wide stage on tiles that are not whole rows, or rows the group cannot hold
      m = row.what;
      a = row.a;
      b = row.b;
      call = detail::row_wide_stage_of<Epilogue>::value;
    } else if (fault) {  // the map first: a stage's fault may only follow from a wrong map
      m = fault.what;
      a = fault.a;
      b = fault.b;
      call = fault.stage;
    }
    if (RCCLX_UNLIKELY(m != core::misuse{})) {
      core::record_error(t_->signals, errc::invalid_argument, t_->signals.rank, static_cast<std::uint32_t>(m), tile,
                         call, a, b);
      this->map_bad_ = true;
      return true;
    }
    if (this->map_declared_) {
      const core::call_fingerprint& d = this->map_fp_;
      if (RCCLX_UNLIKELY(d.w[0] != f.w[0] || d.w[1] != f.w[1] || d.w[2] != f.w[2] || d.w[3] != f.w[3])) {
        // Another map than the one declared (and published with the flags): a mismatch of this rank
        // with itself, the declared value first.
        core::detail::record_call_mismatch(t_->signals, tile, rank(), d, core::detail::as_vec(f), true);
        this->map_bad_ = true;
      }
    } else {
      flags_.publish_check(1, f);
    }
#else
    (void)g;
    (void)tile;
    (void)map;
    (void)epi;
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
    const core::call_fingerprint f = detail::map_fingerprint(map);
    const detail::hash_lanes l = this->lanes(g);
    bool ok = !l.in() || flags_.verify_packets(l.lane, l.lanes, tile, nullptr, &f, map_owners());
    if (g.thread_rank() == this->audit_thread(g) && this->map_bad_) ok = false;
    return !g.sync_or(!ok);
#else
    (void)g;
    (void)tile;
    (void)map;
    return true;
#endif
  }

  // The ranks that publish the map's fingerprint (map_agrees): flat every rank, tree the owners.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int map_owners() const {
    const int per = tiles_per_owner();
    return is_tree() && num_tiles_ > 0 ? (num_tiles_ + per - 1) / per : num_ranks();
  }

  // Every rank's input of `tile`, copied out of the table once (the table may live in global memory).
  RCCLX_HOST_DEVICE kernel::peer_ptrs<T, MaxRanks> sources(int tile) const {
    kernel::peer_ptrs<T, MaxRanks> src(*t_);
    const std::size_t off = base_ / sizeof(T) + static_cast<std::size_t>(tile) * tile_elems_;
    for (int j = 0; j < MaxRanks; ++j)
      if (j < src.n) src.p[j] += off;
    return src;
  }

  // visit() with every held vector summed over the ranks (then passed to `sink(vi, sum)`), and over
  // `parts` tiles tile, tile + part_stride, ... when parts > 1 (reduce_parts): the rank-order
  // reduction of kernel/reduce.hpp, parts outer and ranks inner.
  template <int VPT, int PeersInFlight, gpu::cache_hint Loads, class Group, class Map, class Epilogue, class Sink>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void reduce_visit(const Group& g, int tile, const Map& map, const Epilogue& epi,
                                                        Sink&& sink, int parts = 1, int part_stride = 0) const {
    static_assert(PeersInFlight >= 1, "rcclx::fused::tile_allreduce: PeersInFlight must be >= 1");
    constexpr int batch = kernel::peer_batch<kernel::peer_batch<MaxRanks>, PeersInFlight>;
    if constexpr (batch == kernel::peer_batch<MaxRanks>) {
      if (parts == 1) {
        // Every peer at once (the DDA kernels' loop): pointers copied out of the table once per tile.
        const auto src = sources(tile);
        visit<VPT>(g, tile, map, epi, [&](std::size_t vi, gpu::vec16& v) {
          v = kernel::reduce_vec<ReduceOp, Loads>(src, vi * vec_elems);
          sink(vi, v);
        });
        return;
      }
    }
    // `batch` peers at a time, addresses taken from the table at each use (no pointer array held
    // in registers).
    using traits = core::value_traits<T>;
    using acc_t = typename traits::acc_type;
    const int n = num_ranks();
    const std::size_t first = base_ / sizeof(T) + static_cast<std::size_t>(tile) * tile_elems_;
    const std::size_t part_step = static_cast<std::size_t>(part_stride) * tile_elems_;
    visit<VPT>(g, tile, map, epi, [&](std::size_t vi, gpu::vec16& out) {
      acc_t acc[vec_elems];  // set by part 0's rank 0 vector (n >= 1)
      kernel::rank_order<ReduceOp, acc_t, vec_elems> sum{acc};
      for (int q = 0; q < parts; ++q) {
        sum.fresh = q == 0;
        (void)kernel::fold_ranks<MaxRanks, batch>(
            kernel::make_vector_source<T, Loads>([&](int p) { return t_->data[p]; }, first + q * part_step + vi * vec_elems),
            n, sum);
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
};

}  // namespace fused
RCCLX_NAMESPACE_END
