// The copying collectives (engine_impl.hpp): run_collective's AllGather, AlltoAll and Broadcast and
// the uneven AlltoAll (run_alltoallv), which move bits: instantiated per copy_as or size_as type
// (nvcc compiles this file as engine_copy.cu).
#include "engine_impl.hpp"

namespace rcclx_torch {
namespace detail {

void allgather(engine& e, element t, const void* in, void* out, std::size_t count, algo a, rcclx::gpu::stream_t s) {
  with_copy_type(t, [&](auto tag) {
    using T = decltype(tag);
    e.comm->allgather<T>(static_cast<const T*>(in), static_cast<T*>(out), count,
                         resolve(rcclx::lpc::collective::allgather, a, count * sizeof(T)), s);
  });
}

void alltoall(engine& e, element t, const void* in, void* out, std::size_t count, algo a, rcclx::gpu::stream_t s) {
  with_copy_type(t, [&](auto tag) {
    using T = decltype(tag);
    e.comm->alltoall<T>(static_cast<const T*>(in), static_cast<T*>(out), count,
                        resolve(rcclx::lpc::collective::alltoall, a, count * sizeof(T)), s);
  });
}

void broadcast(engine& e, element t, const void* in, void* out, std::size_t count, int root, algo a,
               rcclx::gpu::stream_t s) {
  with_size_type(t, [&](auto tag) {
    using T = decltype(tag);
    e.comm->broadcast<T>(static_cast<const T*>(in), static_cast<T*>(out), count, root, to_rcclx(a), s);
  });
}

}  // namespace detail

std::string run_alltoallv(engine& e, element t, const void* in, const std::size_t* in_splits, void* out,
                          const std::size_t* out_splits, void* stream) {
  return detail::guarded(e, [&] {
    detail::with_size_type(t, [&](auto tag) {
      using T = decltype(tag);
      e.comm->alltoallv<T>(static_cast<const T*>(in), in_splits, static_cast<T*>(out), out_splits,
                           detail::to_stream(stream));
    });
  });
}

}  // namespace rcclx_torch
