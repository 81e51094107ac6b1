// rcclx/dda/detail/direct.hpp: the gather loop of the one-shot AllGather and AlltoAll, on the tile
// partition of kernel/layout.hpp (tile t of a range belongs to block t % num_blocks in every phase,
// so block b only reads what block b of a peer wrote): one vector from each of up to MaxRanks
// sources, all loads in flight, each stored to its own destination. Chunk offsets (r * count / N
// elements) need not be 16-byte aligned: `aligned` flags select the element-by-element path for a
// whole call, so the choice is uniform across the group.
#pragma once

#include <cstddef>

#include "../../kernel/layout.hpp"
#include "../../kernel/reduce.hpp"
#include "../../kernel/vector_io.hpp"

RCCLX_NAMESPACE_BEGIN
namespace dda {
namespace detail {

// Entry j: read from src[j], write to dst[j] (element offsets added by the loop); entries with a
// null src are skipped (the rank's own step of a mesh schedule).
template <class T, int MaxRanks>
struct gather_list {
  const T* src[MaxRanks];
  T* dst[MaxRanks];
  int n;
};

// For every owned vector: the loads of all n entries are issued (in batches of up to 8, in list
// order) before any store, so n x 16 bytes are in flight per thread.
template <class T, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void gather_owned(const kernel::layout<T>& l, int tid, kernel::tile_range r,
                                                      const gather_list<T, MaxRanks>& list, bool src_aligned,
                                                      bool dst_aligned) {
  constexpr int e = kernel::layout<T>::vec_elems;
  constexpr int batch = kernel::peer_batch<MaxRanks>;
  const int n = list.n;
  kernel::for_each_owned<1>(
      l, tid, r,
      [&](const std::size_t(&vi)[1], const bool(&ok)[1]) {
        if (!ok[0]) return;
        const std::size_t off = vi[0] * e;
        RCCLX_DETAIL_KERNEL_UNROLL
        for (int j0 = 0; j0 < MaxRanks; j0 += batch) {  // unrolled: constant indices, the list in registers
          if (j0 >= n) break;
          gpu::vec16 v[batch] = {};
          for (int j = 0; j < batch; ++j)
            if (j0 + j < n && list.src[j0 + j]) v[j] = kernel::load_vec(list.src[j0 + j] + off, src_aligned);
          for (int j = 0; j < batch; ++j)
            if (j0 + j < n && list.src[j0 + j]) kernel::store_vec(list.dst[j0 + j] + off, v[j], dst_aligned);
        }
      },
      [&](std::size_t pv) {
        for (int j = 0; j < MaxRanks; ++j) {  // constant indices: the list stays in registers
          if (j >= n) break;
          if (!list.src[j]) continue;
          for (int i = 0; i < l.partial_elems(); ++i) list.dst[j][pv * e + i] = list.src[j][pv * e + i];
        }
      });
}

}  // namespace detail
}  // namespace dda
RCCLX_NAMESPACE_END
