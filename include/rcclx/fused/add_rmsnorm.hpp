// rcclx/fused/add_rmsnorm.hpp: residual add + RMSNorm (+ optional FP8 output) on one GPU, no
// communication: the second half of the unfused path (dda::allreduce, then this kernel), with the
// same epilogue (fused/rmsnorm_epilogue.hpp) and therefore the same bits as fused::allreduce_rmsnorm.
//
//   rcclx::dda::allreduce(t, x, sum, count);                       // sum = allreduce(x)
//   rcclx::fused::rmsnorm_args<rcclx::bf16> a{sum, residual, weight, out, tokens, hidden, 1e-6f};
//   rcclx::fused::add_rmsnorm(a, stream);                           // residual += sum; out = rmsnorm
//
// One block per row (grid-stride over rows): it loads its row (1 read of S), adds the residual
// (1 read, 1 write), block-reduces the sum of squares, writes the output. Traffic: 3 S + S_out.
#pragma once

#include <cstddef>
#include <string>

#include "../core/error.hpp"
#include "../gpu/group.hpp"
#include "../gpu/runtime.hpp"
#include "../kernel/checks.hpp"
#include "../kernel/launch.hpp"
#include "rmsnorm_args.hpp"
#include "detail/rmsnorm_rows.hpp"
#include "rmsnorm_epilogue.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {

// One block: rows block, block + num_blocks, ... Group-collective; the same shape rules as
// allreduce_rmsnorm_block (BlockThreads threads, VecsPerThread * BlockThreads vectors >= a row).
template <int VecsPerThread, int BlockThreads, class T, class Out, class Group>
RCCLX_HOST_DEVICE void add_rmsnorm_block(const Group& g, const rmsnorm_args<T, Out>& a, int block, int num_blocks) {
  using traits = core::value_traits<T>;
  constexpr int e = gpu::elems_per_vec16<T>;
  const std::size_t hidden = a.hidden, vecs = hidden / e;
  const std::size_t gs = static_cast<std::size_t>(g.size()), tid = static_cast<std::size_t>(g.thread_rank());
  const row_tiles map{a.tokens, hidden};
  const auto epi = detail::make_rmsnorm_epilogue<BlockThreads>(a, a.residual, a.output);
  for (std::size_t i = static_cast<std::size_t>(block); i < a.tokens; i += static_cast<std::size_t>(num_blocks)) {
    float v[VecsPerThread][e];
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
    for (int k = 0; k < VecsPerThread; ++k) {
      const std::size_t vi = static_cast<std::size_t>(k) * gs + tid;  // the same vectors as the fused kernel
      if (vi < vecs) traits::unpack(gpu::load16(a.input + i * hidden + vi * e), v[k]);
    }
    epi(g, v, held_vectors<row_tiles, e>{map, i, tid, gs, vecs});
  }
}

namespace detail {
template <int VPT, class T, class Out>
struct add_rmsnorm_body {
  static constexpr int max_threads = RCCLX_GPU_BLOCKS ? default_rmsnorm_launch_config().threads : 1;
  rmsnorm_args<T, Out> a;
  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, int block, int num_blocks) const {
    add_rmsnorm_block<VPT, max_threads>(g, a, block, num_blocks);
  }
};
// Rows of any length, per-token output (fused/detail/rmsnorm_rows.hpp).
template <int VPT, class T, class Out>
struct add_rmsnorm_rows_body {
  static constexpr int max_threads = RCCLX_GPU_BLOCKS ? default_rmsnorm_launch_config().threads : 1;
  rmsnorm_args<T, Out> a;
  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, int block, int num_blocks) const {
    add_rmsnorm_rows_block<VPT, max_threads>(g, a, block, num_blocks);
  }
};
}  // namespace detail

// residual <- T(input + residual); output <- rmsnorm(residual) * weight (T or FP8 codes). GPU:
// enqueues one kernel on `stream`; host backend: runs its blocks as threads and returns when done.
// The argument checks of allreduce_rmsnorm apply (except those about a peer table).
template <class T, class Out>
void add_rmsnorm(const rmsnorm_args<T, Out>& args, gpu::stream_t stream = {}, int num_blocks = 0) {
  const std::string who = "rcclx::fused::add_rmsnorm";
  detail::check_rmsnorm_args(who.c_str(), args);
  kernel::check_num_blocks(who, num_blocks);
  if (args.tokens == 0) return;
  const rmsnorm_launch_config cfg = default_rmsnorm_launch_config();
  // Not limited by residency (no block waits for another): one block per row up to a large cap
  // (on the host backend, the config's few threads).
  int nb = num_blocks > 0 ? num_blocks : static_cast<int>(args.tokens < 65535 ? args.tokens : std::size_t{65535});
  if (RCCLX_BACKEND_HOST && nb > cfg.max_blocks) nb = cfg.max_blocks;
  detail::with_vecs_per_thread<T>(detail::vecs_per_thread<T>(args.hidden, cfg.threads), [&](auto vpt_tag) {
    constexpr int vpt = decltype(vpt_tag)::value;
    if (detail::uses_rows_kernel<T, Out>(args.hidden)) {
      kernel::launch(who, {nb, cfg.threads}, detail::add_rmsnorm_rows_body<vpt, T, Out>{args}, stream);
    } else if constexpr (!is_per_token<Out>::value) {
      kernel::launch(who, {nb, cfg.threads}, detail::add_rmsnorm_body<vpt, T, Out>{args}, stream);
    }
  });
}

}  // namespace fused
RCCLX_NAMESPACE_END
