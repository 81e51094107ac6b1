// The shared emulated_peers<std::int32_t, 16> kernels (see emulated_peers.hpp), compiled once for the suite.
#include "emulated_peers.hpp"

template void rcclx_test::shared_peers<std::int32_t>::allreduce<>(rcclx::algorithm, rcclx::reduce_op);
template void rcclx_test::shared_peers<std::int32_t>::allgather<>(rcclx::algorithm);
template void rcclx_test::shared_peers<std::int32_t>::reduce_scatter<>(rcclx::algorithm, rcclx::reduce_op);
template void rcclx_test::shared_peers<std::int32_t>::alltoall<>(rcclx::algorithm);
