// rcclx/dda/detail/launch.hpp: what every ready-made collective kernel and host launcher shares:
// argument checks that name the argument and the limit, the error record of a rejected
// device-table launch, and one kernel / host-thread launcher over a "block body" functor.
//
//   struct body {                   // trivially copyable: a kernel argument on GPUs
//     const float* in; float* out; std::size_t count;
//     template <class Group, class T, int MaxRanks>
//     RCCLX_HOST_DEVICE bool operator()(const Group& g, const core::peer_table<T, MaxRanks>& t,
//                                       int block, int num_blocks) const;   // false: leave
//   };
//   dda::detail::launch_body<T, MaxRanks>("rcclx::dda::allgather", table, n, need_bytes, body{...},
//                                         stream, num_blocks, threads);
//
// GPU: one kernel of num_blocks blocks on `stream`; with the table in device memory the kernel
// first checks what the host could not (rank count, capacity, grid size) and records
// errc::mismatch in the rank's error record instead of touching any buffer. Host backend: one
// std::thread per block, joined, then a recorded barrier timeout is thrown as rcclx::error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "../../core/barrier.hpp"
#include "../../core/error.hpp"
#include "../../core/ops.hpp"
#include "../../core/peer_table.hpp"
#include "../../gpu/group.hpp"
#include "../../gpu/host_blocks.hpp"
#include "../../gpu/memory.hpp"
#include "../../gpu/runtime.hpp"

#if RCCLX_BACKEND_HOST
#  include <thread>
#  include <vector>
#endif

RCCLX_NAMESPACE_BEGIN
namespace dda {
namespace detail {

using core::detail::pointer_text;

// Do [a, a + a_bytes) and [b, b + b_bytes) share a byte?
inline bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes && b_bytes && x < y + b_bytes && y < x + a_bytes;
}
inline bool overlaps(const void* a, const void* b, std::size_t bytes) { return overlaps(a, bytes, b, bytes); }

// ---- argument checks shared by the launchers ---------------------------------------------------------

inline void check_num_ranks(const std::string& who, int num_ranks, int max_ranks_of_table) {
  if (num_ranks < 2 || num_ranks > max_ranks_of_table)
    throw error(errc::invalid_argument, who + ": num_ranks = " + std::to_string(num_ranks) + " is outside [2, " +
                                            std::to_string(max_ranks_of_table) + "] (the table's MaxRanks)");
}

inline void check_num_blocks(const std::string& who, int num_blocks) {
  if (num_blocks < 0)
    throw error(errc::invalid_argument, who + ": num_blocks = " + std::to_string(num_blocks) +
                                            " is negative (0 picks the default)");
}

// count elements of T must be a byte size, and `scale` times them too (an AllGather's output).
template <class T>
inline void check_count(const std::string& who, std::size_t count, std::size_t scale = 1) {
  if (count > static_cast<std::size_t>(-1) / sizeof(T) / scale)
    throw error(errc::invalid_argument, who + ": count = " + std::to_string(count) + " overflows a byte size");
}

// A non-null user buffer aligned to its element type.
template <class T>
inline void check_user_pointer(const std::string& who, const char* name, const void* p) {
  if (!p) throw error(errc::invalid_argument, who + ": " + name + " must not be null");
  if (!gpu::is_aligned(p, alignof(T)))
    throw error(errc::misaligned, who + ": " + name + " = " + pointer_text(p) + " is not aligned to sizeof(" +
                                      core::type_name<T>() + ") = " + std::to_string(sizeof(T)) + " bytes");
}

// Input and output of a call: non-null, aligned, and either disjoint or (when `may_alias`, for
// collectives whose output has the input's size and layout) equal.
template <class T>
inline void check_in_out(const std::string& who, const void* input, std::size_t in_elems, const void* output,
                         std::size_t out_elems, bool may_alias) {
  check_user_pointer<T>(who, "input", input);
  check_user_pointer<T>(who, "output", output);
  if (may_alias && input == output) return;
  if (overlaps(input, in_elems * sizeof(T), output, out_elems * sizeof(T)))
    throw error(errc::invalid_argument, who + (may_alias ? ": input and output overlap partially (they must be equal "
                                                           "or disjoint)"
                                                         : ": input and output overlap (they must be disjoint)"));
}

// A count that a collective splits into num_ranks equal blocks.
inline void check_divisible(const std::string& who, std::size_t count, int num_ranks) {
  if (count % static_cast<std::size_t>(num_ranks) != 0)
    throw error(errc::invalid_argument, who + ": count = " + std::to_string(count) +
                                            " is not a multiple of num_ranks = " + std::to_string(num_ranks) +
                                            " (the input is split into num_ranks equal blocks)");
}

template <class Schedule>
inline void check_schedule(const std::string& who, int num_ranks) {
  if (!Schedule::supports(num_ranks))
    throw error(errc::unsupported, who + ": the mesh schedule does not support num_ranks = " +
                                       std::to_string(num_ranks) + " (xor_pairs needs a power of two)");
}

// Every rank's symmetric buffer present and 16-byte aligned (they are accessed with 16-byte vectors).
template <class T, int MaxRanks>
inline void check_table_buffers(const std::string& who, const core::peer_table<T, MaxRanks>& t) {
  for (int p = 0; p < t.num_ranks(); ++p) {
    if (!t.data[p]) throw error(errc::invalid_argument, who + ": table.data[" + std::to_string(p) + "] is null");
    if (!gpu::is_aligned(t.data[p], 16))
      throw error(errc::misaligned, who + ": table.data[" + std::to_string(p) + "] = " + pointer_text(t.data[p]) +
                                        " is not 16-byte aligned (symmetric buffers are accessed with 16-byte vectors)");
  }
}

inline void check_capacity(const std::string& who, std::size_t count, std::size_t need_bytes, std::size_t capacity,
                           const std::string& what) {
  if (need_bytes > capacity)
    throw error(errc::invalid_argument, who + ": count = " + std::to_string(count) + " needs " +
                                            std::to_string(need_bytes) + " bytes of symmetric buffer per rank (" +
                                            what + "), more than its capacity of " + std::to_string(capacity) +
                                            " bytes");
}

template <int MaxRanks>
inline void check_blocks_fit(const std::string& who, int num_blocks, const core::signal_pads<MaxRanks>& s) {
  if (num_blocks > s.max_blocks)
    throw error(errc::invalid_argument, who + ": num_blocks = " + std::to_string(num_blocks) +
                                            " exceeds the signal pads' max_blocks = " + std::to_string(s.max_blocks));
}

// Blocks per rank of a one-phase collective whose tiles cover `elems` elements (a chunk): one tile
// (threads x 16 bytes) per block, up to `cap`, then as few blocks as give every block the same
// number of tiles (a pure function of its arguments: every rank launches the same grid).
RCCLX_HOST_DEVICE constexpr int balanced_blocks(std::size_t tiles, int cap) {
  if (tiles <= 1 || cap <= 1) return 1;
  const std::size_t c = static_cast<std::size_t>(cap);
  const std::size_t per_block = (tiles + c - 1) / c;
  return static_cast<int>((tiles + per_block - 1) / per_block);
}
template <class T>
RCCLX_HOST_DEVICE constexpr int blocks_for_elems(std::size_t elems, int threads, int cap) {
  const std::size_t e = static_cast<std::size_t>(gpu::elems_per_vec16<T>);
  const std::size_t vecs = (elems + e - 1) / e;
  return balanced_blocks((vecs + static_cast<std::size_t>(threads) - 1) / static_cast<std::size_t>(threads), cap);
}

#if RCCLX_BACKEND_GPU
// Records a launch the device-side checks reject (table in device memory, contents unknown to the
// host), in the rank's error record: code mismatch, `observed` = which check failed.
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

// ---- one kernel for every block body ------------------------------------------------------------------

template <class Body, class T, int MaxRanks>
RCCLX_GLOBAL void __launch_bounds__(512) body_kernel(core::peer_table<T, MaxRanks> t, Body body) {
  (void)body(gpu::block_group{}, t, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
}

// The table lives in device memory (graphs patched after capture): checked here first, uniformly, so
// every block leaves together when it does not fit the call.
template <class Body, class T, int MaxRanks>
RCCLX_GLOBAL void __launch_bounds__(512)
    body_kernel_indirect(const core::peer_table<T, MaxRanks>* table, int num_ranks, std::size_t need_bytes, Body body) {
  const core::peer_table<T, MaxRanks>& t = *table;  // read in place (a local copy indexed by rank goes to scratch)
  std::uint32_t bad = 0;
  if (t.num_ranks() != num_ranks) bad = 1;
  else if (need_bytes > t.capacity_bytes) bad = 2;
  else if (static_cast<int>(gridDim.x) > t.signals.max_blocks) bad = 3;
  if (bad) {
    if (threadIdx.x == 0) record_mismatch(t.signals, bad);
    return;
  }
  (void)body(gpu::block_group{}, t, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
}
#endif

// Runs one rank's blocks of `body`: a kernel on GPUs, std::threads on the host. `table_arg` is a
// peer_table (by value) or a pointer to one in device memory; need_bytes is what the call needs of
// each symmetric buffer (checked on the device for a device-memory table).
template <class T, int MaxRanks, class TableArg, class Body>
inline void launch_body(const char* who, const TableArg& table_arg, int num_ranks, std::size_t need_bytes,
                        const Body& body, gpu::stream_t stream, int num_blocks, int threads) {
  static_assert(std::is_trivially_copyable<Body>::value, "a block body is a kernel argument: trivially copyable");
  (void)num_ranks;
  (void)need_bytes;
#if RCCLX_BACKEND_GPU
  if constexpr (std::is_pointer<TableArg>::value) {
    body_kernel_indirect<Body, T, MaxRanks><<<num_blocks, threads, 0, stream>>>(table_arg, num_ranks, need_bytes, body);
  } else {
    body_kernel<Body, T, MaxRanks><<<num_blocks, threads, 0, stream>>>(table_arg, body);
  }
  gpu::check_launch(who);
#else
  (void)who;
  (void)stream;
  (void)threads;
  const core::peer_table<T, MaxRanks>* tp;
  if constexpr (std::is_pointer<TableArg>::value) tp = table_arg;
  else tp = &table_arg;
  gpu::run_host_blocks(num_blocks, [&](int b) { (void)body(gpu::thread_group{}, *tp, b, num_blocks); });
  core::throw_if_error(*tp->signals.err);
#endif
}

}  // namespace detail
}  // namespace dda
RCCLX_NAMESPACE_END
