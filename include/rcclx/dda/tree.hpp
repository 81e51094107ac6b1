// rcclx/dda/tree.hpp: two-shot AllReduce by direct loads (reduce-scatter, then all-gather), as a
// device template over a thread group and a peer table: the large-message algorithm.
//
//   bool ok = rcclx::dda::tree_allreduce<rcclx::core::op_sum>(rcclx::gpu::block_group{}, table,
//                                                            in, out, count, blockIdx.x, gridDim.x);
//   if (!ok) return;   // a peer never arrived: the error is recorded in table.signals, leave
//
// Algorithm: the tiles of the message are split into N equal chunks, chunk c owned by rank c.
// Per block b (for the tiles it owns, see kernel/layout.hpp):
//   1. copy own input into own symmetric buffer (skipped when input already is that buffer)
//   2. start barrier
//   3. reduce-scatter: read own chunk r from all N buffers, reduce in rank order 0..N-1 (fp32),
//      write the result into own symmetric buffer (chunk r) and into output (chunk r)
//   4. mid barrier: every chunk is reduced
//   5. all-gather: read chunk q from rank q's buffer for q = r+1, r+2, ... (staggered so peers'
//      buffers are read evenly), write it into output
//   6. end barrier
// Steps: 3 barriers, 2 data phases. Traffic per rank for S bytes: reads S (input) + S (N chunks
// of S/N) + (N-1)*S/N (gathered chunks), writes S (symmetric copy) + 2*S/N (reduced chunk, twice)
// + (N-1)*S/N (gathered chunks): 5*S in all, of which 2*(N-1)*S/N cross to peers (the ring
// minimum); 3*S when the input is the symmetric buffer. Each chunk is reduced once, by its owner,
// so every rank holds the same bits (the same bits as flat_allreduce too).
//
// Preconditions: as flat_allreduce, except that output may be own symmetric buffer (in place on it):
// in the all-gather peers read only chunk r of this buffer, and chunk q was last read by rank q
// before the mid barrier.
#pragma once

#include <cstddef>

#include "../core/barrier.hpp"
#include "../core/call_check.hpp"
#include "../core/ops.hpp"
#include "../core/peer_table.hpp"
#include "../kernel/layout.hpp"
#include "../kernel/vector_io.hpp"
#include "detail/call_check.hpp"
#include "detail/tiles.hpp"

RCCLX_NAMESPACE_BEGIN
namespace dda {

// ReduceOp: core::op_sum, core::op_min or core::op_max (op: its value, the default; tree_allreduce_op
// passes product's, avg's and premul_sum's, dda/op_allreduce.hpp). Group-collective: every thread of
// g calls it. Returns false if a barrier timed out (the error is recorded; the caller must leave the
// kernel).
template <class ReduceOp, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE bool tree_allreduce(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input,
                                      T* output, std::size_t count, int block, int num_blocks, ReduceOp op = {}) {
  if (count == 0) return true;  // the same on every rank: no barrier needed
  const kernel::layout<T> l(count, g.size(), block, num_blocks);
  const int tid = g.thread_rank(), r = t.rank(), n = t.num_ranks();
  T* own = t.data[r];
  if (!detail::stage_input<ReduceOp>(g, t, algorithm::tree, l, tid, own, input, count, block, num_blocks)) return false;
  // Reduce-scatter: this rank's chunk, into its own buffer (for the peers) and its output.
  detail::reduce_owned(l, tid, kernel::chunk_tiles(l.tiles, n, r), t, output,
                       output == own ? static_cast<T*>(nullptr) : own, op);
  if (!core::barrier(g, t.signals, block, core::barrier_kind::mid)) return false;
  // All-gather: every other chunk from its owner.
  for (int s = 1; s < n; ++s) {
    const int q = r + s < n ? r + s : r + s - n;
    kernel::copy_owned(l, tid, kernel::chunk_tiles(l.tiles, n, q), static_cast<const T*>(t.data[q]), output);
  }
  return core::barrier(g, t.signals, block, core::barrier_kind::end);
}

}  // namespace dda
RCCLX_NAMESPACE_END
