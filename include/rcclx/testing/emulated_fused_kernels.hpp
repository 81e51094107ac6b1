// rcclx/testing/emulated_fused_kernels.hpp: the fused kernels on every emulated rank in one launch,
// public for code that launches and times them itself (a benchmark): AllReduce + residual +
// RMSNorm (the launchers' choice of kernel, the cluster kernel included), and the unfused residual
// + RMSNorm of every rank's AllReduce result.
//
//   namespace rt = rcclx::testing;
//   rt::fused_launch_info info;   // what was launched: blocks per rank, cluster shape
//   rt::launch_allreduce_rmsnorm<bf16, bf16, 8>(world, args, slots, rcclx::algorithm::flat, 0, stream, &info);
//   rt::launch_add_rmsnorm<bf16, bf16, 8>(num_ranks, args, 0, stream);
#pragma once

#include "detail/emulated_fused.hpp"

RCCLX_NAMESPACE_BEGIN
namespace testing {

using detail::fused_launch_info;
using detail::launch_add_rmsnorm;
using detail::launch_allreduce_rmsnorm;

}  // namespace testing
RCCLX_NAMESPACE_END
