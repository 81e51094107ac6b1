// tests/support/launchers.hpp: the per-rank host launchers (dda:: and lpc:: allreduce, allgather,
// reduce_scatter, alltoall, both table overloads) for MaxRanks = 8 and the default LPC config,
// compiled once for the suite (launchers_*.cpp in rcclx_test_support) instead of in every test file
// that calls them: including this header declares them `extern template` (they are not inline, so
// nothing else instantiates them).
#pragma once

#include <rcclx/dda/allgather.hpp>
#include <rcclx/dda/allreduce.hpp>
#include <rcclx/dda/alltoall.hpp>
#include <rcclx/dda/reduce_scatter.hpp>
#include <rcclx/lpc/allgather.hpp>
#include <rcclx/lpc/allreduce.hpp>
#include <rcclx/lpc/alltoall.hpp>
#include <rcclx/lpc/reduce_scatter.hpp>

#include <cstdint>

namespace rcclx_test {
constexpr int launcher_max_ranks = 8;
template <class T>
using launcher_table = rcclx::core::peer_table<T, launcher_max_ranks>;
}  // namespace rcclx_test

// EXT is `extern` here and empty in launchers_*.cpp, which define them.
#define RCCLX_TEST_DDA_ALLREDUCE(EXT, T)                                                                          \
  EXT template void rcclx::dda::allreduce(const rcclx_test::launcher_table<T>&, const T*, T*, std::size_t,       \
                                          rcclx::reduce_op, rcclx::algorithm, rcclx::gpu::stream_t, int, int);  \
  EXT template void rcclx::dda::allreduce(const rcclx_test::launcher_table<T>*, int, const T*, T*, std::size_t,  \
                                          rcclx::reduce_op, rcclx::algorithm, rcclx::gpu::stream_t, int, int)
#define RCCLX_TEST_DDA_COLLECTIVES(EXT, T)                                                                          \
  EXT template void rcclx::dda::allgather<rcclx::mesh::default_schedule>(                                          \
      const rcclx_test::launcher_table<T>&, const T*, T*, std::size_t, rcclx::gpu::stream_t, int);                 \
  EXT template void rcclx::dda::allgather<rcclx::mesh::default_schedule>(                                          \
      const rcclx_test::launcher_table<T>*, int, const T*, T*, std::size_t, rcclx::gpu::stream_t, int);            \
  EXT template void rcclx::dda::alltoall<rcclx::mesh::default_schedule>(                                           \
      const rcclx_test::launcher_table<T>&, const T*, T*, std::size_t, rcclx::gpu::stream_t, int);                 \
  EXT template void rcclx::dda::alltoall<rcclx::mesh::default_schedule>(                                           \
      const rcclx_test::launcher_table<T>*, int, const T*, T*, std::size_t, rcclx::gpu::stream_t, int);            \
  EXT template void rcclx::dda::reduce_scatter(const rcclx_test::launcher_table<T>&, const T*, T*, std::size_t,    \
                                               rcclx::reduce_op, rcclx::gpu::stream_t, int);                       \
  EXT template void rcclx::dda::reduce_scatter(const rcclx_test::launcher_table<T>*, int, const T*, T*,            \
                                               std::size_t, rcclx::reduce_op, rcclx::gpu::stream_t, int)
#define RCCLX_TEST_LPC_COLLECTIVES(EXT, T)                                                                          \
  EXT template void rcclx::lpc::allreduce<rcclx::lpc::default_config>(                                             \
      const rcclx_test::launcher_table<T>&, const T*, T*, std::size_t, rcclx::reduce_op, rcclx::gpu::stream_t, int); \
  EXT template void rcclx::lpc::allreduce<rcclx::lpc::default_config>(const rcclx_test::launcher_table<T>*, int,   \
                                                                      const T*, T*, std::size_t, rcclx::reduce_op, \
                                                                      rcclx::gpu::stream_t, int);                  \
  EXT template void rcclx::lpc::allgather<rcclx::lpc::default_config>(                                             \
      const rcclx_test::launcher_table<T>&, const T*, T*, std::size_t, rcclx::gpu::stream_t, int);                 \
  EXT template void rcclx::lpc::allgather<rcclx::lpc::default_config>(                                             \
      const rcclx_test::launcher_table<T>*, int, const T*, T*, std::size_t, rcclx::gpu::stream_t, int);            \
  EXT template void rcclx::lpc::reduce_scatter<rcclx::lpc::default_config>(                                        \
      const rcclx_test::launcher_table<T>&, const T*, T*, std::size_t, rcclx::reduce_op, rcclx::gpu::stream_t, int); \
  EXT template void rcclx::lpc::reduce_scatter<rcclx::lpc::default_config>(                                        \
      const rcclx_test::launcher_table<T>*, int, const T*, T*, std::size_t, rcclx::reduce_op, rcclx::gpu::stream_t, \
      int);                                                                                                        \
  EXT template void rcclx::lpc::alltoall<rcclx::lpc::default_config>(                                              \
      const rcclx_test::launcher_table<T>&, const T*, T*, std::size_t, rcclx::gpu::stream_t, int);                 \
  EXT template void rcclx::lpc::alltoall<rcclx::lpc::default_config>(                                              \
      const rcclx_test::launcher_table<T>*, int, const T*, T*, std::size_t, rcclx::gpu::stream_t, int)

#ifndef RCCLX_TEST_DEFINE_LAUNCHERS
RCCLX_TEST_DDA_ALLREDUCE(extern, float);
RCCLX_TEST_DDA_ALLREDUCE(extern, rcclx::bf16);
RCCLX_TEST_DDA_ALLREDUCE(extern, rcclx::fp16);
RCCLX_TEST_DDA_ALLREDUCE(extern, std::int32_t);
RCCLX_TEST_DDA_COLLECTIVES(extern, float);
RCCLX_TEST_DDA_COLLECTIVES(extern, rcclx::bf16);
RCCLX_TEST_LPC_COLLECTIVES(extern, float);
RCCLX_TEST_LPC_COLLECTIVES(extern, rcclx::bf16);
#endif
