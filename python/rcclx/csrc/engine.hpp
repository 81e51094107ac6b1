// The rcclx side of the torch extension, behind an interface of plain C++ types: the communicator,
// its pools and every launch live in engine.cpp and its collectives' units (engine_impl.hpp; their
// .cu twins for CUDA, compiled by nvcc), and ops.cpp (torch's types, the operators, the Python
// bindings) is compiled by the host C++ compiler and includes no rcclx header. Errors cross as
// strings ("" = success), never as exceptions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace rcclx_torch {

constexpr int max_ranks = 16;         // rcclx::pytorch::max_ranks (checked in engine_impl.hpp)
constexpr int collective_slots = 128;  // pad slots of the communicator's own collectives

enum class element : int { f32, bf16, f16, i32, i8, u8, i64, f64, boolean };
enum class out_format : int { same, e4m3, e5m2 };
enum class collective : int { allreduce, allgather, reduce_scatter, alltoall, broadcast, reduce };
enum class reduce : int { sum, min, max, product, avg, premul_sum };
enum class algo : int { flat, tree, low_precision, automatic };

// The built backend: "host" or "cuda".
const char* backend_name();

struct engine;
struct engine_deleter {
  void operator()(engine* e) const;
};
using engine_ptr = std::unique_ptr<engine, engine_deleter>;

// The set-up exchange and the per-call checks: allgather `bytes` from every rank into out (rank
// order); returns "" or why it failed.
using allgather_fn = std::function<std::string(const void* in, void* out, std::size_t bytes)>;

struct engine_options {
  std::size_t buffer_bytes = 0;  // 0: the library's default
  double timeout_s = 0;          // 0: the library's default
  int check_calls = -1;          // -1: the library's default (RCCLX_CHECK_CALLS)
  int max_tiles = 0;             // pad slots for tile-protocol kernels (0: 2048)
  std::size_t symmetric_bytes = 0;  // symmetric_empty's pool (0: 64 MiB)
};

// Collective over the group: builds the communicator (rcclx::host::communicator).
std::string create(int rank, int num_ranks, allgather_fn allgather, const engine_options& o, engine_ptr& out);
int rank_of(const engine& e);
int num_ranks_of(const engine& e);
void tile_slots_of(const engine& e, int& first, int& max_tiles);

// A reduction with its premul_sum factor: `factor`, or (factor_device not null) one element of the
// collective's type in device memory, read when the kernel runs.
struct reduction {
  reduce op = reduce::sum;
  double factor = 1.0;
  const void* factor_device = nullptr;
};

// out <- the collective of in (count elements per rank as the communicator's methods take it; root:
// broadcast's and reduce's). stream: the CUDA stream (cudaStream_t) or null.
std::string run_collective(engine& e, collective c, element t, const void* in, void* out, std::size_t count,
                           const reduction& op, algo a, void* stream, int root = 0);
// The uneven AlltoAll (communicator::alltoallv): num_ranks splits each, in elements.
std::string run_alltoallv(engine& e, element t, const void* in, const std::size_t* in_splits, void* out,
                          const std::size_t* out_splits, void* stream);
std::string barrier(engine& e, void* stream);

// symmetric_empty: `bytes` from the communicator's registered pool (collective on first use);
// `release` hands them back (the pool starts over when nothing is out).
std::string symmetric_take(engine& e, std::size_t bytes, void*& ptr, std::function<void()>& release);
bool is_registered(const engine& e, const void* p, std::size_t bytes);
std::string register_graph_buffers(engine& e);
std::string synchronize(engine& e, void* stream);
// The rcclx::pytorch::kernel_handles record of [p, p + bytes) (a registered range).
std::string kernel_handles(const engine& e, const void* p, std::size_t bytes, std::vector<unsigned char>& out);

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
std::string all_reduce_rmsnorm(engine& e, const rmsnorm_call& c, algo a, void* stream);

// bench/torch: `iters` in-place sum AllReduces called in a C++ loop; seconds until the stream is done.
std::string time_all_reduce(engine& e, element t, void* p, std::size_t count, algo a, std::int64_t iters, void* stream,
                            double& seconds);

}  // namespace rcclx_torch
