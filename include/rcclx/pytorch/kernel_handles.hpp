// rcclx/pytorch/kernel_handles.hpp: the device handles of a Python rcclx.Communicator, for the
// kernels of your own torch extension (docs/pytorch.md, "Your own kernel").
//
//   # Python: a symmetric tensor as your kernel's exchange buffer, and its handles
//   ws = comm.symmetric_empty(bytes, torch.uint8)
//   handles = comm.kernel_handles(ws)            # a CPU uint8 tensor: a kernel_handles record
//   my_ext.my_op(x, ws, handles)
//
//   // C++, in your extension (any compiler; this header includes no torch header):
//   const auto h = rcclx::pytorch::kernel_handles::from_bytes(handles.data_ptr(), handles.nbytes());
//   rcclx::core::peer_table<float, rcclx::pytorch::max_ranks> table = h.table_as<float>();
//   my_kernel<<<grid, block, 0, stream>>>(table, h.slots, ...);   // tile_allreduce(table, h.slots, ...)
//
// The record is plain bytes (trivially copyable): it travels from the rcclx extension to yours as a
// tensor and is checked on arrival (magic, layout version, size, rank count), so the two extensions
// need not share any symbol; both must be built from the same rcclx headers' layout version.
// table.data[p] is peer p's copy of the symmetric tensor (every rank's tensor of the same
// symmetric_empty call), table.signals the communicator's signal pads. `slots` is the pad range the
// communicator handed out (host::communicator::reserve_tile_slots) for tile-flag kernels
// (fused::tile_allreduce, fused::combine, fused::allreduce_rmsnorm): its own fused ops and your
// kernels share it, one call at a time per communicator, every rank
// making the same calls in the same order on one stream (docs/fusion.md's rules). Errors a kernel
// records in the pads (a peer that never arrived) are raised by comm.synchronize().
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "../core/error.hpp"
#include "../core/peer_table.hpp"
#include "../fused/tile_allreduce.hpp"

RCCLX_NAMESPACE_BEGIN
namespace pytorch {

// Ranks a Python communicator holds at most (the peer tables' MaxRanks).
inline constexpr int max_ranks = 16;

struct kernel_handles {
  static constexpr std::uint32_t magic_value = 0x6B786372u;  // "rcxk"
  // 2: the tile flags' control words in a pad region of their own (core/signal_pad.hpp).
  static constexpr std::uint32_t layout_version = 2;

  std::uint32_t magic;
  std::uint32_t version;
  std::uint32_t bytes;                                // sizeof(kernel_handles) of the writer
  std::int32_t max_ranks_of_writer;
  fused::tile_slots slots;                            // pad slots for tile-flag kernels
  std::uint64_t buffer_bytes;                         // bytes of the symmetric tensor
  core::peer_table<unsigned char, max_ranks> table;   // the symmetric tensor on every rank + the pads

  int rank() const { return table.rank(); }
  int num_ranks() const { return table.num_ranks(); }

  // The table with elements of type T (data[p] = peer p's tensor, capacity in T).
  template <class T>
  core::peer_table<T, max_ranks> table_as() const {
    return table.template as<T>();
  }

  // Reads and checks a record (the bytes of comm.kernel_handles(t)); throws rcclx::error
  // (invalid_argument) naming what does not match.
  static kernel_handles from_bytes(const void* p, std::size_t n) {
    const std::string who = "rcclx::pytorch::kernel_handles";
    if (!p || n != sizeof(kernel_handles))
      throw error(errc::invalid_argument, who + ": got " + std::to_string(n) + " bytes, expected " +
                                              std::to_string(sizeof(kernel_handles)) +
                                              " (pass the tensor comm.kernel_handles(t) returned, unchanged; both "
                                              "extensions must be built from rcclx headers of the same layout)");
    kernel_handles h;
    std::memcpy(&h, p, sizeof h);
    if (h.magic != magic_value)
      throw error(errc::invalid_argument, who + ": these bytes are not a kernel_handles record (bad magic)");
    if (h.version != layout_version || h.bytes != sizeof(kernel_handles) || h.max_ranks_of_writer != max_ranks)
      throw error(errc::invalid_argument, who + ": layout version " + std::to_string(h.version) + " / " +
                                              std::to_string(h.bytes) + " bytes / max_ranks " +
                                              std::to_string(h.max_ranks_of_writer) + " from the rcclx extension, " +
                                              std::to_string(layout_version) + " / " +
                                              std::to_string(sizeof(kernel_handles)) + " / " +
                                              std::to_string(max_ranks) + " in this one: rebuild it against the "
                                              "same rcclx headers");
    if (h.num_ranks() < 2 || h.num_ranks() > max_ranks || h.rank() < 0 || h.rank() >= h.num_ranks())
      throw error(errc::invalid_argument, who + ": rank " + std::to_string(h.rank()) + " of " +
                                              std::to_string(h.num_ranks()) + " is not a valid rank");
    return h;
  }
};
static_assert(std::is_trivially_copyable<kernel_handles>::value, "kernel_handles travels as bytes");

}  // namespace pytorch
RCCLX_NAMESPACE_END
