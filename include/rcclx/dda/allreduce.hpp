// rcclx/dda/allreduce.hpp: ready-made DDA AllReduce kernels and the host launcher for one rank.
// Every rank of the job calls it with its own view of the symmetric buffers (its peer table).
//
//   // rank r, its table t (every rank's symmetric buffer + signal pads), on its stream:
//   rcclx::dda::allreduce(t, in, out, count, rcclx::reduce_op::sum, rcclx::algorithm::automatic, stream);
//   // graphs whose table is patched after capture: the table lives in device memory
//   rcclx::dda::allreduce(device_table, num_ranks, in, out, count, rcclx::reduce_op::max);
//
// GPU backends: enqueues one kernel on `stream` and returns; a barrier that times out records an
// error in the rank's signal pad (the owner of the pads reports it, e.g. emulated_world::throw_if_error).
// Host backend: runs this rank's blocks as std::threads, returns when they are done and throws
// rcclx::error(errc::timeout) naming the missing rank if a barrier timed out.
// The launch shape is a function of (count, algorithm, num_ranks, the pads' max_blocks) only
// (dda/launch_config.hpp: the shape for a process per GPU), so every rank launches the same grid
// (barriers pair block b of every rank). Pass num_blocks > 0 or threads > 0 to force them (then the
// same on every rank); threads must be a multiple of 32 in [32, 512], the kernels' bound.
// Invalid arguments throw rcclx::error before anything is launched: op or algorithm out of range
// (invalid_argument), algorithm::low_precision (unsupported: that is rcclx::lpc::allreduce),
// num_ranks outside [2, MaxRanks], count * sizeof(T) above the buffers' capacity, input/output not
// aligned to sizeof(T) (misaligned), symmetric buffers not 16-byte aligned (misaligned), partial
// overlaps between input, output and own symmetric buffer, output == own symmetric buffer with
// flat above the pads' LL size (peers still read it; tree allows it), num_blocks above the pads'
// max_blocks, threads above 512 or not a multiple of 32 (invalid_argument). A flat call that fits
// the LL regions (dda::flat_uses_ll) does not use the symmetric buffer at all: no capacity or
// aliasing rule applies to it.
#pragma once

#include <cstddef>
#include <string>

#include "../core/barrier.hpp"
#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../core/peer_table.hpp"
#include "../gpu/runtime.hpp"
#include "../kernel/checks.hpp"
#include "../kernel/launch.hpp"
#include "flat.hpp"
#include "launch_config.hpp"
#include "op_allreduce.hpp"
#include "select.hpp"
#include "tree.hpp"

RCCLX_NAMESPACE_BEGIN
namespace dda {

// The algorithm a call runs: `algo` itself, or the tuned choice for automatic.
template <class T>
inline algorithm resolve_algorithm(algorithm algo, std::size_t count, int num_ranks) {
  return algo == algorithm::automatic ? select_algorithm(count * sizeof(T), num_ranks) : algo;
}

// The checks of an AllReduce call that need no table (a launcher over dda::allreduce runs them
// before it picks a table): op and algorithm valid and not low_precision, num_ranks in [2,
// max_ranks], num_blocks >= 0, count a byte size, input and output non-null, aligned to sizeof(T),
// equal or disjoint.
template <class T>
inline void check_allreduce_call(const std::string& who, int num_ranks, int max_ranks, const void* input,
                                 const void* output, std::size_t count, const reduce_spec& op, algorithm algo,
                                 int num_blocks) {
  // product, avg, premul_sum (and a device factor, premul_sum's only)
  if (is_valid(op.op) && (!is_basic(op.op) || op.factor_device)) kernel::check_spec<T>(who, op);
  else kernel::check_op(who, op.op);
  kernel::check_algorithm(who, algo);
  if (algo == algorithm::low_precision)
    throw error(errc::unsupported, who + ": algorithm::low_precision is not a DDA algorithm: call "
                                         "rcclx::lpc::allreduce (<rcclx/lpc/allreduce.hpp>), or use flat, tree "
                                         "or automatic here");
  kernel::check_call<T>(who, kernel::io_kind::reduce, num_ranks, max_ranks, input, output, count, num_blocks);
}

namespace detail {

// Checks of a table the host can read, for the resolved algorithm and the launch shape.
template <class T, int MaxRanks>
inline void check_allreduce_table(const std::string& w, const core::peer_table<T, MaxRanks>& t, const T* input,
                                  const T* output, std::size_t count, algorithm resolved, kernel::grid_shape shape) {
  kernel::check_table_buffers(w, t);
  const std::size_t bytes = count * sizeof(T);
  const bool ll = resolved == algorithm::flat &&  // the LL one-shot uses no symmetric buffer
                  flat_uses_ll<T>(t.signals, count, shape.threads, shape.blocks);
  if (!ll && bytes > t.capacity_bytes)
    throw error(errc::invalid_argument, w + ": count = " + std::to_string(count) + " (" + std::to_string(bytes) +
                                            " bytes) exceeds the symmetric buffer capacity of " +
                                            std::to_string(t.capacity_bytes) + " bytes");
  kernel::check_blocks_fit(w, shape.blocks, t.signals);
  if (count == 0) return;
  const T* own = t.data[t.rank()];
  if (input != own && kernel::overlaps(input, own, bytes))
    throw error(errc::invalid_argument, w + ": input overlaps this rank's symmetric buffer without being it "
                                            "(pass the buffer itself, or disjoint memory)");
  if (output != own && kernel::overlaps(output, own, bytes))
    throw error(errc::invalid_argument, w + ": output overlaps this rank's symmetric buffer without being it");
  if (resolved == algorithm::flat && !ll && output == own)
    throw error(errc::invalid_argument, w + ": with algorithm::flat above the LL size (the signal pads' LL regions: " +
                                            std::to_string(t.signals.ll_blocks) + " x " +
                                            std::to_string(t.signals.ll_block_bytes) + " bytes) the output must not "
                                            "be this rank's symmetric buffer (peers read it while the result is "
                                            "written): use algorithm::tree, or another output");
}

// One block of one rank: the algorithm as a compile-time choice (flat or tree; the launchers
// resolve automatic on the host, with the tuning table and its environment overrides).
template <class ReduceOp, algorithm Algo, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool run_block(const Group& g, const core::peer_table<T, MaxRanks>& t,
                                                   const T* in, T* out, std::size_t count, int block,
                                                   int num_blocks) {
  static_assert(Algo == algorithm::flat || Algo == algorithm::tree, "run_block: flat or tree");
  if constexpr (Algo == algorithm::flat) return flat_allreduce<ReduceOp>(g, t, in, out, count, block, num_blocks);
  else return tree_allreduce<ReduceOp>(g, t, in, out, count, block, num_blocks);
}

// The kernels' body; flat calls that run the LL one-shot need no symmetric buffer (kernel/launch.hpp
// checks a table in device memory with this).
template <class ReduceOp, algorithm Algo, class T, int MaxRanks>
struct allreduce_body
    : kernel::io_body<kernel::device_fn<&run_block<ReduceOp, Algo, T, MaxRanks, kernel::launch_group>>, T> {
  RCCLX_HOST_DEVICE std::size_t buffer_bytes(const core::signal_pads<MaxRanks>& s, int threads, int blocks) const {
    const bool ll = Algo == algorithm::flat && flat_uses_ll<T>(s, this->count, threads, blocks);
    return ll ? 0 : this->count * sizeof(T);
  }
};

// Both table forms: checks, shape, launch.
template <class T, int MaxRanks, class Table>
inline void allreduce(const Table& table, const T* input, T* output, std::size_t count, const reduce_spec& spec_in,
                      algorithm algo, gpu::stream_t stream, int num_blocks, int threads) {
  static_assert(core::is_reducible_v<T>, "rcclx::dda::allreduce: T must be float, rcclx::bf16, rcclx::fp16, int32_t, "
                                         "double, int64_t, int8_t, uint8_t or bool");
  const std::string who = kernel::name_of("rcclx::dda::allreduce", table);
  const int n = kernel::num_ranks_of(table);
  check_allreduce_call<T>(who, n, MaxRanks, input, output, count, spec_in, algo, num_blocks);
  const algorithm a = resolve_algorithm<T>(algo, count, n);
  // bool: sum = or, product = and.
  const reduce_spec spec{core::effective_op<T>(spec_in.op), spec_in.factor, spec_in.factor_device};
  if (!is_basic(spec.op))  // product, avg, premul_sum: kernels of their own (op_allreduce.hpp)
    return allreduce_extended<T, MaxRanks>(who, table, input, output, count, spec, a, stream, num_blocks, threads);
  const reduce_op op = spec.op;
  const core::peer_table<T, MaxRanks>* t = kernel::readable(who, table);
  const launch_config cfg =
      launch_config_for(who, count * sizeof(T), a, t ? t->signals.max_blocks : default_max_blocks, threads);
  const kernel::grid_shape shape{num_blocks > 0 ? num_blocks : num_blocks_for<T>(count, a, n, cfg), cfg.threads};
  if (t) check_allreduce_table(who, *t, input, output, count, a, shape);
  if (count == 0) return;
  const kernel::table_need need{n, count * sizeof(T)};
  core::with_op(op, [&](auto op_tag) {
    using flat_body = allreduce_body<decltype(op_tag), algorithm::flat, T, MaxRanks>;
    using tree_body = allreduce_body<decltype(op_tag), algorithm::tree, T, MaxRanks>;
    // Both algorithms' kernels loaded before the first launch of either (kernel/launch.hpp).
    if (a == algorithm::flat)
      kernel::launch(who, table, need, shape, flat_body{{input, output, count}}, stream, kernel::also_preload<tree_body>{});
    else
      kernel::launch(who, table, need, shape, tree_body{{input, output, count}}, stream, kernel::also_preload<flat_body>{});
  });
}

}  // namespace detail

// The device-side AllReduce with the algorithm chosen at compile time, for your kernels:
//
//   bool ok = rcclx::dda::dispatch_allreduce<rcclx::core::op_sum, rcclx::algorithm::automatic>(
//       rcclx::gpu::block_group{}, table, in, out, count, blockIdx.x, gridDim.x);
//
// flat or tree: that algorithm (only it is compiled). automatic: flat or tree by select_algorithm(
// count * sizeof(T), num_ranks, gpu::build_arch), the built-in table of this build's architecture
// (no environment override on a device): every rank of one build picks the same for the same count;
// both algorithms are compiled. With Count known at compile time, resolve_algorithm_v<T, N, Count>
// gives the choice as a constant instead. Same preconditions and result as flat_allreduce.
template <class ReduceOp = core::op_sum, algorithm Algo = algorithm::automatic, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool dispatch_allreduce(const Group& g, const core::peer_table<T, MaxRanks>& t,
                                                            const T* in, T* out, std::size_t count, int block,
                                                            int num_blocks) {
  static_assert(Algo != algorithm::low_precision,
                "rcclx::dda::dispatch_allreduce: low precision is rcclx::lpc::fp8_allreduce (<rcclx/lpc/allreduce.hpp>)");
  if constexpr (Algo == algorithm::automatic) {
    if (select_algorithm(count * sizeof(T), t.num_ranks(), gpu::build_arch) == algorithm::flat)
      return detail::run_block<ReduceOp, algorithm::flat>(g, t, in, out, count, block, num_blocks);
    return detail::run_block<ReduceOp, algorithm::tree>(g, t, in, out, count, block, num_blocks);
  } else {
    return detail::run_block<ReduceOp, Algo>(g, t, in, out, count, block, num_blocks);
  }
}

// AllReduce of `count` elements for this rank (table.rank()): output[i] = op over ranks of input[i].
// T: float, rcclx::bf16, rcclx::fp16 or int32_t. input may be the rank's symmetric buffer
// (table.data[rank]: no copy) and may equal output (in place). See the header comment for errors.
// op: sum, min, max, or product and avg, which run the kernels of op_allreduce.hpp (flat: its
// barrier protocol); premul_sum needs its factor: the reduce_spec overload below.
template <class T, int MaxRanks>
void allreduce(const core::peer_table<T, MaxRanks>& table, const T* input, T* output, std::size_t count,
               reduce_op op = reduce_op::sum, algorithm algo = algorithm::automatic, gpu::stream_t stream = {},
               int num_blocks = 0, int threads = 0) {
  detail::allreduce<T, MaxRanks>(table, input, output, count, reduce_spec{op}, algo, stream, num_blocks, threads);
}
// The same with a reduce_spec: any op, premul_sum with its factor (reduce_spec{reduce_op::premul_sum, f}).
template <class T, int MaxRanks>
void allreduce(const core::peer_table<T, MaxRanks>& table, const T* input, T* output, std::size_t count,
               const reduce_spec& op, algorithm algo = algorithm::automatic, gpu::stream_t stream = {},
               int num_blocks = 0, int threads = 0) {
  detail::allreduce<T, MaxRanks>(table, input, output, count, op, algo, stream, num_blocks, threads);
}

// The same with the table in device memory (e.g. a captured graph whose table is patched later).
// The host cannot read the table, so it checks what it can; the kernel checks that the table has
// num_ranks ranks, enough capacity and room for the grid's blocks, and otherwise records
// errc::mismatch in the rank's error record and leaves without touching any buffer. The caller
// keeps the aliasing rules of the overload above.
template <class T, int MaxRanks>
void allreduce(const core::peer_table<T, MaxRanks>* device_table, int num_ranks, const T* input, T* output,
               std::size_t count, reduce_op op = reduce_op::sum, algorithm algo = algorithm::automatic,
               gpu::stream_t stream = {}, int num_blocks = 0, int threads = 0) {
  detail::allreduce<T, MaxRanks>(kernel::device_table<T, MaxRanks>{device_table, num_ranks}, input, output, count,
                                 reduce_spec{op}, algo, stream, num_blocks, threads);
}
template <class T, int MaxRanks>
void allreduce(const core::peer_table<T, MaxRanks>* device_table, int num_ranks, const T* input, T* output,
               std::size_t count, const reduce_spec& op, algorithm algo = algorithm::automatic,
               gpu::stream_t stream = {}, int num_blocks = 0, int threads = 0) {
  detail::allreduce<T, MaxRanks>(kernel::device_table<T, MaxRanks>{device_table, num_ranks}, input, output, count, op,
                                 algo, stream, num_blocks, threads);
}

}  // namespace dda
RCCLX_NAMESPACE_END
