// rcclx/lpc/workspace.hpp: how much symmetric buffer each rank needs for a low-precision
// collective, and how the collectives lay their FP8 data out in it.
//
//   std::size_t bytes = rcclx::lpc::workspace_bytes<>(rcclx::lpc::collective::allreduce, count, num_ranks);
//   void* sym = rcclx::gpu::device_malloc(bytes);       // every rank the same size (a symmetric buffer)
//
// Layout: the buffer is cut into K equal slots, each an fp8::block_layout of the same capacity
// (FP8 payload from the slot's start, scales from the next 16-byte boundary after the payload
// capacity). K and the slot capacity depend only on the buffer's capacity and the rank count,
// never on the count of a call, so the same position always belongs to the same slot:
//   allreduce       K = N + 1: slot c (c < N) = this rank's input chunk c, quantized;
//                              slot N = this rank's reduced chunk, re-quantized
//   allgather       K = 1:     this rank's input, quantized
//   reduce_scatter  K = N:     slot c = input block c (destined for rank c), quantized
//   alltoall        K = N:     slot c = input block c (destined for rank c), quantized (slot r unused)
// A slot holds a chunk rounded up to whole quantization blocks: the padding is never read as data.
// workspace_bytes is the smallest capacity whose slots hold the call's largest chunk; the
// launchers reject a smaller buffer with rcclx::error(errc::invalid_argument) naming both sizes.
#pragma once

#include <cstddef>

#include "../kernel/checks.hpp"
#include "config.hpp"

RCCLX_NAMESPACE_BEGIN
namespace lpc {

enum class collective { allreduce, allgather, reduce_scatter, alltoall };

inline const char* to_string(collective c) {
  switch (c) {
    case collective::allreduce: return "allreduce";
    case collective::allgather: return "allgather";
    case collective::reduce_scatter: return "reduce_scatter";
    case collective::alltoall: return "alltoall";
  }
  return "invalid";
}

// The collective's input/output relation, for the shared argument checks (kernel/checks.hpp).
RCCLX_HOST_DEVICE constexpr kernel::io_kind io_of(collective c) {
  return c == collective::allreduce    ? kernel::io_kind::reduce
         : c == collective::allgather  ? kernel::io_kind::gather
         : c == collective::reduce_scatter ? kernel::io_kind::scatter
                                       : kernel::io_kind::exchange;
}

namespace detail {

RCCLX_HOST_DEVICE constexpr int num_slots(collective c, int num_ranks) {
  return c == collective::allreduce ? num_ranks + 1 : c == collective::allgather ? 1 : num_ranks;
}

// Elements of the largest chunk one slot receives. AllReduce chunks are whole quantization blocks
// (ceil(blocks / N) of them), so every block lies in one chunk and chunk starts stay 16-byte aligned;
// the last chunk is shorter (or empty). The other collectives quantize the blocks the caller defined.
template <int BlockSize>
RCCLX_HOST_DEVICE constexpr std::size_t chunk_elems(collective c, std::size_t count, int num_ranks) {
  const std::size_t n = static_cast<std::size_t>(num_ranks);
  switch (c) {
    case collective::allreduce: {
      const std::size_t blocks = (count + BlockSize - 1) / BlockSize;
      return (blocks + n - 1) / n * BlockSize;
    }
    case collective::allgather: return count;
    default: return count / n;
  }
}

// Bytes of one slot that holds `elems` elements (whole blocks).
template <class Config>
RCCLX_HOST_DEVICE constexpr std::size_t slot_bytes_for(std::size_t elems) {
  constexpr std::size_t b = static_cast<std::size_t>(Config::block_size);
  return Config::layout::total_bytes((elems + b - 1) / b * b);
}

// One rank's buffer cut into `k` slots: the largest whole-block capacity k slots of which fit.
template <class Config>
struct slots {
  using scale_type = typename Config::scale_type;
  std::size_t elems;  // capacity of a slot in elements (a multiple of the block size)
  std::size_t bytes;  // size of a slot (block_layout::total_bytes(elems))

  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE slots(std::size_t capacity_bytes, int k) {
    constexpr std::size_t b = static_cast<std::size_t>(Config::block_size);
    const std::size_t per = capacity_bytes / static_cast<std::size_t>(k);
    std::size_t units = per / (b + sizeof(scale_type));  // blocks of payload + scale
    // The 16-byte rounding of the scale array can cost one block (b + scale > 15 bytes).
    while (units > 0 && Config::layout::total_bytes(units * b) > per) --units;
    elems = units * b;
    bytes = Config::layout::total_bytes(elems);
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE unsigned char* payload(void* base, int slot) const {
    return static_cast<unsigned char*>(base) + static_cast<std::size_t>(slot) * bytes;
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE const unsigned char* payload(const void* base, int slot) const {
    return static_cast<const unsigned char*>(base) + static_cast<std::size_t>(slot) * bytes;
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE scale_type* scales(void* base, int slot) const {
    return Config::layout::scales(payload(base, slot), elems);
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE const scale_type* scales(const void* base, int slot) const {
    return Config::layout::scales(payload(base, slot), elems);
  }
};

}  // namespace detail

// Bytes of symmetric buffer each rank needs for `collective` over `count` elements per rank (the
// input count: an AllGather's output has num_ranks * count elements, a ReduceScatter's count / N).
template <class Config = default_config>
RCCLX_HOST_DEVICE constexpr std::size_t workspace_bytes(collective c, std::size_t count, int num_ranks) {
  static_assert(is_config_v<Config>, "rcclx::lpc::workspace_bytes: Config must be an rcclx::lpc::config");
  return static_cast<std::size_t>(detail::num_slots(c, num_ranks)) *
         detail::slot_bytes_for<Config>(detail::chunk_elems<Config::block_size>(c, count, num_ranks));
}

}  // namespace lpc
RCCLX_NAMESPACE_END
