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
// The number of blocks is a function of (count, algorithm, num_ranks, launch_config) only, so every
// rank launches the same grid (barriers pair block b of every rank). Pass num_blocks > 0 to force it
// (then it must be the same on every rank).
// Invalid arguments throw rcclx::error before anything is launched: op or algorithm out of range
// (invalid_argument), algorithm::low_precision (unsupported: that is rcclx::lpc::allreduce),
// num_ranks outside [2, MaxRanks], count * sizeof(T) above the buffers' capacity, input/output not
// aligned to sizeof(T) (misaligned), symmetric buffers not 16-byte aligned (misaligned), partial
// overlaps between input, output and own symmetric buffer, output == own symmetric buffer with
// flat above the pads' LL size (peers still read it; tree allows it), num_blocks above the pads'
// max_blocks. A flat call that fits the LL regions (dda::flat_uses_ll) does not use the symmetric
// buffer at all: no capacity or aliasing rule applies to it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>

#include "../core/barrier.hpp"
#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../core/peer_table.hpp"
#include "../gpu/group.hpp"
#include "../gpu/host_blocks.hpp"
#include "../gpu/runtime.hpp"
#include "detail/launch.hpp"
#include "flat.hpp"
#include "select.hpp"
#include "tree.hpp"

#if RCCLX_BACKEND_HOST
#  include <thread>
#  include <vector>
#endif

RCCLX_NAMESPACE_BEGIN
namespace dda {

// Threads per block and the block-count caps of the ready-made kernels.
struct launch_config {
  int threads;          // threads per block (1 on the host backend: a block is a thread)
  int flat_max_blocks;  // blocks per rank, at most
  int tree_max_blocks;
};

RCCLX_HOST_DEVICE constexpr launch_config default_launch_config() {
#if RCCLX_BACKEND_GPU
  // 512 threads x 16 bytes = 8 KiB tiles. 32 blocks per rank keep 8 emulated ranks resident on one
  // GPU (256 blocks) and, on a GPU of its own, put 32 x 512 x 8 peers x 16 B = 2 MiB of loads in
  // flight, enough to cover the latency of peer links.
  return {512, 32, 32};
#else
  return {1, 4, 4};  // CI machines have two cores; the partition logic is the same at any count
#endif
}

// Blocks per rank of a call: a pure function of its arguments, so it is identical on every rank.
// flat: one tile (threads x 16 bytes) per block up to the cap; tree: one tile of each rank's chunk
// per block up to the cap (so the reduce-scatter keeps every block busy).
template <class T>
RCCLX_HOST_DEVICE constexpr int num_blocks_for(std::size_t count, algorithm algo, int num_ranks,
                                               const launch_config& cfg = default_launch_config()) {
  const std::size_t e = static_cast<std::size_t>(gpu::elems_per_vec16<T>);
  const std::size_t vecs = (count + e - 1) / e;
  const std::size_t tiles = (vecs + static_cast<std::size_t>(cfg.threads) - 1) / static_cast<std::size_t>(cfg.threads);
  std::size_t want = tiles;
  int cap = cfg.flat_max_blocks;
  if (algo == algorithm::tree) {
    want = (tiles + static_cast<std::size_t>(num_ranks) - 1) / static_cast<std::size_t>(num_ranks);
    cap = cfg.tree_max_blocks;
  }
  if (want < 1) want = 1;
  return want > static_cast<std::size_t>(cap) ? cap : static_cast<int>(want);
}

// The algorithm a call runs: `algo` itself, or the tuned choice for automatic.
template <class T>
inline algorithm resolve_algorithm(algorithm algo, std::size_t count, int num_ranks) {
  return algo == algorithm::automatic ? select_algorithm(count * sizeof(T), num_ranks) : algo;
}

namespace detail {

// The default launch shape with `threads` per block (0: the default). GPUs: a multiple of 32 in
// [32, 1024], the same on every rank (it is the tile size: ranks with different tiles would pair up
// wrong vectors). The host backend runs a block as one thread and ignores it.
inline launch_config with_threads(const char* who, int threads) {
  launch_config cfg = default_launch_config();
  if (threads == 0) return cfg;
  if (threads < 32 || threads > 1024 || threads % 32 != 0)
    throw error(errc::invalid_argument, std::string(who) + ": threads = " + std::to_string(threads) +
                                            " must be 0 (default) or a multiple of 32 in [32, 1024]");
#if RCCLX_BACKEND_GPU
  cfg.threads = threads;
#endif
  return cfg;
}

// Checks that do not need the table's contents (also used for tables in device memory).
template <class T>
inline void validate_call(const char* who, int num_ranks, int max_ranks_of_table, const void* input,
                          const void* output, std::size_t count, reduce_op op, algorithm algo, int num_blocks) {
  const std::string w(who);
  if (!is_valid(op))
    throw error(errc::invalid_argument, w + ": op = " + std::to_string(static_cast<int>(op)) +
                                            " is not a reduce_op (sum, min, max)");
  if (!is_valid(algo))
    throw error(errc::invalid_argument, w + ": algorithm = " + std::to_string(static_cast<int>(algo)) +
                                            " is not an rcclx::algorithm");
  if (algo == algorithm::low_precision)
    throw error(errc::unsupported, w + ": algorithm::low_precision is not a DDA algorithm: call "
                                       "rcclx::lpc::allreduce (<rcclx/lpc/allreduce.hpp>), or use flat, tree "
                                       "or automatic here");
  if (num_ranks < 2 || num_ranks > max_ranks_of_table)
    throw error(errc::invalid_argument, w + ": num_ranks = " + std::to_string(num_ranks) + " is outside [2, " +
                                            std::to_string(max_ranks_of_table) + "] (the table's MaxRanks)");
  if (num_blocks < 0)
    throw error(errc::invalid_argument, w + ": num_blocks = " + std::to_string(num_blocks) +
                                            " is negative (0 picks the default)");
  if (count > no_limit / sizeof(T))
    throw error(errc::invalid_argument, w + ": count = " + std::to_string(count) + " overflows a byte size");
  if (count == 0) return;
  if (!input || !output) throw error(errc::invalid_argument, w + ": input and output must not be null");
  if (!gpu::is_aligned(input, alignof(T)))
    throw error(errc::misaligned, w + ": input = " + pointer_text(input) + " is not aligned to sizeof(" +
                                      core::type_name<T>() + ") = " + std::to_string(sizeof(T)) + " bytes");
  if (!gpu::is_aligned(output, alignof(T)))
    throw error(errc::misaligned, w + ": output = " + pointer_text(output) + " is not aligned to sizeof(" +
                                      core::type_name<T>() + ") = " + std::to_string(sizeof(T)) + " bytes");
  const std::size_t bytes = count * sizeof(T);
  if (input != output && overlaps(input, output, bytes))
    throw error(errc::invalid_argument, w + ": input and output overlap partially (they must be equal or disjoint)");
}

// Checks of a table the host can read.
template <class T, int MaxRanks>
inline void validate_table(const char* who, const core::peer_table<T, MaxRanks>& t, const T* input, const T* output,
                           std::size_t count, algorithm resolved, int num_blocks) {
  const std::string w(who);
  const int n = t.num_ranks();
  for (int p = 0; p < n; ++p) {
    if (!t.data[p])
      throw error(errc::invalid_argument, w + ": table.data[" + std::to_string(p) + "] is null");
    if (!gpu::is_aligned(t.data[p], 16))
      throw error(errc::misaligned, w + ": table.data[" + std::to_string(p) + "] = " + pointer_text(t.data[p]) +
                                        " is not 16-byte aligned (symmetric buffers are accessed with 16-byte vectors)");
  }
  const std::size_t bytes = count * sizeof(T);
  const bool ll = resolved == algorithm::flat &&  // the LL one-shot uses no symmetric buffer
                  flat_uses_ll<T>(t.signals, count, default_launch_config().threads, num_blocks);
  if (!ll && bytes > t.capacity_bytes)
    throw error(errc::invalid_argument, w + ": count = " + std::to_string(count) + " (" + std::to_string(bytes) +
                                            " bytes) exceeds the symmetric buffer capacity of " +
                                            std::to_string(t.capacity_bytes) + " bytes");
  if (num_blocks > t.signals.max_blocks)
    throw error(errc::invalid_argument, w + ": num_blocks = " + std::to_string(num_blocks) +
                                            " exceeds the signal pads' max_blocks = " + std::to_string(t.signals.max_blocks));
  if (count == 0) return;
  const T* own = t.data[t.rank()];
  if (input != own && overlaps(input, own, bytes))
    throw error(errc::invalid_argument, w + ": input overlaps this rank's symmetric buffer without being it "
                                            "(pass the buffer itself, or disjoint memory)");
  if (output != own && overlaps(output, own, bytes))
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

#if RCCLX_BACKEND_GPU
template <class ReduceOp, algorithm Algo, class T, int MaxRanks>
RCCLX_GLOBAL void __launch_bounds__(512)
    allreduce_kernel(core::peer_table<T, MaxRanks> t, const T* in, T* out, std::size_t count) {
  (void)run_block<ReduceOp, Algo>(gpu::block_group{}, t, in, out, count, static_cast<int>(blockIdx.x),
                                  static_cast<int>(gridDim.x));
}

template <class ReduceOp, algorithm Algo, class T, int MaxRanks>
RCCLX_GLOBAL void __launch_bounds__(512)
    allreduce_kernel_indirect(const core::peer_table<T, MaxRanks>* table, int num_ranks, const T* in, T* out,
                              std::size_t count) {
  const core::peer_table<T, MaxRanks>& t = *table;  // read in place: a local copy indexed by rank would go to scratch
  // The host could not check the table: the same checks here (uniform: every block leaves together).
  std::uint32_t bad = 0;
  if (t.num_ranks() != num_ranks) bad = 1;
  else if (!(Algo == algorithm::flat && flat_uses_ll<T>(t.signals, count, static_cast<int>(blockDim.x),
                                                       static_cast<int>(gridDim.x))) &&
           count * sizeof(T) > t.capacity_bytes)
    bad = 2;
  else if (static_cast<int>(gridDim.x) > t.signals.max_blocks) bad = 3;
  if (bad) {
    if (threadIdx.x == 0) record_mismatch(t.signals, bad);
    return;
  }
  (void)run_block<ReduceOp, Algo>(gpu::block_group{}, t, in, out, count, static_cast<int>(blockIdx.x),
                                  static_cast<int>(gridDim.x));
}
#endif

// Runs this rank's blocks: kernel launch on GPUs, std::threads on the host.
template <algorithm Algo, class T, int MaxRanks, class TableArg>
inline void launch(const TableArg& table_arg, int num_ranks, const T* input, T* output, std::size_t count,
                   reduce_op op, gpu::stream_t stream, int num_blocks, const launch_config& cfg) {
  (void)num_ranks;
  core::with_op(op, [&](auto op_tag) {
    using op_t = decltype(op_tag);
#if RCCLX_BACKEND_GPU
    // Load both algorithms' kernels before the first launch (see gpu::preload_kernel): a call
    // sequence alternating flat and tree must never load a module while a peer kernel spins.
    static const bool preloaded = [] {
      if constexpr (std::is_pointer<TableArg>::value) {
        gpu::preload_kernel(allreduce_kernel_indirect<op_t, algorithm::flat, T, MaxRanks>);
        gpu::preload_kernel(allreduce_kernel_indirect<op_t, algorithm::tree, T, MaxRanks>);
      } else {
        gpu::preload_kernel(allreduce_kernel<op_t, algorithm::flat, T, MaxRanks>);
        gpu::preload_kernel(allreduce_kernel<op_t, algorithm::tree, T, MaxRanks>);
      }
      return true;
    }();
    (void)preloaded;
    if constexpr (std::is_pointer<TableArg>::value) {
      allreduce_kernel_indirect<op_t, Algo, T, MaxRanks>
          <<<num_blocks, cfg.threads, 0, stream>>>(table_arg, num_ranks, input, output, count);
    } else {
      allreduce_kernel<op_t, Algo, T, MaxRanks><<<num_blocks, cfg.threads, 0, stream>>>(table_arg, input, output, count);
    }
    gpu::check_launch("rcclx::dda::allreduce");
#else
    (void)stream;
    (void)cfg;
    const core::peer_table<T, MaxRanks>* tp;
    if constexpr (std::is_pointer<TableArg>::value) tp = table_arg;
    else tp = &table_arg;
    gpu::run_host_blocks(num_blocks, [&](int b) {
      (void)run_block<op_t, Algo>(gpu::thread_group{}, *tp, input, output, count, b, num_blocks);
    });
    core::throw_if_error(*tp->signals.err);
#endif
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
template <class T, int MaxRanks>
void allreduce(const core::peer_table<T, MaxRanks>& table, const T* input, T* output, std::size_t count,
               reduce_op op = reduce_op::sum, algorithm algo = algorithm::automatic, gpu::stream_t stream = {},
               int num_blocks = 0, int threads = 0) {
  static_assert(core::is_reducible_v<T>, "rcclx::dda::allreduce: T must be float, rcclx::bf16, rcclx::fp16 or int32_t");
  const char* who = "rcclx::dda::allreduce";
  const int n = table.num_ranks();
  detail::validate_call<T>(who, n, MaxRanks, input, output, count, op, algo, num_blocks);
  const algorithm a = resolve_algorithm<T>(algo, count, n);
  const launch_config cfg = detail::with_threads(who, threads);
  const int nb = num_blocks > 0 ? num_blocks : num_blocks_for<T>(count, a, n, cfg);
  detail::validate_table(who, table, input, output, count, a, nb);
  if (count == 0) return;
  if (a == algorithm::flat) detail::launch<algorithm::flat, T, MaxRanks>(table, n, input, output, count, op, stream, nb, cfg);
  else detail::launch<algorithm::tree, T, MaxRanks>(table, n, input, output, count, op, stream, nb, cfg);
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
  static_assert(core::is_reducible_v<T>, "rcclx::dda::allreduce: T must be float, rcclx::bf16, rcclx::fp16 or int32_t");
  const char* who = "rcclx::dda::allreduce(device table)";
  if (!device_table) throw error(errc::invalid_argument, std::string(who) + ": device_table is null");
  detail::validate_call<T>(who, num_ranks, MaxRanks, input, output, count, op, algo, num_blocks);
  const algorithm a = resolve_algorithm<T>(algo, count, num_ranks);
  const launch_config cfg = detail::with_threads(who, threads);
  const int nb = num_blocks > 0 ? num_blocks : num_blocks_for<T>(count, a, num_ranks, cfg);
#if RCCLX_BACKEND_HOST
  // Host "device memory" is readable: the full checks apply.
  if (device_table->num_ranks() != num_ranks)
    throw error(errc::mismatch, std::string(who) + ": num_ranks = " + std::to_string(num_ranks) +
                                    " but the table has " + std::to_string(device_table->num_ranks()));
  detail::validate_table(who, *device_table, input, output, count, a, nb);
#endif
  if (count == 0) return;
  if (a == algorithm::flat)
    detail::launch<algorithm::flat, T, MaxRanks>(device_table, num_ranks, input, output, count, op, stream, nb, cfg);
  else
    detail::launch<algorithm::tree, T, MaxRanks>(device_table, num_ranks, input, output, count, op, stream, nb, cfg);
}

}  // namespace dda
RCCLX_NAMESPACE_END
