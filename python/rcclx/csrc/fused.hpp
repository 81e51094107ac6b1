// The fused ops of the rcclx torch extension (all_reduce_rmsnorm), behind a plain interface: their
// kernels are instantiated in fused.cpp (fused.cu for CUDA), a translation unit without torch
// headers, compiled beside ops.cpp.
#pragma once

#include <cstddef>
#include <string>

#include <rcclx/core/peer_table.hpp>
#include <rcclx/core/types.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/gpu/runtime.hpp>
#include <rcclx/pytorch/kernel_handles.hpp>

namespace rcclx_torch {

enum class element { f32, bf16, f16 };
enum class out_format { same, e4m3, e5m2 };

using byte_table = rcclx::core::peer_table<unsigned char, rcclx::pytorch::max_ranks>;

// residual <- residual + allreduce(x); output <- rmsnorm(residual) * weight (FP8: codes of it / *scale).
struct rmsnorm_call {
  element type;
  out_format out;
  const void* x;
  void* residual;
  const void* weight;
  void* output;
  const float* scale;
  std::size_t tokens, hidden;
  float eps;
};

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
