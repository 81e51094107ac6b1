// rcclx/lpc/select.hpp: when a collective runs in low precision: never unless enabled, then for
// messages of at least a threshold. The run-time counterpart of dda/select.hpp (same byte parsing).
//
//   // RCCL_LOW_PRECISION_ENABLE=1 (all four) or RCCL_LOW_PRECISION_ENABLE_ALLREDUCE=1 (one), and
//   // RCCLX_LPC_MIN_BYTES=16M (default):
//   rcclx::algorithm a = rcclx::lpc::select_algorithm(rcclx::lpc::collective::allreduce, bytes, num_ranks);
//   rcclx::algorithm b = rcclx::lpc::resolve_algorithm<float>(rcclx::lpc::collective::allgather,
//                                                            rcclx::algorithm::automatic, count, num_ranks);
//
// Environment (read at every call; every rank must see the same values, or ranks pick different
// algorithms and never pair up):
//   RCCL_LOW_PRECISION_ENABLE                 1 enables low precision for all four collectives
//   RCCL_LOW_PRECISION_ENABLE_ALLREDUCE       per collective, overrides the variable above either
//   RCCL_LOW_PRECISION_ENABLE_ALLGATHER         way (1 enables, 0 disables that collective)
//   RCCL_LOW_PRECISION_ENABLE_REDUCESCATTER
//   RCCL_LOW_PRECISION_ENABLE_ALLTOALL
//   RCCLX_LPC_MIN_BYTES                       smallest message (input bytes per rank) that uses low
//                                             precision when enabled; default 16M (K, M, G suffixes)
// Switch values: 1/true/yes/on or 0/false/no/off (any case; empty = 0); anything else is an
// rcclx::error(invalid_argument) naming the variable. The names RCCLX users know are kept.
// Why a threshold: below a few MiB the quantize/dequantize work and the extra barrier cost more
// than the bytes saved (QuickReduce loses below ~512 KiB on 2 MI300X, its codecs lose to RCCL below
// ~4 MiB at 8 GPUs; RCCLX enables its LPC from 16 MiB).
// algorithm::automatic never picks algorithm::low_precision unless it is enabled, and never for
// element types other than float and bf16. For AllGather, AlltoAll and ReduceScatter the plain
// algorithm is the one-shot direct access (dda::allgather etc.): flat and tree both mean it.
#pragma once

#include <cctype>
#include <cstddef>
#include <cstdlib>
#include <string>

#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../dda/select.hpp"
#include "../kernel/checks.hpp"
#include "config.hpp"
#include "workspace.hpp"

RCCLX_NAMESPACE_BEGIN
namespace lpc {

inline constexpr std::size_t default_min_bytes = 16 * dda::mib;

namespace detail {

// RCCL's per-collective switch: RCCL_LOW_PRECISION_ENABLE_ and the collective's name in capitals,
// without the underscore (..._ALLREDUCE, _ALLGATHER, _REDUCESCATTER, _ALLTOALL).
inline std::string enable_variable(collective c) {
  std::string v = "RCCL_LOW_PRECISION_ENABLE_";
  for (const char* p = to_string(c); *p; ++p)
    if (*p != '_') v += static_cast<char>(std::toupper(static_cast<unsigned char>(*p)));
  return v;
}

// -1: unset; 0 / 1: the switch's value. Throws on anything that is not a switch value.
inline int env_switch(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return -1;
  std::string s;
  for (const char* p = v; *p; ++p) s += static_cast<char>(std::tolower(static_cast<unsigned char>(*p)));
  if (s == "1" || s == "true" || s == "yes" || s == "on") return 1;
  if (s.empty() || s == "0" || s == "false" || s == "no" || s == "off") return 0;
  throw error(errc::invalid_argument, std::string(name) + " = '" + v +
                                          "' is not a switch (1, true, yes, on or 0, false, no, off)");
}

}  // namespace detail

// Is low precision enabled for collective c (the per-collective variable, else the global one)?
inline bool enabled(collective c) {
  const int one = detail::env_switch(detail::enable_variable(c).c_str());
  if (one >= 0) return one == 1;
  return detail::env_switch("RCCL_LOW_PRECISION_ENABLE") == 1;
}

// Smallest message (input bytes per rank) that runs in low precision when enabled.
inline std::size_t min_bytes() {
  const char* v = std::getenv("RCCLX_LPC_MIN_BYTES");
  return v ? kernel::parse_bytes("RCCLX_LPC_MIN_BYTES", v) : default_min_bytes;
}

// Should a collective of `bytes` input bytes per rank run in low precision?
inline bool use_low_precision(collective c, std::size_t bytes) { return enabled(c) && bytes >= min_bytes(); }

// The algorithm automatic resolves to: low_precision when enabled and large enough; otherwise the
// DDA choice for AllReduce (flat or tree) and the one-shot direct algorithm (flat) for the others.
inline algorithm select_algorithm(collective c, std::size_t bytes, int num_ranks) {
  if (use_low_precision(c, bytes)) return algorithm::low_precision;
  return c == collective::allreduce ? dda::select_algorithm(bytes, num_ranks) : algorithm::flat;
}

// What a call with `requested` runs for `count` elements of T per rank: automatic resolved (low
// precision only for float and bf16), tree and flat mapped to the one-shot algorithm for the
// collectives that have one plain algorithm; an explicit low_precision is kept (the caller rejects
// it for other element types).
template <class T>
inline algorithm resolve_algorithm(collective c, algorithm requested, std::size_t count, int num_ranks) {
  algorithm a = requested;
  if (a == algorithm::automatic) {
    a = is_element_v<T> ? select_algorithm(c, count * sizeof(T), num_ranks)
        : c == collective::allreduce ? dda::select_algorithm(count * sizeof(T), num_ranks)
                                     : algorithm::flat;
  }
  if (c != collective::allreduce && a == algorithm::tree) a = algorithm::flat;
  return a;
}

}  // namespace lpc
RCCLX_NAMESPACE_END
