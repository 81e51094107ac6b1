// rcclx/dda/partition.hpp: which elements a thread of a block owns in the DDA collectives, so a
// fused kernel can produce its AllReduce input (or consume its output) with the same ownership.
//
//   // producer writing straight into this rank's symmetric buffer, then the AllReduce:
//   rcclx::dda::for_each_owned<float>(g, count, blockIdx.x, gridDim.x, [&](std::size_t i, int n) {
//     for (int k = 0; k < n; ++k) t.data[t.rank()][i + k] = my_value(i + k);
//   });
//   rcclx::dda::flat_allreduce<rcclx::core::op_sum>(g, t, t.data[t.rank()], out, count, blockIdx.x, gridDim.x);
//
// Why it matters: barriers pair block b of every rank only, so the data block b of a peer reads
// must have been written by block b of that peer. Elements are owned per 16-byte vector, vectors
// per tile of g.size() vectors, tile t by block t % num_blocks (kernel/layout.hpp); a thread
// owns the same elements before and after the collective (its output elements too), so a producer
// or an epilogue written with for_each_owned needs no extra synchronisation.
#pragma once

#include <cstddef>

#include "../kernel/layout.hpp"

RCCLX_NAMESPACE_BEGIN
namespace dda {

// Calls f(first_element, elements) for every group of consecutive elements (one 16-byte vector of
// T, fewer for the last one) that the calling thread of block `block` owns among `count` elements.
template <class T, class Group, class F>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void for_each_owned(const Group& g, std::size_t count, int block, int num_blocks,
                                                        F&& f) {
  const kernel::layout<T> l(count, g.size(), block, num_blocks);
  constexpr int e = kernel::layout<T>::vec_elems;
  kernel::for_each_owned<1>(
      l, g.thread_rank(), kernel::tile_range{0, l.tiles},
      [&](const std::size_t(&vi)[1], const bool(&ok)[1]) {
        if (ok[0]) f(vi[0] * e, e);
      },
      [&](std::size_t pv) { f(pv * e, l.partial_elems()); });
}

}  // namespace dda
RCCLX_NAMESPACE_END
