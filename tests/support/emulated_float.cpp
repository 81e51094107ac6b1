// The shared emulated_peers<float, 16> kernels (see emulated_peers.hpp), compiled once for the suite.
#include "emulated_peers.hpp"

template void rcclx_test::shared_peers<float>::allreduce<>(rcclx::algorithm, rcclx::reduce_op);
template void rcclx_test::shared_peers<float>::allgather<>(rcclx::algorithm);
template void rcclx_test::shared_peers<float>::reduce_scatter<>(rcclx::algorithm, rcclx::reduce_op);
template void rcclx_test::shared_peers<float>::alltoall<>(rcclx::algorithm);
