// rcclx/kernel/checks.hpp: the host-side argument checks of the ready-made launchers, each naming
// the function, the argument, its value and the limit it broke (rcclx::error). Part of
// rcclx/kernel/: internal but shared by the launchers (dda, lpc, fused, the communicator);
// readable, not a public API.
//
//   namespace k = rcclx::kernel;
//   k::check_call<float>(who, k::io_kind::gather, n, MaxRanks, in, out, count, num_blocks);  // no table needed
//   k::check_table(who, table, count, need_bytes, "the input", num_blocks);                 // a readable table
//   std::size_t b = k::parse_bytes("RCCLX_LPC_MIN_BYTES", "16M");                            // 16 MiB
//
// Checks that need no table contents run for tables in device memory too; the kernel checks the
// rest there (kernel/launch.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../core/peer_table.hpp"
#include "../gpu/memory.hpp"

RCCLX_NAMESPACE_BEGIN
namespace kernel {

using core::detail::pointer_text;

// Do [a, a + a_bytes) and [b, b + b_bytes) share a byte?
inline bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes && b_bytes && x < y + b_bytes && y < x + a_bytes;
}
inline bool overlaps(const void* a, const void* b, std::size_t bytes) { return overlaps(a, bytes, b, bytes); }

// An op a collective of sum, min and max takes: an invalid value is invalid_argument; product, avg and
// premul_sum are unsupported there (they are dda's AllReduce and ReduceScatter's, dda/op_allreduce.hpp).
inline void check_op(const std::string& who, reduce_op op) {
  if (!is_valid(op))
    throw error(errc::invalid_argument, who + ": op = " + std::to_string(static_cast<int>(op)) +
                                            " is not a reduce_op (sum, min, max, product, avg, premul_sum)");
  if (!is_basic(op))
    throw error(errc::unsupported, who + ": op = " + to_string(op) + " is not supported here (sum, min, max); " +
                                       to_string(op) + " is taken by the plain AllReduce and ReduceScatter "
                                       "(rcclx::dda, flat and tree)");
}

// An op of dda's AllReduce, ReduceScatter or Reduce (any reduce_op) for element type T: one that T
// takes (core::takes_op: premul_sum on floating types only, avg not on int8 / uint8 / bool), and a
// premul_sum factor that is finite in T's accumulator precision.
template <class T>
inline void check_spec(const std::string& who, const reduce_spec& spec) {
  if (!is_valid(spec.op))
    throw error(errc::invalid_argument, who + ": op = " + std::to_string(static_cast<int>(spec.op)) +
                                            " is not a reduce_op (sum, min, max, product, avg, premul_sum)");
  if (!core::takes_op<T>(spec.op)) {
    const std::string takes = std::is_same<T, bool>::value ? "sum (or), min (and), max (or), product (and)"
                              : sizeof(T) == 1            ? "sum, min, max, product (modulo 2^8)"
                                                          : "sum, min, max, product, avg";
    throw error(errc::unsupported, who + ": op = " + to_string(spec.op) + " is not defined for " +
                                       core::type_name<T>() + " elements (" + core::type_name<T>() + ": " + takes +
                                       "; premul_sum: float, bf16, fp16, float64)");
  }
  if (spec.factor_device && spec.op != reduce_op::premul_sum)
    throw error(errc::invalid_argument, who + ": a device factor (reduce_spec::factor_device) is for premul_sum, not " +
                                            to_string(spec.op));
  if (spec.op == reduce_op::premul_sum && spec.factor_device && !gpu::is_aligned(spec.factor_device, alignof(T)))
    throw error(errc::misaligned, who + ": premul_sum factor_device = " + pointer_text(spec.factor_device) +
                                      " is not aligned to sizeof(" + core::type_name<T>() + ")");
  if (spec.op == reduce_op::premul_sum && !spec.factor_device) {
    const double f = std::is_same<T, double>::value ? spec.factor : static_cast<double>(static_cast<float>(spec.factor));
    if (!(f - f == 0.0))
      throw error(errc::invalid_argument, who + ": premul_sum factor = " + std::to_string(spec.factor) +
                                              " is not finite" +
                                              (std::is_same<T, double>::value ? "" : " in fp32 (the accumulators of " +
                                                                                          std::string(core::type_name<T>()) + ")"));
  }
}

inline void check_algorithm(const std::string& who, algorithm a) {
  if (!is_valid(a))
    throw error(errc::invalid_argument, who + ": algorithm = " + std::to_string(static_cast<int>(a)) +
                                            " is not an rcclx::algorithm");
}

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
  if (count > std::numeric_limits<std::size_t>::max() / sizeof(T) / scale)
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

// How a collective's output relates to its input of `count` elements per rank on n ranks.
enum class io_kind {
  reduce,    // AllReduce: count elements out; in place allowed
  gather,    // AllGather: n * count out; disjoint
  scatter,   // ReduceScatter: count / n out (count % n == 0); disjoint
  exchange,  // AlltoAll: count out (count % n == 0); in place allowed
};

RCCLX_HOST_DEVICE constexpr std::size_t output_elems(io_kind k, std::size_t count, int n) {
  return k == io_kind::gather    ? count * static_cast<std::size_t>(n)
         : k == io_kind::scatter ? count / static_cast<std::size_t>(n)
                                 : count;
}

// The checks of a call that need no table: rank count, block count, count (a byte size, and a
// multiple of n where the input is split), and the user's input and output buffers. In place only
// where the output has the input's size and layout (every element is read by the thread that later
// writes it).
template <class T>
inline void check_call(const std::string& who, io_kind k, int n, int max_ranks, const void* input, const void* output,
                       std::size_t count, int num_blocks) {
  check_num_ranks(who, n, max_ranks);
  check_num_blocks(who, num_blocks);
  check_count<T>(who, count, k == io_kind::gather ? static_cast<std::size_t>(n) : 1);
  if (k == io_kind::scatter || k == io_kind::exchange) check_divisible(who, count, n);
  if (count == 0) return;
  check_in_out<T>(who, input, count, output, output_elems(k, count, n), k == io_kind::reduce || k == io_kind::exchange);
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

// A readable table against a call: buffers, `need_bytes` of each (what: what they hold), the grid.
template <class T, int MaxRanks>
inline void check_table(const std::string& who, const core::peer_table<T, MaxRanks>& t, std::size_t count,
                        std::size_t need_bytes, const std::string& what, int num_blocks) {
  check_table_buffers(who, t);
  check_capacity(who, count, need_bytes, t.capacity_bytes, what);
  check_blocks_fit(who, num_blocks, t.signals);
}

// Parses a byte count with an optional K/M/G suffix (KiB, MiB, GiB); throws rcclx::error naming
// the variable.
inline std::size_t parse_bytes(const char* var, const char* text) {
  constexpr std::size_t kib = 1024, mib = 1024 * kib, most = std::numeric_limits<std::size_t>::max();
  const std::string s(text);
  std::size_t i = 0, value = 0;
  bool digits = false;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    const std::size_t d = static_cast<std::size_t>(s[i] - '0');
    if (value > (most - d) / 10) throw error(errc::invalid_argument, std::string(var) + " = '" + s + "' overflows");
    value = value * 10 + d;
    digits = true;
    ++i;
  }
  std::size_t scale = 1;
  if (i < s.size()) {
    const char c = s[i];
    if (c == 'K' || c == 'k') scale = kib;
    else if (c == 'M' || c == 'm') scale = mib;
    else if (c == 'G' || c == 'g') scale = 1024 * mib;
    else scale = 0;
    ++i;
  }
  if (!digits || scale == 0 || i != s.size())
    throw error(errc::invalid_argument, std::string(var) + " = '" + s +
                                            "' is not a byte count (digits with an optional K, M or G suffix)");
  if (value > most / scale) throw error(errc::invalid_argument, std::string(var) + " = '" + s + "' overflows");
  return value * scale;
}

}  // namespace kernel
RCCLX_NAMESPACE_END
