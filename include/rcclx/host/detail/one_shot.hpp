// rcclx/host/detail/one_shot.hpp: what communicator needs to know of each one-shot collective
// whose output blocks are strided by the whole count (AllGather, ReduceScatter, AlltoAll): its
// plain (rcclx::dda) and low-precision (rcclx::lpc) launchers and its output size. Their argument
// checks are launch_checks.hpp's.
//
//   using traits = rcclx::host::detail::one_shot<rcclx::host::detail::collective_kind::alltoall>;
//   traits::plain(table, n, in, out, count, rcclx::reduce_op::sum, stream);   // dda::alltoall
//
// A call of these cannot be cut into contiguous chunks (chunk k of rank p lands at p * count + k,
// not at p * chunk + k): a plain call that fits the workspace runs in one launch; a larger one runs
// in slices of every block (plain_sliced: dda/strided.hpp), each slice through the workspace.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

#include "../../core/ops.hpp"
#include "../../dda/allgather.hpp"
#include "../../dda/alltoall.hpp"
#include "../../dda/reduce_scatter.hpp"
#include "../../dda/strided.hpp"
#include "../../lpc/allgather.hpp"
#include "../../lpc/alltoall.hpp"
#include "../../lpc/reduce_scatter.hpp"
#include "call_check.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {
namespace detail {

// Every rcclx launcher comes in two forms: a table by value, launch(table, args...), and a table in
// device memory (captured graphs), launch(table_ptr, num_ranks, args...). `launch` is called with
// the table arguments of the form `table` has: launch(table) or launch(table, n).
template <class Table, class Launch>
inline void with_table(const Table& table, int n, Launch&& launch) {
  if constexpr (std::is_pointer<Table>::value) std::forward<Launch>(launch)(table, n);
  else std::forward<Launch>(launch)(table);
}

template <collective_kind Kind>
struct one_shot {
  static_assert(Kind == collective_kind::allgather || Kind == collective_kind::reduce_scatter ||
                    Kind == collective_kind::alltoall,
                "host::detail::one_shot: only allgather, reduce_scatter and alltoall");

  static constexpr lpc::collective lpc_kind = Kind == collective_kind::allgather ? lpc::collective::allgather
                                              : Kind == collective_kind::reduce_scatter ? lpc::collective::reduce_scatter
                                                                                         : lpc::collective::alltoall;
  static constexpr bool reduces = Kind == collective_kind::reduce_scatter;

  static std::size_t output_elems(std::size_t count, int n) {
    const std::size_t nn = static_cast<std::size_t>(n);
    return Kind == collective_kind::allgather ? count * nn : Kind == collective_kind::reduce_scatter ? count / nn : count;
  }

  // The launchers, for a table by value or (captured graphs) a pointer to one in device memory.
  template <class Table, class T>
  static void plain(const Table& t, int n, const T* in, T* out, std::size_t count, const reduce_spec& op,
                    gpu::stream_t s) {
    with_table(t, n, [&](const auto&... table) {
      if constexpr (Kind == collective_kind::allgather) dda::allgather(table..., in, out, count, s);
      else if constexpr (Kind == collective_kind::reduce_scatter) dda::reduce_scatter(table..., in, out, count, op, s);
      else dda::alltoall(table..., in, out, count, s);
    });
  }
  // Elements per slice of every block for a workspace of `capacity` bytes: the largest whole number
  // of 16-byte vectors whose slices fit (AllGather: one slice per rank; the others: num_ranks
  // slices). 0: not even one vector fits.
  template <class T>
  static std::size_t slice_elems(std::size_t capacity, int n) {
    const std::size_t per = capacity / sizeof(T) / (Kind == collective_kind::allgather ? 1 : static_cast<std::size_t>(n));
    const std::size_t e = 16 / sizeof(T);
    return per / e * e;
  }

  // A plain call of any size through the workspace of table t (by value), in slices.
  template <class T, int MaxRanks>
  static void plain_sliced(const core::peer_table<T, MaxRanks>& t, int n, const T* in, T* out, std::size_t count,
                           const reduce_spec& op, gpu::stream_t s) {
    const std::size_t nn = static_cast<std::size_t>(n);
    const std::size_t block = Kind == collective_kind::allgather ? count : count / nn;  // elements per block
    const std::size_t k = slice_elems<T>(t.capacity_bytes, n);
    for (std::size_t off = 0; off < block; off += k) {
      const std::size_t c = block - off < k ? block - off : k;
      if constexpr (Kind == collective_kind::allgather) dda::allgather_strided(t, in + off, out + off, c, block, s);
      else if constexpr (Kind == collective_kind::reduce_scatter)
        dda::reduce_scatter_strided(t, in + off, out + off, c, block, op, s);
      else dda::alltoall_strided(t, in + off, out + off, c, block, s);
    }
  }

  template <class Table, class T>
  static void low_precision(const Table& t, int n, const T* in, T* out, std::size_t count, reduce_op op,
                            gpu::stream_t s) {
    with_table(t, n, [&](const auto&... table) {
      if constexpr (Kind == collective_kind::allgather) lpc::allgather(table..., in, out, count, s);
      else if constexpr (Kind == collective_kind::reduce_scatter) lpc::reduce_scatter(table..., in, out, count, op, s);
      else lpc::alltoall(table..., in, out, count, s);
    });
  }
};

}  // namespace detail
}  // namespace host
RCCLX_NAMESPACE_END
