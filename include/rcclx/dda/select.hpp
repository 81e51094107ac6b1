// rcclx/dda/select.hpp: which DDA AllReduce (flat or tree) for a message: at compile time from the
// type, the rank count and a size known at compile time, or at run time from a tuning table per
// GPU architecture and rank count, overridable by environment variables.
//
//   constexpr auto a = rcclx::dda::select_algorithm_v<rcclx::bf16, 8, 4096>;   // algorithm::flat (this build's arch)
//   rcclx::algorithm b = rcclx::dda::select_algorithm(bytes, num_ranks);        // table + env
//
// Run-time overrides (bytes; a K, M or G suffix means KiB, MiB, GiB):
//   RCCLX_DDA_FLAT_MAX_BYTES  (or RCCLX's RCCL_DDA_ALL_REDUCE_FLAT_MAX_BYTES): flat up to this size
//   RCCLX_DDA_TREE_MAX_BYTES  (or RCCL_DDA_ALL_REDUCE_TREE_MAX_BYTES): tree up to this size
// Every rank must see the same values (ranks that pick different algorithms do not pair up).
// Above tree_max_bytes the tree still works (no external library is called) but NCCL/RCCL's ring
// or their symmetric-memory kernels are usually faster there: prefers_external_library() says so.
// automatic never picks algorithm::low_precision. Sources of the numbers: docs/algorithms.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../gpu/arch.hpp"
#include "../kernel/checks.hpp"

RCCLX_NAMESPACE_BEGIN
namespace dda {

// Largest message (bytes per rank) for which each algorithm is preferred.
struct thresholds {
  std::size_t flat_max_bytes;  // flat for bytes <= this
  std::size_t tree_max_bytes;  // tree above flat_max_bytes, up to this (beyond: see prefers_external_library)
};

inline constexpr std::size_t kib = 1024, mib = 1024 * 1024;
inline constexpr std::size_t no_limit = std::numeric_limits<std::size_t>::max();

// The built-in tuning table (bytes per rank). Measured sources and estimates: docs/algorithms.md.
RCCLX_HOST_DEVICE constexpr thresholds default_thresholds(gpu::arch a, int num_ranks) {
  switch (a) {
    case gpu::arch::gfx90a:  // MI250X: partially connected xGMI: estimates, smaller than MI300X
      if (num_ranks <= 2) return {256 * kib, 16 * mib};
      if (num_ranks <= 4) return {128 * kib, 8 * mib};
      return {64 * kib, 4 * mib};
    case gpu::arch::sm_80:
    case gpu::arch::sm_90:
    case gpu::arch::sm_100:  // NVLink: vLLM's custom AllReduce (one-shot < 512 KiB at <= 4 ranks,
                             // < 256 KiB at 8; two-shot up to its 8 MiB buffer, then NCCL)
      // Two H200s, measured 2026-11-29 (docs/performance.md, two GPUs): flat was at least as fast as
      // the tree up to 8 MiB (both read the peer's S bytes once), and the tree beat NCCL up to
      // 256 MiB.
      if (a == gpu::arch::sm_90 && num_ranks <= 2) return {8 * mib, 256 * mib};
      if (num_ranks <= 4) return {512 * kib, 8 * mib};
      return {256 * kib, 8 * mib};
    case gpu::arch::host:  // threads on a CPU: memory-bound, flat's N-fold reads hurt early
      return {64 * kib, no_limit};
    case gpu::arch::gfx942:
    case gpu::arch::gfx950:
    case gpu::arch::unknown:
    default:  // MI300X: RCCLX's DDA defaults at 8 ranks (flat <= 200 KiB, tree <= 29 MiB);
              // vLLM on ROCm: one-shot < 512 KiB at <= 4 ranks
      if (num_ranks <= 2) return {512 * kib, 64 * mib};
      if (num_ranks <= 4) return {512 * kib, 32 * mib};
      if (num_ranks <= 8) return {200 * kib, 29 * mib};
      return {64 * kib, 16 * mib};  // 16 ranks: extrapolated (no published crossover)
  }
}

RCCLX_HOST_DEVICE constexpr algorithm select_algorithm(std::size_t bytes, const thresholds& t) {
  return bytes <= t.flat_max_bytes ? algorithm::flat : algorithm::tree;
}

// Compile-time choice for the built-in table (environment overrides cannot apply at compile time).
RCCLX_HOST_DEVICE constexpr algorithm select_algorithm(std::size_t bytes, int num_ranks, gpu::arch a) {
  return select_algorithm(bytes, default_thresholds(a, num_ranks));
}

// Compile-time choice for Count elements of T on NumRanks ranks of architecture Arch (default: this
// build's, gpu::build_arch). The same as the run-time select_algorithm on a device of that
// architecture with no environment override.
template <class T, int NumRanks, std::size_t Count, gpu::arch Arch = gpu::build_arch>
inline constexpr algorithm select_algorithm_v = select_algorithm(Count * sizeof(T), NumRanks, Arch);

// Algo itself, or for algorithm::automatic the compile-time choice above (never low_precision).
template <class T, int NumRanks, std::size_t Count, algorithm Algo = algorithm::automatic,
          gpu::arch Arch = gpu::build_arch>
inline constexpr algorithm resolve_algorithm_v =
    Algo == algorithm::automatic ? select_algorithm_v<T, NumRanks, Count, Arch> : Algo;

namespace detail {
// The first of the two variables that is set, parsed; or `fallback`.
inline std::size_t env_bytes(const char* name, const char* alias, std::size_t fallback) {
  if (const char* v = std::getenv(name)) return kernel::parse_bytes(name, v);
  if (const char* v = std::getenv(alias)) return kernel::parse_bytes(alias, v);
  return fallback;
}

inline gpu::arch cached_current_arch() {
  static const gpu::arch a = gpu::current_arch();  // one device per process in practice
  return a;
}
}  // namespace detail

// The table's entry for (arch, num_ranks) with the environment overrides applied (read per call).
inline thresholds tuned_thresholds(int num_ranks, gpu::arch a) {
  thresholds t = default_thresholds(a, num_ranks);
  t.flat_max_bytes = detail::env_bytes("RCCLX_DDA_FLAT_MAX_BYTES", "RCCL_DDA_ALL_REDUCE_FLAT_MAX_BYTES", t.flat_max_bytes);
  t.tree_max_bytes = detail::env_bytes("RCCLX_DDA_TREE_MAX_BYTES", "RCCL_DDA_ALL_REDUCE_TREE_MAX_BYTES", t.tree_max_bytes);
  return t;
}
// The same for the current device's architecture.
inline thresholds tuned_thresholds(int num_ranks) { return tuned_thresholds(num_ranks, detail::cached_current_arch()); }

// Run-time choice: flat or tree (never low_precision) for `bytes` per rank.
inline algorithm select_algorithm(std::size_t bytes, int num_ranks) {
  return select_algorithm(bytes, tuned_thresholds(num_ranks));
}

// True above the tree's range: DDA still works there, but a ring (NCCL/RCCL) is usually faster.
inline bool prefers_external_library(std::size_t bytes, int num_ranks) {
  return bytes > tuned_thresholds(num_ranks).tree_max_bytes;
}

}  // namespace dda
RCCLX_NAMESPACE_END
