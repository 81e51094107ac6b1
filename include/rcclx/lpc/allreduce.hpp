// rcclx/lpc/allreduce.hpp: low-precision AllReduce: FP8 with block scales on the wire, fp32
// arithmetic, every rank bit-identical. Device template for your kernels + host launcher for one rank.
//
//   // in a kernel launched with the same grid on every rank (input and output not in the buffer):
//   bool ok = rcclx::lpc::fp8_allreduce<rcclx::core::op_sum>(rcclx::gpu::block_group{}, table, in, out,
//                                                            count, blockIdx.x, gridDim.x);
//   // host, rank r; each symmetric buffer holds lpc::workspace_bytes<>(collective::allreduce, count, N):
//   rcclx::lpc::allreduce(table, in, out, count);                           // default config, sum
//   rcclx::lpc::allreduce<rcclx::lpc::config<rcclx::fp8::e5m2>>(table, in, out, count, rcclx::reduce_op::max);
//
// Algorithm (N ranks; the message is cut into N chunks of whole quantization blocks, chunk c owned
// by rank c; units, tiles and block ownership as in lpc/detail/units.hpp):
//   1. quantize: every chunk c of the own input -> own slot c (FP8 codes + one scale per block),
//      straight from the streamed input, in registers
//   2. start barrier
//   3. reduce-scatter: for each owned unit of chunk r, load its codes and scale from slot r of
//      every rank (all N in flight), dequantize and combine in rank order 0..N-1 in fp32, saturate
//      to the output type's range, re-quantize (new block scales) into own slot N, and write the
//      dequantized re-quantized values to output chunk r (from registers)
//   4. mid barrier
//   5. all-gather: for s = 1..N-1 (Schedule order) chunk q = Schedule::peer(r, s) <- slot N of
//      rank q, dequantized straight into the output (the N-1 loads of a unit in flight together)
//   6. end barrier
// Every rank, the owner of a chunk too, outputs the dequantized re-quantized chunk: the same bits
// everywhere, and independent of the schedule (the sum order is the rank order).
// Steps: 3 barriers, 3 data phases. Traffic per rank, S = count * sizeof(T), Q = count * (1 +
// scale bytes / BlockSize) (the FP8 form): reads S + Q + (N-1)Q/N, writes Q + Q/N + S; 2(N-1)Q/N
// cross to peers (plain tree: 2(N-1)S/N). HBM per rank: float ~2.85 S, bf16 ~3.7 S (32-element
// blocks, fp32 scales) against the plain tree's 5 S.
// Error: two quantizations (each input block, then each reduced block): docs/numerics.md.
//
// Preconditions (the launcher checks them): same count, config, group size and num_blocks on every
// rank; group size a multiple of 32 on GPUs; capacity_bytes >= workspace_bytes(allreduce, count, N)
// and the same on every rank; symmetric buffers 16-byte aligned; input and output aligned to sizeof(T),
// equal (in place) or disjoint, and outside own symmetric buffer.
#pragma once

#include <cstddef>
#include <string>

#include "../core/barrier.hpp"
#include "../core/ops.hpp"
#include "../core/peer_table.hpp"
#include "../mesh/schedule.hpp"
#include "config.hpp"
#include "detail/launch.hpp"
#include "detail/units.hpp"
#include "workspace.hpp"

RCCLX_NAMESPACE_BEGIN
namespace lpc {

// ReduceOp: core::op_sum, op_min or op_max; T: float or rcclx::bf16. Group-collective: every thread
// of g calls it. Returns false if a barrier timed out (the error is recorded; leave the kernel).
template <class ReduceOp = core::op_sum, class Config = default_config, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool fp8_allreduce(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input,
                                     T* output, std::size_t count, int block, int num_blocks) {
  static_assert(is_config_v<Config>, "rcclx::lpc::fp8_allreduce: Config must be an rcclx::lpc::config");
  static_assert(is_element_v<T>, "rcclx::lpc::fp8_allreduce: T must be float or rcclx::bf16");
  using cd = detail::unit_codec<Config, T>;
  constexpr int E = cd::elems;
  if (count == 0) return true;
  const int tid = g.thread_rank(), r = t.rank(), n = t.num_ranks();
  const std::size_t ce = detail::chunk_elems<Config::block_size>(collective::allreduce, count, n);
  const detail::slots<Config> sl(t.capacity_bytes, n + 1);
  const std::size_t scales_off = Config::layout::scales_offset(sl.elems);
  const detail::unit_tiles ut(g.size(), block, num_blocks);
  void* own = t.data[r];
  const bool in_vec = gpu::is_aligned(input, 16), out_vec = gpu::is_aligned(output, 16);

  for (int c = 0; c < n; ++c) {
    const std::size_t off = static_cast<std::size_t>(c) * ce;
    detail::quantize_chunk<Config, detail::quantize_unroll<Config, T>()>(
        tid, ut, input + off, detail::chunk_count(count, ce, c), in_vec, sl.payload(own, c), sl.scales(own, c),
        static_cast<T*>(nullptr), false);
  }
  if (!core::barrier(g, t.signals, block, core::barrier_kind::start)) return false;

  {
    detail::rank_slots<MaxRanks> src;
    src.n = n;
    for (int p = 0; p < MaxRanks; ++p) src.base[p] = p < n ? sl.payload(t.data[p], r) : nullptr;
    unsigned char* red = sl.payload(own, n);
    typename cd::scale_type* red_scales = sl.scales(own, n);
    T* out_r = output + static_cast<std::size_t>(r) * ce;
    constexpr float lim = detail::max_finite_of<T>();
    detail::reduce_chunk<Config, ReduceOp, T>(
        tid, ut, src, scales_off, detail::chunk_count(count, ce, r), [&](std::size_t u, int cnt, float(&acc)[E]) {
          // A sum past the output type's range saturates (NaN compares false and stays NaN).
          for (int i = 0; i < E; ++i) acc[i] = acc[i] > lim ? lim : (acc[i] < -lim ? -lim : acc[i]);
          typename cd::codes q;
          const auto s = cd::quantize(acc, q);  // every lane
          if (cnt > 0) {
            cd::store_codes(red + u * E, q);
            if (u % cd::lanes == 0) red_scales[u / cd::lanes] = s;
            float y[E];
            cd::dequantize(q, s, y);
            cd::store(out_r + u * E, cnt, out_vec, y);
          }
        });
  }
  if (!core::barrier(g, t.signals, block, core::barrier_kind::mid)) return false;

  const auto list = detail::make_gather_entries<MaxRanks>(
      n, r, [&](int s) { return mesh::all_gather<typename Config::schedule>(r, s, n).peer; },
      [&](int q, int) -> const unsigned char* { return sl.payload(t.data[q], n); });
  detail::gather_chunks<Config>(tid, ut, list, scales_off, ce, output, ce, count, out_vec);
  return core::barrier(g, t.signals, block, core::barrier_kind::end);
}

namespace detail {
template <class Op, class Config, class T, int MaxRanks>
using allreduce_fn = kernel::device_fn<&fp8_allreduce<Op, Config, T, MaxRanks, kernel::launch_group>>;
}  // namespace detail

// Low-precision AllReduce of `count` elements for this rank (table.rank()). T: float or rcclx::bf16.
// Throws rcclx::error before launching: op out of range, num_ranks outside [2, MaxRanks], a
// schedule that does not support num_ranks (unsupported), capacity below workspace_bytes (naming
// both), null or misaligned pointers, partial overlap of input and output, input or output inside
// own symmetric buffer, num_blocks above the pads' max_blocks. GPU: enqueues one kernel on `stream`;
// host backend: runs the rank's blocks as threads and throws a recorded barrier timeout.
template <class Config = default_config, class T, int MaxRanks>
void allreduce(const core::peer_table<T, MaxRanks>& table, const T* input, T* output, std::size_t count,
               reduce_op op = reduce_op::sum, gpu::stream_t stream = {}, int num_blocks = 0) {
  kernel::launch_io<detail::fp8_call<collective::allreduce, detail::allreduce_fn, Config>>(
      "rcclx::lpc::allreduce", table, input, output, count, op, stream, num_blocks);
}

// The same with the table in device memory (e.g. a captured graph whose table is patched later): the
// kernel checks rank count, capacity and grid and records errc::mismatch instead of running.
template <class Config = default_config, class T, int MaxRanks>
void allreduce(const core::peer_table<T, MaxRanks>* device_table, int num_ranks, const T* input, T* output,
               std::size_t count, reduce_op op = reduce_op::sum, gpu::stream_t stream = {}, int num_blocks = 0) {
  kernel::launch_io<detail::fp8_call<collective::allreduce, detail::allreduce_fn, Config>>(
      "rcclx::lpc::allreduce", kernel::device_table<T, MaxRanks>{device_table, num_ranks}, input, output, count, op,
      stream, num_blocks);
}

}  // namespace lpc
RCCLX_NAMESPACE_END
