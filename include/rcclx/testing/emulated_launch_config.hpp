// rcclx/testing/emulated_launch_config.hpp: the launch shape of the ready-made collectives when N
// ranks are emulated on one GPU (emulated_peers, the emulated collectives, rcclx-bench's emulated
// rows), where every block of every rank must be resident at once (the ranks wait on each other).
//
//   const rcclx::dda::launch_config cfg = rcclx::testing::emulated_launch_config();   // {512, 32, 32}
//   int nb = rcclx::dda::num_blocks_for<float>(count, rcclx::algorithm::flat, 8, cfg);
//
// 512 threads x 16 bytes = 8 KiB tiles; 32 blocks per rank keep 8 emulated ranks resident on one
// GPU (256 blocks). A process per GPU has the device to itself and launches more, smaller blocks:
// dda/launch_config.hpp is the library's default for it. Host backend: one thread, 4 blocks (512
// threads, 4 blocks with RCCLX_EMULATE_THREADS=1).
#pragma once

#include "../dda/launch_config.hpp"
#include "../lpc/detail/launch.hpp"

RCCLX_NAMESPACE_BEGIN
namespace testing {

RCCLX_HOST_DEVICE constexpr dda::launch_config emulated_launch_config() {
#if RCCLX_BACKEND_GPU
  return {512, 32, 32};
#elif RCCLX_EMULATE_THREADS
  return {512, 4, 4};  // every thread of a block emulated (gpu/emulated_block.hpp), few blocks
#else
  return {1, 4, 4};
#endif
}

// The same for the LPC collectives.
RCCLX_HOST_DEVICE constexpr lpc::launch_config emulated_lpc_launch_config() {
  const dda::launch_config c = emulated_launch_config();
  return {c.threads, c.flat_max_blocks};
}

}  // namespace testing
RCCLX_NAMESPACE_END
