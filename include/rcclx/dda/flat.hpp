// rcclx/dda/flat.hpp: one-shot AllReduce by direct loads, as a device template over a thread group
// and a peer table: the small-message algorithm (decode-time AllReduce), usable inside your kernel.
//
//   // in a kernel launched with the same grid on every rank:
//   bool ok = rcclx::dda::flat_allreduce<rcclx::core::op_sum>(rcclx::gpu::block_group{}, table,
//                                                            in, out, count, blockIdx.x, gridDim.x);
//   if (!ok) return;   // a peer never arrived: the error is recorded in table.signals, leave
//
// Algorithm (per block b, for the tiles it owns, see dda/detail/tiles.hpp):
//   1. copy own input into own symmetric buffer (skipped when input already is that buffer)
//   2. start barrier (block b of every rank)
//   3. read the same tiles from all N symmetric buffers (16-byte loads, up to 8 peers in flight),
//      reduce in rank order 0..N-1 in fp32 (int32 for int32), write the full result to output
//   4. end barrier: nobody overwrites a buffer a peer is still reading
// Steps: 2 barriers, 1 data phase. Traffic per rank for S bytes: reads S (input) + N*S (all
// buffers, of which (N-1)*S from peers), writes S (symmetric copy) + S (output); the copy
// disappears when the input is the symmetric buffer. Latency-bound for small S: one round trip of
// peer loads between two barriers. Results are bit-identical on every rank (and to tree_allreduce).
//
// Preconditions (the host launcher dda::allreduce checks them): the same count, group size and
// num_blocks on every rank; block < table.signals.max_blocks; table.data[p] 16-byte aligned;
// count <= table.capacity(); input and output aligned to sizeof(T), each either equal to or disjoint
// from the other and from own symmetric buffer, and output != own symmetric buffer (peers read it
// while this rank writes its result: use tree_allreduce for that).
#pragma once

#include <cstddef>

#include "../core/barrier.hpp"
#include "../core/ops.hpp"
#include "../core/peer_table.hpp"
#include "detail/tiles.hpp"

RCCLX_NAMESPACE_BEGIN
namespace dda {

// ReduceOp: core::op_sum, core::op_min or core::op_max. Group-collective: every thread of g calls it.
// Returns false if a barrier timed out (the error is recorded; the caller must leave the kernel).
template <class ReduceOp, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE bool flat_allreduce(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input,
                                      T* output, std::size_t count, int block, int num_blocks) {
  static_assert(core::is_reducible_v<T>, "dda::flat_allreduce: T must be float, rcclx::bf16, rcclx::fp16 or int32_t");
  if (count == 0) return true;  // the same on every rank: no barrier needed
  const detail::layout<T> l(count, g.size(), block, num_blocks);
  const int tid = g.thread_rank();
  const detail::tile_range all{0, l.tiles};
  T* own = t.data[t.rank()];
  if (input != own) detail::copy_owned(l, tid, all, input, own);
  if (!core::barrier(g, t.signals, block, core::barrier_kind::start)) return false;
  detail::reduce_owned<ReduceOp>(l, tid, all, t, output, static_cast<T*>(nullptr));
  return core::barrier(g, t.signals, block, core::barrier_kind::end);
}

}  // namespace dda
RCCLX_NAMESPACE_END
