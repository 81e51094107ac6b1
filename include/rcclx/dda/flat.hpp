// rcclx/dda/flat.hpp: one-shot AllReduce by direct loads, as a device template over a thread group
// and a peer table: the small-message algorithm (decode-time AllReduce), usable inside your kernel.
//
//   // in a kernel launched with the same grid on every rank:
//   bool ok = rcclx::dda::flat_allreduce<rcclx::core::op_sum>(rcclx::gpu::block_group{}, table,
//                                                            in, out, count, blockIdx.x, gridDim.x);
//   if (!ok) return;   // a peer never arrived: the error is recorded in table.signals, leave
//
// flat_allreduce runs one of two protocols, chosen per call from the pads (the same on every rank):
//
// LL one-shot (flat_allreduce_ll; when each block has one tile and it fits its LL region,
// flat_uses_ll): no barrier.
//   1. write own input as LL packets (data + flag in each 64-bit word, core/ll.hpp) into the block's
//      own LL region (its owned tiles back to back)
//   2. per owned vector: load the packets of every peer (up to 8 peers in flight), re-poll the ones
//      whose flags are not this call's yet (bounded), reduce in rank order 0..N-1 in fp32 (own data
//      from the input), write the result.
//   Steps: 1, no fence and no flag round trip: a peer's data is usable the moment it lands. Traffic
//   per rank for S bytes: reads S (input, twice) + 2(N-1)S (peers' packets), writes 2S (packets) + S
//   (output). The symmetric buffer is not used: input and output may be any memory (including the
//   symmetric buffer), in place or not.
//
// Barrier one-shot (flat_allreduce_barrier; larger messages or pads without an LL region):
//   1. copy own input into own symmetric buffer (skipped when input already is that buffer)
//   2. start barrier (block b of every rank)
//   3. read the same tiles from all N symmetric buffers (16-byte loads, up to 8 peers in flight),
//      reduce in rank order 0..N-1 in fp32 (int32 for int32), write the full result to output
//   4. end barrier: nobody overwrites a buffer a peer is still reading
//   Steps: 2 barriers, 1 data phase. Traffic per rank: reads S (input) + N*S (all buffers, (N-1)*S
//   from peers), writes S (symmetric copy) + S (output); the copy disappears when the input is the
//   symmetric buffer. Output must not be own symmetric buffer (peers read it meanwhile).
//
// Both give the same bits on every rank (and the same as tree_allreduce): the same values, added in
// the same order. Element positions are split between blocks by tiles (kernel/layout.hpp).
//
// Preconditions (the host launcher dda::allreduce checks them): the same count, group size and
// num_blocks on every rank; block < table.signals.max_blocks; table.data[p] 16-byte aligned;
// count <= table.capacity() (barrier protocol); input and output aligned to sizeof(T), each either
// equal to or disjoint from the other (and, barrier protocol, from own symmetric buffer).
#pragma once

#include <cstddef>

#include "../core/barrier.hpp"
#include "../core/call_check.hpp"
#include "../core/ll.hpp"
#include "../core/ops.hpp"
#include "../core/peer_table.hpp"
#include "../kernel/layout.hpp"
#include "../kernel/ll_reduce.hpp"
#include "../kernel/vector_io.hpp"
#include "detail/call_check.hpp"
#include "detail/tiles.hpp"

RCCLX_NAMESPACE_BEGIN
namespace dda {

namespace detail {

// The LL protocol's epoch of a call (and, in the checked mode, its fingerprint and check flag,
// core/call_check.hpp), loaded where the caller wants the round trip to start.
struct ll_call {
  std::uint32_t flag;
#if RCCLX_CHECKS
  std::uint32_t cflag;
  core::call_fingerprint fp;
#endif
};
template <class T, class ReduceOp, class Group, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE ll_call begin_ll(const Group& g, const core::signal_pads<MaxRanks>& s, int block,
                                                     std::size_t count, int num_blocks) {
  ll_call c;
#if RCCLX_CHECKS
  c.fp = allreduce_fingerprint<T, ReduceOp>(algorithm::flat, count, num_blocks, g);
  c.cflag = core::check_ll_begin(g, s, block, c.fp, c.flag);
#else
  (void)count;
  (void)num_blocks;
  c.flag = core::ll_begin(g, s, block);
#endif
  return c;
}

}  // namespace detail

// Packets each block publishes for `count` elements: the owned tiles of the busiest block.
template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::size_t ll_block_bytes_for(std::size_t count, int group_size, int num_blocks) {
  const kernel::layout<T> l(count, group_size, 0, num_blocks);
  const std::size_t nb = static_cast<std::size_t>(num_blocks);
  return (l.tiles + nb - 1) / nb * static_cast<std::size_t>(group_size) * 16;
}

// Does a flat call of `count` elements with this grid run the LL one-shot on these pads? Only when
// every thread publishes at most one vector (one tile per block: the latency path) and the tile fits
// a region. Measured on the H200 (8 emulated ranks, docs/performance.md): the LL one-shot takes 4.0
// us against 6.2 us for the barrier protocol up to 4 KiB, 5.9 against 7.4 at 64 KiB, even at 128
// KiB; with two tiles per block (256 KiB) its doubled bytes cost more than the barriers (14.3
// against 9.8 us).
template <class T, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool flat_uses_ll(const core::signal_pads<MaxRanks>& s, std::size_t count,
                                                      int group_size, int num_blocks) {
  // One tile per block: every block publishes at most one tile, group_size x 16 bytes.
  const kernel::layout<T> l(count, group_size, 0, num_blocks);
  return l.tiles <= static_cast<std::size_t>(num_blocks) &&
         core::ll_fits(s, num_blocks, static_cast<std::size_t>(group_size) * 16);
}

// The LL one-shot (see the header comment). Needs flat_uses_ll.
// ReduceOp: core::op_sum, op_min or op_max. Group-collective. False if a peer never arrived.
template <class ReduceOp, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE bool flat_allreduce_ll(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input,
                                         T* output, std::size_t count, int block, int num_blocks) {
  static_assert(core::is_reducible_v<T>, "dda::flat_allreduce_ll: T must be float, rcclx::bf16, rcclx::fp16 or int32_t");
  if (count == 0) return true;  // the same on every rank: no call, no epoch
  constexpr int e = gpu::elems_per_vec16<T>;
  const core::signal_pads<MaxRanks>& s = t.signals;
  const kernel::layout<T> l(count, g.size(), block, num_blocks);
  const int tid = g.thread_rank();
  const bool in_aligned = gpu::is_aligned(input, 16), out_aligned = gpu::is_aligned(output, 16);
  if (l.tiles <= static_cast<std::size_t>(num_blocks)) {
    // Latency path (at most one vector per thread: every small message): the input load is issued
    // before the epoch load, so the two round trips overlap; vector block * G + tid is packet tid.
    const std::size_t vi = static_cast<std::size_t>(block) * static_cast<std::size_t>(l.tile_vecs) + tid;
    const bool full = vi < l.full_vecs, part = !full && vi == l.full_vecs && l.has_partial();
    gpu::vec16 mine{};
    if (full) mine = kernel::load_vec(input + vi * e, in_aligned);
    else if (part) mine = kernel::load_partial(input, vi, l.partial_elems());
    const detail::ll_call c = detail::begin_ll<T, ReduceOp>(g, s, block, count, num_blocks);
    const std::uint32_t flag = c.flag;
    bool failed = false;
    gpu::vec16 r{};
    if (full || part) {
      core::ll_write(s.ll_region(s.rank, flag, block), static_cast<std::size_t>(tid), mine, flag, s.ll_block_bytes);
      const core::ll_halves<MaxRanks> h(s, flag, block);
#if RCCLX_CHECKS
      // The peer's fingerprint (peer = thread rank) is loaded with the data packets and waited for in
      // the same loop; a group smaller than the rank count compares every other peer's first.
      if (g.size() < s.num_ranks) failed = !core::check_verify(g, s, block, c.cflag, c.fp, block);
      if (!failed)
        failed = !kernel::ll_reduce_vec<ReduceOp, T>(s, h, static_cast<std::size_t>(tid), mine, flag, block, r,
                                                     core::check_poller<MaxRanks>(g, s, block, c.cflag, c.fp, block));
#else
      failed = !kernel::ll_reduce_vec<ReduceOp, T>(s, h, static_cast<std::size_t>(tid), mine, flag, block, r);
#endif
    }
#if RCCLX_CHECKS
    else {
      failed = !core::check_verify(g, s, block, c.cflag, c.fp, block);
    }
    // No thread writes output unless every peer matched: the one vote of the call comes before the
    // stores (it also orders the counters' advance before the next call's reads).
    if (g.sync_or(failed)) return false;
    if (full) kernel::store_vec(output + vi * e, r, out_aligned);
    if (part) kernel::store_partial(output, vi, l.partial_elems(), r);
    return true;
#else
    if (!failed && full) kernel::store_vec(output + vi * e, r, out_aligned);
    if (!failed && part) kernel::store_partial(output, vi, l.partial_elems(), r);
    return !g.sync_or(failed);
#endif
  }
  const detail::ll_call c = detail::begin_ll<T, ReduceOp>(g, s, block, count, num_blocks);
  const std::uint32_t flag = c.flag;
  const kernel::tile_range all{0, l.tiles};
  unsigned char* own = s.ll_region(s.rank, flag, block);
  // Owned vector vi (tile vi / G, the block's (vi / G) / num_blocks-th) is packet `local(vi)`.
  const std::size_t g_size = static_cast<std::size_t>(l.tile_vecs), nb = static_cast<std::size_t>(num_blocks);
  const auto local = [&](std::size_t vi) { return (vi / g_size) / nb * g_size + vi % g_size; };
  // 1. Publish this rank's owned vectors.
  kernel::for_each_owned<1>(
      l, tid, all,
      [&](const auto& vi, const auto& ok) {
        if (ok[0]) core::ll_write(own, local(vi[0]), kernel::load_vec(input + vi[0] * e, in_aligned), flag, s.ll_block_bytes);
      },
      [&](std::size_t pv) { core::ll_write(own, local(pv), kernel::load_partial(input, pv, l.partial_elems()), flag, s.ll_block_bytes); });
#if RCCLX_CHECKS
  if (g.sync_or(!core::check_verify(g, s, block, c.cflag, c.fp, block))) return false;
#endif
  // 2. Reduce them from every rank's packets as they arrive.
  const core::ll_halves<MaxRanks> h(s, flag, block);
  bool failed = false;
  kernel::for_each_owned<1>(
      l, tid, all,
      [&](const auto& vi, const auto& ok) {
        if (!ok[0] || failed) return;
        gpu::vec16 r;
        const gpu::vec16 mine = kernel::load_vec(input + vi[0] * e, in_aligned);
        failed = !kernel::ll_reduce_vec<ReduceOp, T>(s, h, local(vi[0]), mine, flag, block, r);
        if (!failed) kernel::store_vec(output + vi[0] * e, r, out_aligned);
      },
      [&](std::size_t pv) {
        if (failed) return;
        gpu::vec16 r;
        const gpu::vec16 mine = kernel::load_partial(input, pv, l.partial_elems());
        failed = !kernel::ll_reduce_vec<ReduceOp, T>(s, h, local(pv), mine, flag, block, r);
        if (!failed) kernel::store_partial(output, pv, l.partial_elems(), r);
      });
  return !g.sync_or(failed);
}

// The barrier one-shot (see the header comment). op: the reduction's value (sum, min and max: the
// default; flat_allreduce_op passes product's, avg's and premul_sum's, dda/op_allreduce.hpp).
template <class ReduceOp, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE bool flat_allreduce_barrier(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input,
                                              T* output, std::size_t count, int block, int num_blocks,
                                              ReduceOp op = {}) {
  if (count == 0) return true;  // the same on every rank: no barrier needed
  const kernel::layout<T> l(count, g.size(), block, num_blocks);
  const int tid = g.thread_rank();
  const kernel::tile_range all{0, l.tiles};
  if (!detail::stage_input<ReduceOp>(g, t, algorithm::flat, l, tid, t.data[t.rank()], input, count, block, num_blocks))
    return false;
  detail::reduce_owned(l, tid, all, t, output, static_cast<T*>(nullptr), op);
  return core::barrier(g, t.signals, block, core::barrier_kind::end);
}

// ReduceOp: core::op_sum, core::op_min or core::op_max. Group-collective: every thread of g calls it.
// Returns false if a peer never arrived (the error is recorded; the caller must leave the kernel).
template <class ReduceOp, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE bool flat_allreduce(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input,
                                      T* output, std::size_t count, int block, int num_blocks) {
  if (flat_uses_ll<T>(t.signals, count, g.size(), num_blocks)) return flat_allreduce_ll<ReduceOp>(g, t, input, output, count, block, num_blocks);
  return flat_allreduce_barrier<ReduceOp>(g, t, input, output, count, block, num_blocks);
}

}  // namespace dda
RCCLX_NAMESPACE_END
