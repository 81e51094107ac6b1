// tests/support/emulated_peers.hpp: rcclx::testing::emulated_peers for the tests, with the kernels
// of its default instantiations compiled once for the whole suite (tests/support/emulated_*.cpp,
// the rcclx_test_support library) instead of once per test file: every test that includes this
// header declares them `extern template`, so it neither instantiates nor optimizes them.
//
// Shared: emulated_peers<T, 16> for T in float, bf16, fp16 and int32_t, its AllReduce, AllGather,
// ReduceScatter and AlltoAll with lpc::default_config (the plain and the low-precision kernels, every
// operator). Other configs and rank bounds are instantiated by the test that uses them, as usual.
#pragma once

#include <rcclx/testing/emulated_peers.hpp>

#include <cstdint>

namespace rcclx_test {
constexpr int shared_max_ranks = 16;  // the MaxRanks of the shared instantiations
template <class T>
using shared_peers = rcclx::testing::emulated_peers<T, shared_max_ranks>;
}  // namespace rcclx_test

// EXT is `extern` here and empty in emulated_*.cpp, which define them.
#define RCCLX_TEST_SHARED_PEERS(EXT, T)                                                                  \
  EXT template void rcclx_test::shared_peers<T>::allreduce<>(rcclx::algorithm, rcclx::reduce_op);       \
  EXT template void rcclx_test::shared_peers<T>::allgather<>(rcclx::algorithm);                         \
  EXT template void rcclx_test::shared_peers<T>::reduce_scatter<>(rcclx::algorithm, rcclx::reduce_op);  \
  EXT template void rcclx_test::shared_peers<T>::alltoall<>(rcclx::algorithm)

#ifndef RCCLX_TEST_DEFINE_SHARED_PEERS
RCCLX_TEST_SHARED_PEERS(extern, float);
RCCLX_TEST_SHARED_PEERS(extern, rcclx::bf16);
RCCLX_TEST_SHARED_PEERS(extern, rcclx::fp16);
RCCLX_TEST_SHARED_PEERS(extern, std::int32_t);
#endif
