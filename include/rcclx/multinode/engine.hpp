// rcclx/multinode/engine.hpp: the inter-node hop of the hierarchical collectives: an abstract engine
// over the communicator the user already runs across nodes (MPI, NCCL, RCCL). rcclx never creates one.
//
//   MPI_Comm across;                                  // the user's: one process per node, same local rank
//   MPI_Comm_split(MPI_COMM_WORLD, local_rank, node, &across);
//   rcclx::multinode::mpi_engine eng(across);         // mpi_engine.hpp (host backend, host memory)
//   rcclx::multinode::nccl_engine eng2(nccl_comm);    // nccl_engine.hpp (CUDA: NCCL; HIP: RCCL)
//   rcclx::multinode::hierarchical<8> h(intra_node_comm, eng, rcclx::multinode::node_topology::from_env());
//
// The engine's ranks are the nodes: engine rank g is node g, and every engine a hierarchical
// collective uses joins the processes of one local rank, one per node. Both operations are
// collective over those processes, stream-ordered on `stream` (the host backend: done on return),
// and read and write device memory (host memory on the host backend). Ranks must call them in the
// same order. A failure is reported as the engine reports it (an rcclx::error from the adapters;
// MPI's default error handler aborts the job).
//
// Registration (registration.hpp): an engine that moves registered memory faster (NCCL / RCCL:
// ncclCommRegister, no staging copy through its own buffers) says so with registers_buffers() and
// registers the allocation holding a buffer through an LRU cache keyed on the allocation, so
// repeated calls on the same memory register nothing. The default engine registers nothing (the MPI
// adapter: host memory; a GPU-aware MPI registers device memory in its own cache).
#pragma once

#include <cstddef>

#include "../config.hpp"
#include "../core/error.hpp"
#include "../core/types.hpp"
#include "../gpu/runtime.hpp"
#include "../host/detail/enum_name.hpp"
#include "registration.hpp"

RCCLX_NAMESPACE_BEGIN
namespace multinode {

// Element types of engine::allreduce (sum).
enum class data_type { float32, bfloat16, float16 };

inline const char* to_string(data_type t) {
  static constexpr const char* names[] = {"float32", "bfloat16", "float16"};  // by value
  return host::detail::enum_name(t, names, "invalid");
}

inline std::size_t size_of(data_type t) { return t == data_type::float32 ? 4 : 2; }

// The data_type of an element type.
template <class T>
struct data_type_of;
template <>
struct data_type_of<float> {
  static constexpr data_type value = data_type::float32;
};
template <>
struct data_type_of<bf16> {
  static constexpr data_type value = data_type::bfloat16;
};
template <>
struct data_type_of<fp16> {
  static constexpr data_type value = data_type::float16;
};

class engine {
 public:
  virtual ~engine() = default;
  // This process's node (the engine's rank) and the number of nodes (the engine's size).
  virtual int rank() const = 0;
  virtual int num_ranks() const = 0;
  // Sum AllReduce of `count` elements of `type` (in may equal out). The order of the engine's own
  // additions is the engine's: NCCL and Open MPI give every rank the same bits; bf16 and fp16
  // arithmetic is the engine's too (the MPI adapter adds them in fp32, rounding at each step).
  virtual void allreduce(const void* in, void* out, std::size_t count, data_type type, gpu::stream_t stream) = 0;
  // AllGather of `bytes` bytes per rank: out receives num_ranks() * bytes, rank g's at out + g * bytes.
  virtual void allgather(const void* in, void* out, std::size_t bytes, gpu::stream_t stream) = 0;
  // Short name for error messages ("mpi", "nccl", "rccl", ...).
  virtual const char* name() const = 0;

  // Whether register_buffer registers anything with this engine.
  virtual bool registers_buffers() const { return false; }
  // Registers the allocation holding [p, p + bytes) (or finds it registered: a hit costs a lookup),
  // pinned while the result lives; empty when the engine registers nothing. NCCL's rule: in one
  // operation either every rank passes registered buffers or none does.
  virtual registration register_buffer(void* p, std::size_t bytes) {
    (void)p;
    (void)bytes;
    return {};
  }
  // Deregisters now the unpinned registrations of the allocation holding p: call it before freeing
  // memory this engine registered (a registration outlives its use; freed memory must not stay
  // registered, whose range a new allocation may take).
  virtual void forget_buffer(const void* p) { (void)p; }
  // Registrations made (opens), hits, deregistrations (closes), evictions.
  virtual registration_stats registrations() const { return {}; }
};

}  // namespace multinode
RCCLX_NAMESPACE_END
