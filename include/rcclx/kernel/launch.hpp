// rcclx/kernel/launch.hpp: the one launch path of the ready-made kernels: a block body (what a
// collective runs in one block of one rank) becomes a kernel with a peer table by value, a kernel
// with the table in device memory (checked there), a kernel without a table, or, on the host
// backend, one std::thread per block. Part of rcclx/kernel/: internal but shared by the launchers
// (dda, lpc, fused, fp8); readable, not a public API.
//
//   struct my_body {                                     // trivially copyable: a kernel argument
//     static constexpr int max_threads = 512;            // the kernel's __launch_bounds__ (default 512)
//     const float* in; float* out; std::size_t count;
//     template <class Group, class T, int MaxRanks>
//     RCCLX_HOST_DEVICE bool operator()(const Group& g, const rcclx::core::peer_table<T, MaxRanks>& t,
//                                       int block, int num_blocks) const;      // false: leave
//   };
//   namespace k = rcclx::kernel;
//   k::launch("my_collective", table, k::table_need{n, bytes}, {blocks, threads}, my_body{in, out, count}, stream);
//   k::launch("my_collective", k::device_table<float, 8>{dev_table, n}, need, shape, body, stream);
//   k::launch_io<my_call>("my_collective", table, in, out, count, op, stream, num_blocks);  // checks too
//
// Every launch first checks its shape against the body's bound (more threads than max_threads:
// rcclx::error invalid_argument naming both; the compiled kernel could not run them), and loads
// the kernel's module once before its first launch (gpu::preload_kernel), together with the
// kernels of `also_preload<Other...>` (what the same launcher may launch next: a call sequence
// alternating between them never loads a module while a peer kernel spins).
// A table in device memory cannot be read by the host: the kernel checks the rank count, the
// symmetric buffer bytes the call needs (table_need::bytes, or the body's buffer_bytes(signals,
// threads, blocks) when it has one) and the pad blocks it uses (table_need::pad_blocks, or the
// grid); on a mismatch it records errc::mismatch in the rank's error record (`observed`: 1 ranks,
// 2 bytes, 3 pad blocks) and leaves without touching any buffer.
// Host backend: the blocks run as std::threads (gpu::run_host_blocks), then a recorded error
// (a barrier timeout) is thrown as rcclx::error; with RCCLX_EMULATE_THREADS=1 each block runs its
// shape.threads threads (gpu/emulated_block.hpp) and the body gets a gpu::block_group of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../core/peer_table.hpp"
#include "../gpu/atomic.hpp"
#include "../gpu/group.hpp"
#include "../gpu/host_blocks.hpp"
#include "../gpu/runtime.hpp"
#include "checks.hpp"
#if RCCLX_BACKEND_CUDA
#  include "../gpu/cluster.hpp"
#endif

RCCLX_NAMESPACE_BEGIN
namespace kernel {

// The thread bound of the ready-made kernels: 128 registers per thread on sm_90 and gfx942.
inline constexpr int default_max_threads = 512;

// Blocks per rank and threads per block of one launch (threads: 1 on the host backend, unless
// RCCLX_EMULATE_THREADS=1: then the GPU's).
struct grid_shape {
  int blocks;
  int threads;
};

// What a call needs of a table in device memory, checked by the kernel: the rank count the caller
// stated, the bytes of each symmetric buffer, and the pad blocks (block slots) it uses (0: its grid).
struct table_need {
  int num_ranks;
  std::size_t bytes;
  int pad_blocks = 0;
};

// A peer table in device memory (e.g. a captured graph's, patched after capture) and the rank
// count the caller states for it.
template <class T, int MaxRanks>
struct device_table {
  const core::peer_table<T, MaxRanks>* table;
  int num_ranks;
};

// Kernels the same launcher may launch instead (preloaded with the one launched).
template <class... Bodies>
struct also_preload {};

// A constant a body (or functor) may declare, Get<Body> (an integral_constant of it), where Body
// declares it, else Default: how the launchers read a body's launch bounds.
template <template <class> class Get, class Body, auto Default, class = void>
struct declared_or : std::integral_constant<decltype(Default), Default> {};
template <template <class> class Get, class Body, auto Default>
struct declared_or<Get, Body, Default, std::void_t<Get<Body>>> : Get<Body> {};

namespace detail {
// The element type and rank bound of a launcher's table form.
template <class Table>
struct table_form;
template <class T, int MaxRanks>
struct table_form<core::peer_table<T, MaxRanks>> {
  using value_type = T;
  static constexpr int max_ranks = MaxRanks;
  static constexpr bool in_device_memory = false;
};
template <class T, int MaxRanks>
struct table_form<device_table<T, MaxRanks>> {
  using value_type = T;
  static constexpr int max_ranks = MaxRanks;
  static constexpr bool in_device_memory = true;
};

template <class Body>
using declared_max_threads = std::integral_constant<int, Body::max_threads>;
template <class Body>
using max_threads_of = declared_or<declared_max_threads, Body, default_max_threads>;
// Body::min_blocks > 0 (CUDA): __launch_bounds__(max_threads, min_blocks).
template <class Body>
using declared_min_blocks = std::integral_constant<int, Body::min_blocks>;
template <class Body>
using min_blocks_of = declared_or<declared_min_blocks, Body, 0>;
// Body::bounded == false: no __launch_bounds__ at all (the compiler's own register heuristics).
template <class Body>
using declared_bounded = std::integral_constant<bool, Body::bounded>;
template <class Body>
using bounded_of = declared_or<declared_bounded, Body, true>;
// Does the body say how many symmetric buffer bytes it needs of given pads and grid?
template <class Body, class Signals, class = void>
struct has_buffer_bytes : std::false_type {};
template <class Body, class Signals>
struct has_buffer_bytes<Body, Signals,
                        std::void_t<decltype(std::declval<const Body&>().buffer_bytes(std::declval<const Signals&>(), 1, 1))>>
    : std::true_type {};
}  // namespace detail

template <class Body>
inline constexpr int max_threads_v = detail::max_threads_of<Body>::value;

// Refuses a block of more threads than a kernel's bound (the compiled kernel cannot run it).
inline void check_threads(const std::string& who, int threads, int bound = default_max_threads) {
  if (threads > bound)
    throw error(errc::invalid_argument, who + ": threads = " + std::to_string(threads) + " exceeds " +
                                            std::to_string(bound) +
                                            ", the ready-made kernels' bound (__launch_bounds__)");
}

// The symmetric buffer bytes a call of `body` needs of pads `s` with this grid.
template <class Body, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::size_t buffer_bytes(const Body& body, const table_need& need,
                                                             const core::signal_pads<MaxRanks>& s, int threads,
                                                             int blocks) {
  if constexpr (detail::has_buffer_bytes<Body, core::signal_pads<MaxRanks>>::value)
    return body.buffer_bytes(s, threads, blocks);
  else
    return (void)s, (void)threads, (void)blocks, need.bytes;
}

// The group a launch hands a block body: the whole block on GPUs and with emulated threads
// (RCCLX_EMULATE_THREADS=1: every thread of the block a fiber), the block's one thread on the host.
#if RCCLX_GPU_BLOCKS
using launch_group = gpu::block_group;
#else
using launch_group = gpu::thread_group;
#endif

// A device template instantiated for the launch group, as a type, so that a body can name in its
// type the function its kernel calls (directly: Fn is a constant, the call is inlined):
//   template <class Op, class Schedule, class T, int MaxRanks>
//   using allgather_fn = device_fn<&dda::flat_allgather<Schedule, T, MaxRanks, launch_group>>;
template <auto Fn>
struct device_fn {
  template <class... A>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool operator()(const A&... a) const {
    return Fn(a...);
  }
};

// The body of a collective over (input, output, count): Fn{}(g, t, input, output, count, block,
// num_blocks), Fn an empty function object (a device_fn) that names the collective's device template.
template <class Fn, class T>
struct io_body {
  const T* input;
  T* output;
  std::size_t count;
  template <class Group, int MaxRanks>
  RCCLX_HOST_DEVICE bool operator()(const Group& g, const core::peer_table<T, MaxRanks>& t, int block,
                                    int num_blocks) const {
    return Fn{}(g, t, input, output, count, block, num_blocks);
  }
};

// ---- the table forms a launcher takes, read alike ------------------------------------------------

template <class T, int MaxRanks>
inline int num_ranks_of(const core::peer_table<T, MaxRanks>& t) { return t.num_ranks(); }
template <class T, int MaxRanks>
inline int num_ranks_of(const device_table<T, MaxRanks>& d) { return d.num_ranks; }

// "fn" for a table by value, "fn(device table)" for one in device memory (the errors' prefix).
template <class T, int MaxRanks>
inline std::string name_of(const char* fn, const core::peer_table<T, MaxRanks>&) { return fn; }
template <class T, int MaxRanks>
inline std::string name_of(const char* fn, const device_table<T, MaxRanks>& d) {
  const std::string w = std::string(fn) + "(device table)";
  if (!d.table) throw error(errc::invalid_argument, w + ": device_table is null");
  return w;
}

// The table the host can check: by value; in device memory only on the host backend (there it is
// host memory), after checking that its rank count is the one stated. nullptr: the kernel checks.
template <class T, int MaxRanks>
inline const core::peer_table<T, MaxRanks>* readable(const std::string&, const core::peer_table<T, MaxRanks>& t) {
  return &t;
}
template <class T, int MaxRanks>
inline const core::peer_table<T, MaxRanks>* readable(const std::string& who, const device_table<T, MaxRanks>& d) {
#if RCCLX_BACKEND_HOST
  if (d.table->num_ranks() != d.num_ranks)
    throw error(errc::mismatch, who + ": num_ranks = " + std::to_string(d.num_ranks) + " but the table has " +
                                    std::to_string(d.table->num_ranks()));
  return d.table;
#else
  (void)who;
  (void)d;
  return nullptr;
#endif
}

// ---- the kernels -----------------------------------------------------------------------------------

#if RCCLX_BACKEND_GPU
namespace detail {
// Records a launch the device-side checks reject, in the rank's error record: code mismatch,
// `observed` = which check failed.
template <int MaxRanks>
RCCLX_DEVICE inline void record_mismatch(const core::signal_pads<MaxRanks>& s, std::uint32_t what) {
  if (gpu::compare_exchange_local(&s.err->code, 0u, 0xFFFFFFFFu) != 0u) return;
  s.err->waiting_rank = static_cast<std::uint32_t>(s.rank);
  s.err->missing_rank = static_cast<std::uint32_t>(s.rank);
  s.err->kind = 0;
  s.err->block = blockIdx.x;
  s.err->call = 0;
  s.err->observed = what;
  gpu::store_release_system(&s.err->code, static_cast<std::uint32_t>(errc::mismatch));
}

template <class Body, class T, int MaxRanks>
RCCLX_GLOBAL void __launch_bounds__(max_threads_of<Body>::value) table_kernel(core::peer_table<T, MaxRanks> t, Body body) {
  (void)body(gpu::block_group{}, t, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
}

// Checked first, uniformly, so every block leaves together when the table does not fit the call.
template <class Body, class T, int MaxRanks>
RCCLX_GLOBAL void __launch_bounds__(max_threads_of<Body>::value)
    device_table_kernel(const core::peer_table<T, MaxRanks>* table, table_need need, Body body) {
  const core::peer_table<T, MaxRanks>& t = *table;  // read in place (a local copy indexed by rank goes to scratch)
  std::uint32_t bad = 0;
  if (t.num_ranks() != need.num_ranks) bad = 1;
  else if (kernel::buffer_bytes(body, need, t.signals, static_cast<int>(blockDim.x), static_cast<int>(gridDim.x)) >
           t.capacity_bytes)
    bad = 2;
  else if ((need.pad_blocks > 0 ? need.pad_blocks : static_cast<int>(gridDim.x)) > t.signals.max_blocks) bad = 3;
  if (bad) {
    if (threadIdx.x == 0) record_mismatch(t.signals, bad);
    return;
  }
  (void)body(gpu::block_group{}, t, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
}

// Bodies without a table: body(group, block, num_blocks). Three attribute forms, as the body asks.
template <class Body>
RCCLX_GLOBAL void __launch_bounds__(max_threads_of<Body>::value) grid_kernel(Body body) {
  (void)body(gpu::block_group{}, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
}
template <class Body>
RCCLX_GLOBAL void grid_kernel_unbounded(Body body) {
  (void)body(gpu::block_group{}, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
}
#  if RCCLX_BACKEND_CUDA  // HIP's second argument means something else (waves per EU): not used there
template <class Body>
RCCLX_GLOBAL void __launch_bounds__(max_threads_of<Body>::value, min_blocks_of<Body>::value) grid_kernel_occupancy(Body body) {
  (void)body(gpu::block_group{}, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
}
#  endif
}  // namespace detail

// The kernels, as function pointers (occupancy queries, cluster launches).
template <class Body, class T, int MaxRanks>
constexpr auto kernel_of(const core::peer_table<T, MaxRanks>*) {
  return &detail::table_kernel<Body, T, MaxRanks>;
}
template <class Body, class T, int MaxRanks>
constexpr auto kernel_of(const device_table<T, MaxRanks>*) {
  return &detail::device_table_kernel<Body, T, MaxRanks>;
}
template <class Body>
constexpr auto grid_kernel_of() {
#  if RCCLX_BACKEND_CUDA
  if constexpr (detail::bounded_of<Body>::value && detail::min_blocks_of<Body>::value > 0)
    return &detail::grid_kernel_occupancy<Body>;
  else
#  endif
  if constexpr (detail::bounded_of<Body>::value)
    return &detail::grid_kernel<Body>;
  else
    return &detail::grid_kernel_unbounded<Body>;
}

namespace detail {
// Loads the modules of Body's kernel and of Also...'s (same table form) once per process.
template <class Table, class Body, class... Also>
inline void preload_once() {
  static const bool once = [] {
    if constexpr (std::is_void<Table>::value) {
      gpu::preload_kernel(grid_kernel_of<Body>());
      (gpu::preload_kernel(grid_kernel_of<Also>()), ...);
    } else {
      gpu::preload_kernel(kernel_of<Body>(static_cast<const Table*>(nullptr)));
      (gpu::preload_kernel(kernel_of<Also>(static_cast<const Table*>(nullptr))), ...);
    }
    return true;
  }();
  (void)once;
}
}  // namespace detail
#endif  // RCCLX_BACKEND_GPU

// ---- the launches ----------------------------------------------------------------------------------

// One rank's blocks of `body` over `table` (a peer table by value, or a device_table): a kernel of
// shape.blocks blocks of shape.threads threads on `stream`, or std::threads on the host backend.
template <class Table, class Body, class... Also>
inline void launch(const std::string& who, const Table& table, const table_need& need, grid_shape shape,
                   const Body& body, gpu::stream_t stream, also_preload<Also...> = {}) {
  static_assert(std::is_trivially_copyable<Body>::value, "a block body is a kernel argument: trivially copyable");
  using form = detail::table_form<Table>;
  using T = typename form::value_type;
  constexpr int max_ranks = form::max_ranks;
  check_threads(who, shape.threads, max_threads_v<Body>);
#if RCCLX_BACKEND_GPU
  detail::preload_once<Table, Body, Also...>();
  if constexpr (form::in_device_memory) {
    detail::device_table_kernel<Body, T, max_ranks><<<shape.blocks, shape.threads, 0, stream>>>(table.table, need, body);
  } else {
    detail::table_kernel<Body, T, max_ranks><<<shape.blocks, shape.threads, 0, stream>>>(table, body);
  }
  gpu::check_launch(who.c_str());
#else
  (void)need;
  (void)stream;
  const core::peer_table<T, max_ranks>* tp;
  if constexpr (form::in_device_memory) tp = table.table;  // host memory on this backend
  else tp = &table;
  const core::peer_table<T, max_ranks>& t = *tp;
  const int nb = shape.blocks;
#  if RCCLX_EMULATE_THREADS
  // Every thread of every block (gpu/emulated_block.hpp): shape.threads fibers per block.
  struct grid {
    const Body* body;
    const core::peer_table<T, max_ranks>* t;
    int nb;
  } const g{&body, tp, nb};
  gpu::run_host_blocks(
      nb,
      [](const void* p, int b) {
        const grid& x = *static_cast<const grid*>(p);
        (void)(*x.body)(launch_group{}, *x.t, b, x.nb);
      },
      &g, 0, shape.threads);
#  else
  gpu::run_host_blocks(nb, [&](int b) { (void)body(gpu::thread_group{}, t, b, nb); });
#  endif
  core::throw_if_error(*t.signals.err);
#endif
}

// The same for a body without a table: body(group, block, num_blocks).
template <class Body, class... Also>
inline void launch(const std::string& who, grid_shape shape, const Body& body, gpu::stream_t stream,
                   also_preload<Also...> = {}) {
  static_assert(std::is_trivially_copyable<Body>::value, "a block body is a kernel argument: trivially copyable");
  check_threads(who, shape.threads, max_threads_v<Body>);
#if RCCLX_BACKEND_GPU
  detail::preload_once<void, Body, Also...>();
  grid_kernel_of<Body>()<<<shape.blocks, shape.threads, 0, stream>>>(body);
  gpu::check_launch(who.c_str());
#else
  (void)stream;
  const int nb = shape.blocks;
#  if RCCLX_EMULATE_THREADS
  struct grid {
    const Body* body;
    int nb;
  } const g{&body, nb};
  gpu::run_host_blocks(
      nb,
      [](const void* p, int b) {
        const grid& x = *static_cast<const grid*>(p);
        (void)(*x.body)(launch_group{}, b, x.nb);
      },
      &g, 0, shape.threads);
#  else
  gpu::run_host_blocks(nb, [&](int b) { (void)body(gpu::thread_group{}, b, nb); });
#  endif
#endif
}

// ---- the host side of a collective over (input, output, count) ------------------------------------

// The whole host-side sequence of such a launcher (dda's one-shots, lpc's collectives), for both
// table forms: the checks that need no table (op, rank count, count, buffers, schedule), the grid,
// the checks of a table the host can read, then one launch of io_body<Call::fn<Op, T, MaxRanks>, T>,
// Op the type of `op` (core::op_sum for a collective that does not reduce). Call says what differs:
//   static constexpr io_kind io;                           // the output's shape (check_call)
//   using schedule = ...;                                  // its mesh schedule (check_schedule)
//   template <class Op, class T, int MaxRanks> using fn;   // its device template (a device_fn)
//   template <class T> static grid_shape grid(count, num_ranks, pad_blocks, num_blocks);
//                                                          // pad_blocks: the pads' max_blocks, 0 unknown
//   template <class T> static std::size_t buffer_bytes(count, num_ranks);   // per symmetric buffer
//   static void check_table(who, const core::peer_table<T, MaxRanks>&, input, output, count, blocks);
template <class Call, class T, class Table>
inline void launch_io(const char* fn, const Table& table, const T* input, T* output, std::size_t count, reduce_op op,
                      gpu::stream_t stream, int num_blocks) {
  constexpr int max_ranks = detail::table_form<Table>::max_ranks;
  constexpr bool reduces = Call::io == io_kind::reduce || Call::io == io_kind::scatter;
  const std::string who = name_of(fn, table);
  const int n = num_ranks_of(table);
  if (reduces) check_op(who, op);
  check_call<T>(who, Call::io, n, max_ranks, input, output, count, num_blocks);
  check_schedule<typename Call::schedule>(who, n);
  const core::peer_table<T, max_ranks>* t = readable(who, table);
  const grid_shape shape = Call::template grid<T>(count, n, t ? t->signals.max_blocks : 0, num_blocks);
  if (t) Call::check_table(who, *t, input, output, count, shape.blocks);
  if (count == 0) return;  // nothing to move (the same on every rank: no barrier needed)
  const table_need need{n, Call::template buffer_bytes<T>(count, n)};
  const auto run = [&](auto op_tag) {
    using body = io_body<typename Call::template fn<decltype(op_tag), T, max_ranks>, T>;
    launch(who, table, need, shape, body{input, output, count}, stream);
  };
  if constexpr (reduces) core::with_op(op, run);
  else run(core::op_sum{});
}

#if RCCLX_BACKEND_CUDA
// One rank's blocks of `body` over a table by value in clusters of `cluster_blocks` blocks (CUDA
// sm_90+; shape.blocks a multiple of it).
template <class T, int MaxRanks, class Body>
inline void launch_clusters(const std::string& who, const core::peer_table<T, MaxRanks>& table, grid_shape shape,
                            int cluster_blocks, const Body& body, gpu::stream_t stream) {
  static_assert(std::is_trivially_copyable<Body>::value, "a block body is a kernel argument: trivially copyable");
  check_threads(who, shape.threads, max_threads_v<Body>);
  detail::preload_once<core::peer_table<T, MaxRanks>, Body>();
  gpu::launch_clusters(&detail::table_kernel<Body, T, MaxRanks>, shape.blocks, shape.threads, cluster_blocks, stream,
                       table, body);
}
#endif

}  // namespace kernel
RCCLX_NAMESPACE_END
