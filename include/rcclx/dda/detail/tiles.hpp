// rcclx/dda/detail/tiles.hpp: the phases of the DDA collectives over the tile partition of
// kernel/layout.hpp (tile t of a range belongs to block t % num_blocks in every phase, so block b
// only reads what block b of a peer wrote): the barrier AllReduces' staging of the input, and the
// reduction on the rank-order reducer of kernel/reduce.hpp.
#pragma once

#include <cstddef>

#include "../../core/barrier.hpp"
#include "../../core/ops.hpp"
#include "../../core/peer_table.hpp"
#include "../../gpu/memory.hpp"
#include "../../kernel/layout.hpp"
#include "../../kernel/reduce.hpp"
#include "../../kernel/vector_io.hpp"
#include "call_check.hpp"

RCCLX_NAMESPACE_BEGIN
namespace dda {
namespace detail {

// The first phase of the barrier AllReduces (flat above the LL size, tree), group-collective: the
// call check (before the first store: the output may be this rank's symmetric buffer, and it stays
// untouched), own input into own symmetric buffer (skipped when the input is that buffer), the start
// barrier. False: a peer's call differs or never arrived (recorded; leave the kernel).
// tid: g.thread_rank(); own: this rank's symmetric buffer.
template <class ReduceOp, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool stage_input(const Group& g, const core::peer_table<T, MaxRanks>& t,
                                                     algorithm algo, const kernel::layout<T>& l, int tid, T* own,
                                                     const T* input, std::size_t count, int block, int num_blocks) {
  static_assert(core::is_reducible_v<T>,
                "rcclx::dda::flat_allreduce / tree_allreduce: T must be float, rcclx::bf16, rcclx::fp16 or int32_t");
  if (!allreduce_call_matches<T, ReduceOp>(g, t.signals, algo, count, block, num_blocks)) return false;
  if (input != own) kernel::copy_owned(l, tid, kernel::tile_range{0, l.tiles}, input, own);
  return core::barrier(g, t.signals, block, core::barrier_kind::start);
}

// Reduces the owned vectors of tiles r across src.p[0..n) (in rank order, with the op value `op`:
// kernel::reduce_vec_with; a default-constructed ReduceOp for sum, min and max) into out, and into
// out2 too when out2 is not null (tree: the rank's own symmetric buffer). src_aligned false (chunks
// of a ReduceScatter at offsets that are not 16-byte aligned): element by element.
template <class ReduceOp, class T, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void reduce_owned(const kernel::layout<T>& l, int tid, kernel::tile_range r,
                                                      const kernel::peer_ptrs<T, MaxRanks>& src, bool src_aligned,
                                                      T* out, T* out2, const ReduceOp& op) {
  constexpr int e = kernel::layout<T>::vec_elems;
  const bool out_aligned = gpu::is_aligned(out, 16);
  kernel::for_each_owned<1>(
      l, tid, r,
      [&](const std::size_t(&vi)[1], const bool(&ok)[1]) {
        if (!ok[0]) return;
        const std::size_t off = vi[0] * e;
        if (src_aligned) {
          const gpu::vec16 v = kernel::reduce_vec_with(src, off, op);
          kernel::store_vec(out + off, v, out_aligned);
          if (out2) gpu::store16(out2 + off, v);
        } else {
          for (int i = 0; i < e; ++i) out[off + i] = kernel::reduce_elem_with(src, off + i, op);
        }
      },
      [&](std::size_t pv) {
        for (int i = 0; i < l.partial_elems(); ++i) {
          const T x = kernel::reduce_elem_with(src, pv * e + i, op);
          out[pv * e + i] = x;
          if (out2) out2[pv * e + i] = x;
        }
      });
}

// The same from every rank's symmetric buffer (the table's; 16-byte aligned).
template <class ReduceOp, class T, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void reduce_owned(const kernel::layout<T>& l, int tid, kernel::tile_range r,
                                                      const core::peer_table<T, MaxRanks>& t, T* out, T* out2,
                                                      const ReduceOp& op) {
  reduce_owned(l, tid, r, kernel::peer_ptrs<T, MaxRanks>(t), true, out, out2, op);
}

}  // namespace detail
}  // namespace dda
RCCLX_NAMESPACE_END
