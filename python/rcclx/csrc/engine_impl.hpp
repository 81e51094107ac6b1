// The inside of engine.hpp's communicator, shared by the translation units that implement it:
// engine.cpp (the set-up, the pools, the barrier, the handles, the fused ops; run_collective's
// dispatch) and the collectives' launches (engine_allreduce_*.cpp, engine_reduce_*.cpp,
// engine_copy.cpp), which nvcc compiles as their .cu twins for the CUDA backend, in parallel (in one
// unit, their kernels took most of the extension's build). The host backend compiles them in one
// unit (engine_collectives.cpp): g++ takes a fraction of nvcc's time, and apart each unit would
// repeat the communicator's common code. No torch header.
#pragma once

#include <rcclx/host/communicator.hpp>
#include <rcclx/host/shareable_memory.hpp>
#include <rcclx/lpc/select.hpp>
#include <rcclx/pytorch/kernel_handles.hpp>

#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include "engine.hpp"

namespace rcclx_torch {

static_assert(max_ranks == rcclx::pytorch::max_ranks, "engine.hpp's max_ranks must be the handles' MaxRanks");
using communicator = rcclx::host::communicator<max_ranks>;

namespace detail {

// symmetric_empty's pool: allocated and registered on first use (collective), handed out in call
// order by a bump pointer (every rank's n-th tensor at the same offset), reused once nothing is out.
// Host backend: like the workspace and the fused region, its /dev/shm name is unlinked as soon as
// every peer has mapped it (register_buffer's closing exchange), so no exit leaves it behind.
struct symmetric_pool {
  std::mutex mutex;
  void* base = nullptr;
  std::size_t bytes = 0, used = 0;
  std::int64_t live = 0;
  ~symmetric_pool() {
    if (base) rcclx::host::shareable_free(base);  // after the last tensor in it and the communicator
  }
};

// The fused ops' own symmetric buffer (all_reduce_rmsnorm's workspace), apart from the workspace of
// the collectives (a tile call's peers may still read it while this rank's next collective starts).
struct fused_region {
  void* base = nullptr;
  std::size_t bytes = 0;
};

}  // namespace detail

struct engine {
  std::unique_ptr<rcclx::host::callback_bootstrap> bootstrap;
  std::unique_ptr<communicator> comm;
  int rank = 0, num_ranks = 0;
  std::size_t symmetric_bytes = 0;
  rcclx::fused::tile_slots tiles{collective_slots, 0};
  detail::fused_region fused;
  std::shared_ptr<detail::symmetric_pool> pool = std::make_shared<detail::symmetric_pool>();
  ~engine() {
    comm.reset();  // first: the communicator closes its registrations
    if (fused.base) rcclx::host::shareable_free(fused.base);
  }
};

namespace detail {

inline rcclx::algorithm to_rcclx(algo a) {
  switch (a) {
    case algo::flat: return rcclx::algorithm::flat;
    case algo::tree: return rcclx::algorithm::tree;
    case algo::low_precision: return rcclx::algorithm::low_precision;
    case algo::automatic: break;
  }
  return rcclx::algorithm::automatic;
}

inline rcclx::reduce_op to_rcclx(reduce r) {
  switch (r) {
    case reduce::min: return rcclx::reduce_op::min;
    case reduce::max: return rcclx::reduce_op::max;
    case reduce::product: return rcclx::reduce_op::product;
    case reduce::avg: return rcclx::reduce_op::avg;
    case reduce::premul_sum: return rcclx::reduce_op::premul_sum;
    case reduce::sum: break;
  }
  return rcclx::reduce_op::sum;
}

inline rcclx::reduce_spec to_rcclx(const reduction& r) {
  return rcclx::reduce_spec{to_rcclx(r.op), r.factor, r.factor_device};
}

inline rcclx::gpu::stream_t to_stream(void* s) {
#if RCCLX_BACKEND_GPU
  return static_cast<rcclx::gpu::stream_t>(s);
#else
  (void)s;
  return {};
#endif
}

// automatic: low precision where RCCL_LOW_PRECISION_ENABLE* enables it for this size (lpc/select.hpp).
inline rcclx::algorithm resolve(rcclx::lpc::collective c, algo a, std::size_t bytes) {
  if (a == algo::automatic && rcclx::lpc::use_low_precision(c, bytes)) return rcclx::algorithm::low_precision;
  return to_rcclx(a);
}

// f(T{}) for the element type (the reducing collectives: one instantiation per type).
template <class F>
void with_type(element t, F&& f) {
  switch (t) {
    case element::f32: f(float{}); break;
    case element::bf16: f(rcclx::bf16{}); break;
    case element::f16: f(rcclx::fp16{}); break;
    case element::i32: f(std::int32_t{}); break;
    case element::i8: f(std::int8_t{}); break;
    case element::u8: f(std::uint8_t{}); break;
    case element::i64: f(std::int64_t{}); break;
    case element::f64: f(double{}); break;
    case element::boolean: f(bool{}); break;
  }
}

// The copying collectives (allgather, alltoall, broadcast, alltoallv) move bits: the types of the
// low-precision path (float, bf16) and the earlier four keep their own instantiation (their messages
// and call checks name them); int8, uint8 and bool run as uint8, int64 and float64 as int64.
template <class T> struct copy_as { using type = T; };
template <> struct copy_as<std::int8_t> { using type = std::uint8_t; };
template <> struct copy_as<bool> { using type = std::uint8_t; };
template <> struct copy_as<double> { using type = std::int64_t; };

// alltoallv and broadcast: by size only (1, 2, 4 or 8 bytes).
template <class T> struct size_as {
  using type = std::conditional_t<sizeof(T) == 1, std::uint8_t,
               std::conditional_t<sizeof(T) == 2, rcclx::fp16,
               std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>>>;
};

// f(Map<T>::type{}) for the element type T: each mapped type instantiated once.
template <template <class> class Map, class F>
void with_mapped_type(element t, F&& f) {
  with_type(t, [&](auto tag) { f(typename Map<decltype(tag)>::type{}); });
}
template <class F>
void with_copy_type(element t, F&& f) { with_mapped_type<copy_as>(t, std::forward<F>(f)); }
template <class F>
void with_size_type(element t, F&& f) { with_mapped_type<size_as>(t, std::forward<F>(f)); }

// ", rank r (pid p)" for the peers whose process no longer runs ("" if none).
std::string dead_peers(const engine& e);

// f() with an error turned into its message. A failed exchange over the group (peer_failure) also
// names the peers whose process no longer runs (a timeout's message names its missing rank already).
template <class F>
std::string guarded(const engine& e, F&& f) {
  try {
    f();
  } catch (const rcclx::error& x) {
    std::string m = x.what();
    if (x.code() == rcclx::errc::peer_failure) {
      const std::string dead = dead_peers(e);
      if (!dead.empty()) m += " [no longer running: " + dead + "]";
    }
    return m;
  } catch (const std::exception& x) {
    return x.what();
  }
  return {};
}

// The collectives' launches, outside engine.cpp so that nvcc compiles them in parallel; they throw
// (run_collective, time_all_reduce and run_alltoallv turn an error into its message).
// The reducing collectives, by element type: each type's communicator methods are instantiated once,
// in the translation unit that the extern templates below name (engine.cpp dispatches on the type).
template <class T>
struct allreduce_of {
  static void run(communicator& c, const T* in, T* out, std::size_t count, const rcclx::reduce_spec& op,
                  rcclx::algorithm a, rcclx::gpu::stream_t s);
};
template <class T>
struct reduce_of {
  static void reduce_scatter(communicator& c, const T* in, T* out, std::size_t count, const rcclx::reduce_spec& op,
                             rcclx::algorithm a, rcclx::gpu::stream_t s);
  static void reduce(communicator& c, const T* in, T* out, std::size_t count, int root, const rcclx::reduce_spec& op,
                     rcclx::algorithm a, rcclx::gpu::stream_t s);
};

template <class T>
void allreduce_of<T>::run(communicator& c, const T* in, T* out, std::size_t count, const rcclx::reduce_spec& op,
                          rcclx::algorithm a, rcclx::gpu::stream_t s) {
  c.allreduce<T>(in, out, count, op, a, s);
}
template <class T>
void reduce_of<T>::reduce_scatter(communicator& c, const T* in, T* out, std::size_t count,
                                  const rcclx::reduce_spec& op, rcclx::algorithm a, rcclx::gpu::stream_t s) {
  c.reduce_scatter<T>(in, out, count, op, a, s);
}
template <class T>
void reduce_of<T>::reduce(communicator& c, const T* in, T* out, std::size_t count, int root,
                          const rcclx::reduce_spec& op, rcclx::algorithm a, rcclx::gpu::stream_t s) {
  c.reduce<T>(in, out, count, root, op, a, s);
}

// The types in groups of about equal nvcc time (bf16 and float also build the low-precision path).
// engine_allreduce_f32_bf16.cpp
extern template struct allreduce_of<float>;
extern template struct allreduce_of<rcclx::bf16>;
// engine_allreduce_f16_i32_i64_f64.cpp
extern template struct allreduce_of<rcclx::fp16>;
extern template struct allreduce_of<std::int32_t>;
extern template struct allreduce_of<std::int64_t>;
extern template struct allreduce_of<double>;
// engine_allreduce_i8_u8_bool.cpp
extern template struct allreduce_of<std::int8_t>;
extern template struct allreduce_of<std::uint8_t>;
extern template struct allreduce_of<bool>;
// engine_reduce_f32_bf16_i32_i64.cpp
extern template struct reduce_of<float>;
extern template struct reduce_of<rcclx::bf16>;
extern template struct reduce_of<std::int32_t>;
extern template struct reduce_of<std::int64_t>;
// engine_reduce_f16_f64_i8_u8_bool.cpp
extern template struct reduce_of<rcclx::fp16>;
extern template struct reduce_of<double>;
extern template struct reduce_of<std::int8_t>;
extern template struct reduce_of<std::uint8_t>;
extern template struct reduce_of<bool>;

// The copying collectives (engine_copy.cpp; run_alltoallv is there too): every type in one unit.
void allgather(engine& e, element t, const void* in, void* out, std::size_t count, algo a, rcclx::gpu::stream_t s);
void alltoall(engine& e, element t, const void* in, void* out, std::size_t count, algo a, rcclx::gpu::stream_t s);
void broadcast(engine& e, element t, const void* in, void* out, std::size_t count, int root, algo a,
               rcclx::gpu::stream_t s);

}  // namespace detail
}  // namespace rcclx_torch
