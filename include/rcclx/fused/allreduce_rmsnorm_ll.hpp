// rcclx/fused/allreduce_rmsnorm_ll.hpp: AllReduce + residual add + RMSNorm over the LL protocol
// (core/ll.hpp): the one-shot and two-shot variants of fused::allreduce_rmsnorm's blocks.
//
//   // in a kernel of BlockThreads threads per block, the same grid on every rank, rows fitting the LL regions:
//   if (rcclx::fused::rmsnorm_uses_ll<T>(t.signals, a.tokens, a.hidden, gridDim.x))
//     ok = rcclx::fused::allreduce_rmsnorm_ll_block<vpt, 512>(rcclx::gpu::block_group{}, t, a, blockIdx.x, gridDim.x);
//
// The same bits as the tile-flag blocks of fused/allreduce_rmsnorm.hpp and the unfused path. The
// launchers do not pick them (measured slower on one H200, see below); they are device templates
// for kernels where fences cost more.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../core/ll.hpp"
#include "../core/ops.hpp"
#include "../core/peer_table.hpp"
#include "../gpu/memory.hpp"
#include "../kernel/ll_reduce.hpp"
#include "rmsnorm_args.hpp"
#include "stages.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {

// The flat variant over the LL one-shot (core/ll.hpp), for a kernel whose rows fit the LL regions
// (rmsnorm_uses_ll): each block writes its rows of x as LL packets into its own LL region, then per row
// loads every peer's packets as they land (no flag round trip, no fence), sums in rank order in
// FP32 (own row from x), and runs the same epilogue. Steps: 1. Traffic per rank: reads S (x) +
// 2(N-1)S (packets) + S (residual), writes 2S (packets) + S (residual) + S_out. Neither the
// symmetric buffer nor the tile slots are touched. Same bits as the flat block. Measured on one H200
// with 8 emulated ranks (docs/fusion.md) it is slower than the tile-flag flat block: one block
// reads every peer's whole row, and LL packets double those bytes; the launchers do not use it.
template <int VecsPerThread, int BlockThreads, class T, class Out, int MaxRanks, class Group>
RCCLX_HOST_DEVICE bool allreduce_rmsnorm_ll_block(const Group& g, const core::peer_table<T, MaxRanks>& t,
                                                  const rmsnorm_args<T, Out>& a, int block, int num_blocks) {
  using traits = core::value_traits<T>;
  constexpr int e = gpu::elems_per_vec16<T>;
  const core::signal_pads<MaxRanks>& s = t.signals;
  const std::size_t hidden = a.hidden, vecs = hidden / e;
  const std::size_t gs = static_cast<std::size_t>(g.size()), tid = static_cast<std::size_t>(g.thread_rank());
  const std::size_t nb = static_cast<std::size_t>(num_blocks);
  const row_tiles map{a.tokens, hidden};
  const std::uint32_t flag = core::ll_begin(g, s, block);
  unsigned char* own = s.ll_region(s.rank, flag, block);
  // Row i is the block's (i / num_blocks)-th: its packets start at (i / num_blocks) * vecs.
  for (std::size_t i = static_cast<std::size_t>(block); i < a.tokens; i += nb)
    for (std::size_t vi = tid; vi < vecs; vi += gs)
      core::ll_write(own, i / nb * vecs + vi, gpu::load16(a.input + i * hidden + vi * e), flag, s.ll_block_bytes);
  const core::ll_halves<MaxRanks> h(s, flag, block);
  const auto epi = detail::make_rmsnorm_epilogue<T, Out, BlockThreads>(a, a.residual, a.output);
  bool failed = false;
  for (std::size_t i = static_cast<std::size_t>(block); i < a.tokens; i += nb) {
    float v[VecsPerThread][e];
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
    for (int k = 0; k < VecsPerThread; ++k) {
      const std::size_t vi = static_cast<std::size_t>(k) * gs + tid;  // the vectors add_rmsnorm holds
      if (vi < vecs && !failed) {
        gpu::vec16 r;
        failed = !kernel::ll_reduce_vec<core::op_sum, T>(s, h, i / nb * vecs + vi, gpu::load16(a.input + i * hidden + vi * e),
                                                         flag, block, r);
        if (!failed) traits::unpack(r, v[k]);
      }
    }
    if (g.sync_or(failed)) return false;  // uniform before the epilogue's block reductions
    epi(g, v, held_vectors<row_tiles, e>{map, i, tid, gs, vecs});
  }
  return !g.sync_or(failed);
}

// The LL two-shot: tree over the LL protocol (core/ll.hpp). Each row is cut into N slices of whole
// vectors (slice c = vectors [c V / N, (c + 1) V / N), V = hidden / vector width); rank c owns
// slice c of every row. Per block and row (rows block, block + num_blocks, ... as in the flat block):
//   1. the block writes its row of x as LL packets (whole row, packet = vector index);
//   2. the owner of slice c sums slice c of every rank's packets in rank order in FP32 (own part
//      from x), rounds once to T, adds the residual in FP32, rounds once to T (the new residual),
//      and publishes those vectors as LL packets;
//   3. every rank loads the whole new-residual row from its owners' packets, writes it, and runs the
//      RMSNorm and output stages over it with exactly the thread layout of fused::add_rmsnorm.
// So the bits equal the unfused path (dda AllReduce, then add_rmsnorm) and the tile-flag kernels,
// on every rank. No flag round trip, no fence, no symmetric buffer, no tile slots: two dependent
// packet latencies. Traffic per rank, S = tokens * hidden * sizeof(T): reads S (x) + 2S (packets of
// its slices) + 2S (the new-residual packets) + S/N (residual), writes 2S + 2S/N (packets) + S
// (residual) + S_out. LL region payload per block: rows_per_block * (V + ceil(V / N)) * 16 bytes
// (rmsnorm_uses_ll2). Group-collective; same launch rules as allreduce_rmsnorm_block; returns false
// if a peer never arrived (recorded with barrier_kind::ll).
// Measured on one H200 with 8 emulated ranks (docs/fusion.md) it is slower than the tile-flag
// kernels at every decode and prefill shape (1 x 4096: 9.3 against 7.5 us; 64 x 4096: 27.9 against
// 17.0 us): its two packet latencies cost more than one flag round trip, and LL doubles the bytes.
// The launchers do not pick it; it is a device template you may call where fences are dearer.
namespace detail {
// First vector of slice c of a row of `vecs` vectors cut into n slices.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::size_t ll2_slice_begin(std::size_t vecs, int n, int c) {
  return vecs * static_cast<std::size_t>(c) / static_cast<std::size_t>(n);
}
// The slice (owner) of vector vi: the c with slice_begin(c) <= vi < slice_begin(c + 1).
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int ll2_owner(std::size_t vecs, int n, std::size_t vi) {
  return static_cast<int>(((vi + 1) * static_cast<std::size_t>(n) + vecs - 1) / vecs) - 1;
}
// Packets one row takes in a block's LL region: the row of x, then this rank's slice results.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::size_t ll2_row_packets(std::size_t vecs, int n) {
  return vecs + (vecs + static_cast<std::size_t>(n) - 1) / static_cast<std::size_t>(n);
}
}  // namespace detail

template <int VecsPerThread, int BlockThreads, class T, class Out, int MaxRanks, class Group>
RCCLX_HOST_DEVICE bool allreduce_rmsnorm_ll2_block(const Group& g, const core::peer_table<T, MaxRanks>& t,
                                                   const rmsnorm_args<T, Out>& a, int block, int num_blocks) {
  using traits = core::value_traits<T>;
  constexpr int e = gpu::elems_per_vec16<T>;
  const core::signal_pads<MaxRanks>& s = t.signals;
  const int n = s.num_ranks, me = s.rank;
  const std::size_t hidden = a.hidden, vecs = hidden / e;
  const std::size_t gs = static_cast<std::size_t>(g.size()), tid = static_cast<std::size_t>(g.thread_rank());
  const std::size_t nb = static_cast<std::size_t>(num_blocks);
  const std::size_t row_packets = detail::ll2_row_packets(vecs, n);
  const std::size_t lo = detail::ll2_slice_begin(vecs, n, me), hi = detail::ll2_slice_begin(vecs, n, me + 1);
  const std::uint32_t flag = core::ll_begin(g, s, block);
  unsigned char* own = s.ll_region(me, flag, block);
  // 1. This block's rows of x, whole (every owner reads its slice of them).
  for (std::size_t i = static_cast<std::size_t>(block), k = 0; i < a.tokens; i += nb, ++k)
    for (std::size_t vi = tid; vi < vecs; vi += gs)
      core::ll_write(own, k * row_packets + vi, gpu::load16(a.input + i * hidden + vi * e), flag, s.ll_block_bytes);
  const core::ll_halves<MaxRanks> h(s, flag, block);
  bool failed = false;
  // 2. This rank's slice of those rows: summed over the ranks, plus the residual, published.
  for (std::size_t i = static_cast<std::size_t>(block), k = 0; i < a.tokens && !failed; i += nb, ++k) {
    for (std::size_t vi = lo + tid; vi < hi && !failed; vi += gs) {
      const std::size_t off = i * hidden + vi * e;
      gpu::vec16 sum;
      failed = !kernel::ll_reduce_vec<core::op_sum, T>(s, h, k * row_packets + vi, gpu::load16(a.input + off), flag,
                                                       block, sum);
      if (failed) break;
      float v[e], r[e];
      traits::unpack(sum, v);  // the AllReduce result, rounded once to T
      traits::unpack(gpu::load16(a.residual + off), r);
      for (int j = 0; j < e; ++j) r[j] = v[j] + r[j];
      core::ll_write(own, k * row_packets + vecs + (vi - lo), traits::pack(r), flag, s.ll_block_bytes);
    }
  }
  if (g.sync_or(failed)) return false;
  // 3. Every row whole from its owners, then the epilogue of add_rmsnorm minus its residual add: the
  //    new residual is stored as loaded (already rounded), so the stages see add_rmsnorm's values.
  const epilogue<store<T>, rms_norm<T, BlockThreads>, typename detail::output_of<T, Out>::stage> epi(
      store<T>{a.residual, hidden}, detail::make_rmsnorm_stage<T, Out, BlockThreads>(a),
      detail::make_output_stage(a, a.output));
  const row_tiles map{a.tokens, hidden};
  for (std::size_t i = static_cast<std::size_t>(block), k = 0; i < a.tokens; i += nb, ++k) {
    // Vector vi of row k's new residual: packet `return` of its owner c's region.
    const auto packet_of = [&](std::size_t vi, int& c) {
      c = detail::ll2_owner(vecs, n, vi);
      return k * row_packets + vecs + (vi - detail::ll2_slice_begin(vecs, n, c));
    };
    gpu::vec16 got[VecsPerThread];
    bool landed[VecsPerThread];
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
    for (int q = 0; q < VecsPerThread; ++q) {  // every load issued before any wait
      const std::size_t vi = static_cast<std::size_t>(q) * gs + tid;
      landed[q] = true;
      if (vi >= vecs) continue;
      int c;
      const std::size_t idx = packet_of(vi, c);
      landed[q] = core::ll_try_read(h.pick(c), idx, flag, got[q], h.split);
    }
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
    for (int q = 0; q < VecsPerThread; ++q) {
      if (landed[q] || failed) continue;
      int c;
      const std::size_t idx = packet_of(static_cast<std::size_t>(q) * gs + tid, c);
      failed = !core::ll_wait_from(s, h.pick(c), c, idx, flag, block, got[q]);
    }
    if (g.sync_or(failed)) return false;  // uniform before the epilogue's block reduction
    float v[VecsPerThread][e];
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
    for (int q = 0; q < VecsPerThread; ++q)
      if (static_cast<std::size_t>(q) * gs + tid < vecs) traits::unpack(got[q], v[q]);
    epi(g, v, held_vectors<row_tiles, e>{map, i, tid, gs, vecs});
  }
  return !g.sync_or(false);
}

// Does the LL two-shot (allreduce_rmsnorm_ll2_block) of this shape and grid fit these pads' LL
// regions? The same answer on every rank (same pads layout, same arguments).
template <class T, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool rmsnorm_uses_ll2(const core::signal_pads<MaxRanks>& s, std::size_t tokens,
                                                          std::size_t hidden, int num_blocks) {
  if (num_blocks < 1 || tokens == 0 || s.num_ranks < 1) return false;
  const std::size_t nb = static_cast<std::size_t>(num_blocks);
  const std::size_t rows = (tokens + nb - 1) / nb;
  return core::ll_fits(s, num_blocks,
                       rows * detail::ll2_row_packets(hidden / gpu::elems_per_vec16<T>, s.num_ranks) * 16);
}

// Does a flat allreduce_rmsnorm of this shape and grid run the LL one-shot on these pads? Block b
// publishes rows b, b + num_blocks, ...: the busiest block's rows must fit one LL region.
template <class T, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool rmsnorm_uses_ll(const core::signal_pads<MaxRanks>& s, std::size_t tokens,
                                                         std::size_t hidden, int num_blocks) {
  if (num_blocks < 1) return false;
  const std::size_t nb = static_cast<std::size_t>(num_blocks);
  return core::ll_fits(s, num_blocks, (tokens + nb - 1) / nb * hidden * sizeof(T));
}

}  // namespace fused
RCCLX_NAMESPACE_END
