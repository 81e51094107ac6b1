// rcclx/testing/emulated_kernels.hpp: the device functors emulated_peers launches, public for code
// that launches and times them itself on emulated ranks (a benchmark, a profiler): every collective
// and algorithm one block of one rank at a time, and two baselines of a grid (an empty kernel: the
// launch floor; a 16-byte copy of every rank's input: the bandwidth roofline).
//
//   namespace rt = rcclx::testing;
//   using flat = rt::emulated_allreduce<rcclx::core::op_sum, rcclx::algorithm::flat, float, 8>;
//   rt::launch_emulated(n, blocks, threads, flat{world.device_tables<float>(), buffers, count}, stream);
//   rt::launch_emulated(n, blocks, threads, rt::emulated_copy<float, 8>{buffers, count}, stream);
#pragma once

#include "detail/emulated_collectives.hpp"

RCCLX_NAMESPACE_BEGIN
namespace testing {

using detail::emulated_allreduce;     // <ReduceOp, Algo, T, MaxRanks>{tables, buffers, count}: DDA flat or tree
using detail::emulated_collective;    // <Coll, Algo, Config, ReduceOp, T, MaxRanks>: the others, plain or LPC
using detail::emulated_collective_t;  // the same, its arguments reduced to what the body reads
using detail::emulated_copy;          // <T, MaxRanks>{buffers, count}: each rank's input to its output
using detail::emulated_empty;         // does nothing

}  // namespace testing
RCCLX_NAMESPACE_END
