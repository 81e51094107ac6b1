// The shared emulated_peers<rcclx::bf16, 16> kernels (see emulated_peers.hpp), compiled once for the suite.
#include "emulated_peers.hpp"

template void rcclx_test::shared_peers<rcclx::bf16>::allreduce<>(rcclx::algorithm, rcclx::reduce_op);
template void rcclx_test::shared_peers<rcclx::bf16>::allgather<>(rcclx::algorithm);
template void rcclx_test::shared_peers<rcclx::bf16>::reduce_scatter<>(rcclx::algorithm, rcclx::reduce_op);
template void rcclx_test::shared_peers<rcclx::bf16>::alltoall<>(rcclx::algorithm);
