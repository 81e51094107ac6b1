// Example 06's kernel behind a plain interface: linear_silu_kernel.cpp holds the kernel and its
// launch (no torch header; nvcc compiles it as linear_silu_kernel.cu for CUDA), linear_silu.cpp the
// torch side (the host C++ compiler). Keeping torch's headers out of the nvcc translation unit is the
// layout rcclx's own extension uses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

// Bytes of symmetric workspace the kernel needs for an M x N output.
std::int64_t linear_silu_workspace_bytes(std::int64_t M, std::int64_t N);

// out (M x N) = silu(sum over ranks of x_r (M x k) w_r (k x N) + bias), on every rank. handles: the bytes
// of comm.kernel_handles(workspace). stream: a cudaStream_t, or null. Returns "" or the error.
std::string linear_silu_launch(const void* handles, std::size_t handle_bytes, const float* x, const float* w,
                               const float* bias, float* out, std::int64_t M, std::int64_t N, std::int64_t k,
                               void* stream);
