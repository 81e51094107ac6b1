// rcclx/multinode/nccl_engine.hpp: the inter-node engine over the user's NCCL communicator (CUDA
// backend) or RCCL communicator (HIP backend: RCCL has NCCL's API; <rccl/rccl.h>). Include it where
// that header is available and link the library; rcclx's other headers never include it.
//
//   ncclComm_t across;                                  // the user's: one rank per node, this local rank
//   ncclCommInitRank(&across, num_nodes, id_of_my_local_rank, node);
//   rcclx::multinode::nccl_engine eng(across);          // never creates, duplicates or destroys it
//   rcclx::multinode::hierarchical<8> h(node_comm, eng, topo);
//
// Both operations are enqueued on the caller's stream (no host synchronisation; capturable in a
// CUDA / HIP graph like any NCCL call) and report a failed enqueue as rcclx::error naming the NCCL
// call and ncclGetErrorString. bf16 and fp16 sums are NCCL's (ncclBfloat16, ncclFloat16).
//
// Registration (NCCL >= 2.19): register_buffer registers the whole allocation holding a buffer
// with ncclCommRegister, through a registration_cache (LRU, keyed on the allocation's base, size and
// runtime identity) of `registration_capacity` unpinned entries; an evicted or forgotten entry is
// deregistered (ncclCommDeregister) after a device synchronisation, since an operation in flight may
// still use it. Every registration is deregistered when the engine is destroyed: the communicator
// must outlive the engine. Older NCCL: registers_buffers() is false.
#pragma once

#include "../config.hpp"

#if RCCLX_BACKEND_HIP
#  include <rccl/rccl.h>
#elif RCCLX_BACKEND_CUDA
#  include <nccl.h>
#else
#  error "rcclx/multinode/nccl_engine.hpp needs the CUDA (NCCL) or HIP (RCCL) backend; the host backend uses mpi_engine.hpp"
#endif

#include <cstddef>
#include <string>

#include "../core/error.hpp"
#include "../gpu/runtime.hpp"
#include "engine.hpp"
#include "registration.hpp"


RCCLX_NAMESPACE_BEGIN
namespace multinode {

namespace detail {
// ncclCommRegister / ncclCommDeregister: NCCL 2.19 and later (and RCCL with NCCL's version macros).
#if defined(NCCL_VERSION_CODE) && defined(NCCL_VERSION) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 19, 0)
inline constexpr bool nccl_registers = true;
#else
inline constexpr bool nccl_registers = false;
#endif

inline void nccl_check(ncclResult_t rc, const char* call) {
  if (rc == ncclSuccess || rc == ncclInProgress) return;
  throw error(errc::runtime, std::string("nccl_engine: ") + call + " failed: " + ncclGetErrorString(rc));
}

// registration_cache's registrar: one ncclCommRegister per allocation.
struct nccl_registrar {
  ncclComm_t comm;
  void* register_memory(void* base, std::size_t bytes) {
    void* h = nullptr;
#if defined(NCCL_VERSION_CODE) && defined(NCCL_VERSION) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 19, 0)
    nccl_check(ncclCommRegister(comm, base, bytes, &h), "ncclCommRegister");
#else
    (void)base;
    (void)bytes;
#endif
    return h;
  }
  void deregister_memory(void* h) {
#if defined(NCCL_VERSION_CODE) && defined(NCCL_VERSION) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 19, 0)
    gpu::device_synchronize();  // an operation in flight may still use the memory
    nccl_check(ncclCommDeregister(comm, h), "ncclCommDeregister");
#else
    (void)h;
#endif
  }
};
}  // namespace detail

class nccl_engine final : public engine {
 public:
  explicit nccl_engine(ncclComm_t comm, std::size_t registration_capacity = 64)
      : comm_(comm), cache_(registration_capacity, detail::nccl_registrar{comm}) {
    if (comm == nullptr) throw error(errc::invalid_argument, "nccl_engine: comm is null");
    detail::nccl_check(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
    detail::nccl_check(ncclCommCount(comm_, &size_), "ncclCommCount");
  }
  nccl_engine(const nccl_engine&) = delete;
  nccl_engine& operator=(const nccl_engine&) = delete;

  int rank() const override { return rank_; }
  int num_ranks() const override { return size_; }
  const char* name() const override { return RCCLX_BACKEND_HIP ? "rccl" : "nccl"; }
  ncclComm_t comm() const { return comm_; }

  bool registers_buffers() const override { return detail::nccl_registers; }
  registration register_buffer(void* p, std::size_t bytes) override {
    if (!detail::nccl_registers) return {};
    return cache_.acquire(p, bytes);
  }
  void forget_buffer(const void* p) override { cache_.forget(p); }
  registration_stats registrations() const override { return cache_.stats(); }

  void allreduce(const void* in, void* out, std::size_t count, data_type type, gpu::stream_t stream) override {
    ncclDataType_t t = ncclFloat32;
    if (type == data_type::bfloat16) t = ncclBfloat16;
    else if (type == data_type::float16) t = ncclFloat16;
    else if (type != data_type::float32)
      throw error(errc::invalid_argument, "nccl_engine: allreduce: type = " + std::to_string(static_cast<int>(type)) +
                                              " is not an rcclx::multinode::data_type");
    detail::nccl_check(ncclAllReduce(in, out, count, t, ncclSum, comm_, stream), "ncclAllReduce");
  }

  // In place when in == out + rank() * bytes (NCCL's in-place AllGather).
  void allgather(const void* in, void* out, std::size_t bytes, gpu::stream_t stream) override {
    detail::nccl_check(ncclAllGather(in, out, bytes, ncclUint8, comm_, stream), "ncclAllGather");
  }

 private:
  ncclComm_t comm_;
  int rank_ = 0;
  int size_ = 1;
  registration_cache<detail::nccl_registrar> cache_;  // destroyed first: deregisters while comm_ lives
};

}  // namespace multinode
RCCLX_NAMESPACE_END
