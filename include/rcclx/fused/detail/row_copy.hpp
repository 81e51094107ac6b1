// rcclx/fused/detail/row_copy.hpp: a block's rows of x into its symmetric buffer (the first step
// of the tile-flag AllReduce + RMSNorm kernels): 16-byte units with several loads in flight per
// thread before it stores, for one row (copy_units) or several (copy_rows).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../gpu/memory.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {
namespace detail {

// A unit of Bytes (4, 8 or 16) bytes, loaded and stored whole (16: one vector load / store).
template <int Bytes>
using unit_t =
    std::conditional_t<Bytes == 16, gpu::vec16, std::conditional_t<Bytes == 8, std::uint64_t, std::uint32_t>>;
template <int Bytes>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE unit_t<Bytes> load_unit(const void* base, std::size_t i) {
  const auto* p = static_cast<const unsigned char*>(base) + Bytes * i;
  if constexpr (Bytes == 16) return gpu::load16(p);
  else return *reinterpret_cast<const unit_t<Bytes>*>(p);
}
template <int Bytes>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store_unit(void* base, std::size_t i, const unit_t<Bytes>& v) {
  auto* p = static_cast<unsigned char*>(base) + Bytes * i;
  if constexpr (Bytes == 16) gpu::store16(p, v);
  else *reinterpret_cast<unit_t<Bytes>*>(p) = v;
}

// `units` units of Bytes (4, 8 or 16) bytes from src to dst, both aligned to Bytes, spread over the
// group; each thread has 4 loads in flight before it stores (src may be a peer's memory). Full
// batches run unconditionally (their registers stay registers: the gfx942 ISA check forbids
// scratch), the rest one unit at a time.
template <int Bytes, class Group>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void copy_units(const Group& g, void* dst, const void* src, std::size_t units) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "unit of 4, 8 or 16 bytes");
  constexpr std::size_t batch = 4;
  const std::size_t gs = static_cast<std::size_t>(g.size());
  std::size_t i = static_cast<std::size_t>(g.thread_rank());
  for (; i + (batch - 1) * gs < units; i += gs * batch) {
    const unit_t<Bytes> v0 = load_unit<Bytes>(src, i), v1 = load_unit<Bytes>(src, i + gs),
                        v2 = load_unit<Bytes>(src, i + 2 * gs), v3 = load_unit<Bytes>(src, i + 3 * gs);
    store_unit<Bytes>(dst, i, v0);
    store_unit<Bytes>(dst, i + gs, v1);
    store_unit<Bytes>(dst, i + 2 * gs, v2);
    store_unit<Bytes>(dst, i + 3 * gs, v3);
  }
  for (; i < units; i += gs) store_unit<Bytes>(dst, i, load_unit<Bytes>(src, i));
}

// `rows` rows of `units` 16-byte units each, row k from src_of(k) to dst_of(k) (16-byte aligned
// pointers; callables, e.g. a block's grid-stride rows), laid end to end and spread over the group:
// thread i copies units i, i + G, ... of the whole run with 4 loads in flight before it stores,
// across rows. A block with several short rows (8192 bf16 = 1024 units = 2 per thread of 512) then
// pays one load latency per 4 units, where copy_units row by row pays one per unit. (For a single
// row, copy_units measured 0.3-0.4 us faster on one H200.) The batch's registers are indexed by
// constants only (no scratch: the gfx942 ISA check).
template <class Group, class DstOf, class SrcOf>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void copy_rows(const Group& g, std::size_t rows, std::size_t units,
                                                   DstOf&& dst_of, SrcOf&& src_of) {
  constexpr int batch = 4;
  // Rows and units per row fit 32 bits (a call's rows, a row's vectors).
  const auto n_rows = static_cast<std::uint32_t>(rows), n_units = static_cast<std::uint32_t>(units);
  const auto gs = static_cast<std::uint32_t>(g.size()), tid = static_cast<std::uint32_t>(g.thread_rank());
  std::uint32_t k = tid / n_units, j = tid % n_units;  // this thread's next unit: unit j of row k
  const auto step = [&](std::uint32_t& row, std::uint32_t& col) {
    for (col += gs; col >= n_units; col -= n_units) ++row;
  };
  while (k < n_rows) {
    gpu::vec16 v[batch];
    std::uint32_t sk = k, sj = j;  // the batch's first unit again, for the stores
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
    for (int b = 0; b < batch; ++b) {
      if (k < n_rows) v[b] = load_unit<16>(src_of(k), j);
      step(k, j);
    }
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
    for (int b = 0; b < batch; ++b) {
      if (sk < n_rows) store_unit<16>(dst_of(sk), sj, v[b]);
      step(sk, sj);
    }
  }
}

}  // namespace detail
}  // namespace fused
RCCLX_NAMESPACE_END
