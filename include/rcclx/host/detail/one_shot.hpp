// rcclx/host/detail/one_shot.hpp: what communicator needs to know of each one-shot collective
// whose output blocks are strided by the whole count (AllGather, ReduceScatter, AlltoAll): its
// plain (rcclx::dda) and low-precision (rcclx::lpc) launchers, its argument checks, its output size.
//
//   using traits = rcclx::host::detail::one_shot<rcclx::host::detail::collective_kind::alltoall>;
//   traits::plain(table, n, in, out, count, rcclx::reduce_op::sum, stream);   // dda::alltoall
//
// A call of these cannot be cut into contiguous chunks (chunk k of rank p lands at p * count + k,
// not at p * chunk + k), so the communicator runs each in one launch: the workspace must hold it.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>

#include "../../core/ops.hpp"
#include "../../dda/allgather.hpp"
#include "../../dda/alltoall.hpp"
#include "../../dda/reduce_scatter.hpp"
#include "../../lpc/allgather.hpp"
#include "../../lpc/alltoall.hpp"
#include "../../lpc/reduce_scatter.hpp"
#include "call_check.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {
namespace detail {

// Specialised for allgather, reduce_scatter and alltoall; no other kind is a one-shot collective.
template <collective_kind Kind>
struct one_shot {
  static_assert(Kind == collective_kind::allgather || Kind == collective_kind::reduce_scatter ||
                    Kind == collective_kind::alltoall,
                "host::detail::one_shot: only allgather, reduce_scatter and alltoall");
};

// Each specialisation: the lpc::collective, whether an op applies, the output's elements, the
// argument checks that need no table (rank-local: pointers, count), and the two launchers for a
// table by value or (captured graphs) a pointer to one in device memory.
template <>
struct one_shot<collective_kind::allgather> {
  static constexpr lpc::collective lpc_kind = lpc::collective::allgather;
  static constexpr bool reduces = false;
  static std::size_t output_elems(std::size_t count, int n) { return count * static_cast<std::size_t>(n); }
  template <class T>
  static void validate(const std::string& who, int n, int max_ranks, const T* in, T* out, std::size_t count, reduce_op) {
    dda::detail::validate_allgather(who, n, max_ranks, in, out, count, 0);
  }
  template <class Table, class T>
  static void plain(const Table& t, int n, const T* in, T* out, std::size_t count, reduce_op, gpu::stream_t s) {
    if constexpr (std::is_pointer<Table>::value) dda::allgather(t, n, in, out, count, s);
    else dda::allgather(t, in, out, count, s);
  }
  template <class Table, class T>
  static void low_precision(const Table& t, int n, const T* in, T* out, std::size_t count, reduce_op, gpu::stream_t s) {
    if constexpr (std::is_pointer<Table>::value) lpc::allgather(t, n, in, out, count, s);
    else lpc::allgather(t, in, out, count, s);
  }
};

template <>
struct one_shot<collective_kind::reduce_scatter> {
  static constexpr lpc::collective lpc_kind = lpc::collective::reduce_scatter;
  static constexpr bool reduces = true;
  static std::size_t output_elems(std::size_t count, int n) { return count / static_cast<std::size_t>(n); }
  template <class T>
  static void validate(const std::string& who, int n, int max_ranks, const T* in, T* out, std::size_t count,
                       reduce_op op) {
    dda::detail::validate_reduce_scatter(who, n, max_ranks, in, out, count, op, 0);
  }
  template <class Table, class T>
  static void plain(const Table& t, int n, const T* in, T* out, std::size_t count, reduce_op op, gpu::stream_t s) {
    if constexpr (std::is_pointer<Table>::value) dda::reduce_scatter(t, n, in, out, count, op, s);
    else dda::reduce_scatter(t, in, out, count, op, s);
  }
  template <class Table, class T>
  static void low_precision(const Table& t, int n, const T* in, T* out, std::size_t count, reduce_op op,
                            gpu::stream_t s) {
    if constexpr (std::is_pointer<Table>::value) lpc::reduce_scatter(t, n, in, out, count, op, s);
    else lpc::reduce_scatter(t, in, out, count, op, s);
  }
};

template <>
struct one_shot<collective_kind::alltoall> {
  static constexpr lpc::collective lpc_kind = lpc::collective::alltoall;
  static constexpr bool reduces = false;
  static std::size_t output_elems(std::size_t count, int) { return count; }
  template <class T>
  static void validate(const std::string& who, int n, int max_ranks, const T* in, T* out, std::size_t count, reduce_op) {
    dda::detail::validate_alltoall(who, n, max_ranks, in, out, count, 0);
  }
  template <class Table, class T>
  static void plain(const Table& t, int n, const T* in, T* out, std::size_t count, reduce_op, gpu::stream_t s) {
    if constexpr (std::is_pointer<Table>::value) dda::alltoall(t, n, in, out, count, s);
    else dda::alltoall(t, in, out, count, s);
  }
  template <class Table, class T>
  static void low_precision(const Table& t, int n, const T* in, T* out, std::size_t count, reduce_op, gpu::stream_t s) {
    if constexpr (std::is_pointer<Table>::value) lpc::alltoall(t, n, in, out, count, s);
    else lpc::alltoall(t, in, out, count, s);
  }
};

}  // namespace detail
}  // namespace host
RCCLX_NAMESPACE_END
