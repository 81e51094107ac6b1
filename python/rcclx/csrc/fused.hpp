// The fused ops of the rcclx torch extension (all_reduce_rmsnorm): their kernels are instantiated in
// fused.cpp (fused.cu for CUDA), compiled beside engine.cpp, which calls them.
#pragma once

#include <cstddef>
#include <string>

#include <rcclx/core/peer_table.hpp>
#include <rcclx/core/types.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/gpu/runtime.hpp>
#include <rcclx/pytorch/kernel_handles.hpp>

#include "engine.hpp"

namespace rcclx_torch {

using byte_table = rcclx::core::peer_table<unsigned char, rcclx::pytorch::max_ranks>;

// This rank's argument errors, or "" (the library's checks; nothing is launched).
std::string rmsnorm_errors(const rmsnorm_call& c, rcclx::algorithm algo, int max_tiles);
// The algorithm a call runs (automatic: the library's choice, the same on every rank).
rcclx::algorithm rmsnorm_algorithm(const rmsnorm_call& c, rcclx::algorithm algo, int num_ranks);
// Bytes of symmetric workspace per rank for the call.
std::size_t rmsnorm_workspace_bytes(const rmsnorm_call& c, rcclx::algorithm resolved);
// Launches the call on this rank over `table` (the fused workspace on every rank + the pads).
void rmsnorm_launch(const rmsnorm_call& c, const byte_table& table, rcclx::fused::tile_slots slots,
                    rcclx::algorithm resolved, rcclx::gpu::stream_t stream);

}  // namespace rcclx_torch
