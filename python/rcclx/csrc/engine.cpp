// The rcclx side of the torch extension (engine.hpp): the communicator over a callback bootstrap
// (the group's allgather), its symmetric pool, the fused ops' workspace and every launch. No torch
// header here; nvcc compiles this file as engine.cu for the CUDA backend.
#include "engine.hpp"

#include <rcclx/host/bootstrap.hpp>
#include <rcclx/host/communicator.hpp>
#include <rcclx/host/shareable_memory.hpp>
#include <rcclx/lpc/select.hpp>
#include <rcclx/pytorch/kernel_handles.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <utility>

#include "fused.hpp"

namespace rcclx_torch {

static_assert(max_ranks == rcclx::pytorch::max_ranks, "engine.hpp's max_ranks must be the handles' MaxRanks");
using communicator = rcclx::host::communicator<max_ranks>;

namespace {

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

rcclx::algorithm to_rcclx(algo a) {
  switch (a) {
    case algo::flat: return rcclx::algorithm::flat;
    case algo::tree: return rcclx::algorithm::tree;
    case algo::low_precision: return rcclx::algorithm::low_precision;
    case algo::automatic: break;
  }
  return rcclx::algorithm::automatic;
}

rcclx::reduce_op to_rcclx(reduce r) {
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

rcclx::reduce_spec to_rcclx(const reduction& r) { return rcclx::reduce_spec{to_rcclx(r.op), r.factor, r.factor_device}; }

rcclx::gpu::stream_t to_stream(void* s) {
#if RCCLX_BACKEND_GPU
  return static_cast<rcclx::gpu::stream_t>(s);
#else
  (void)s;
  return {};
#endif
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

}  // namespace

struct engine {
  std::unique_ptr<rcclx::host::callback_bootstrap> bootstrap;
  std::unique_ptr<communicator> comm;
  int rank = 0, num_ranks = 0;
  std::size_t symmetric_bytes = 0;
  rcclx::fused::tile_slots tiles{collective_slots, 0};
  fused_region fused;
  std::shared_ptr<symmetric_pool> pool = std::make_shared<symmetric_pool>();
  ~engine() {
    comm.reset();  // first: the communicator closes its registrations
    if (fused.base) rcclx::host::shareable_free(fused.base);
  }
};

void engine_deleter::operator()(engine* e) const { delete e; }

namespace {

// ", rank r (pid p)" for the peers whose process no longer runs ("" if none).
std::string dead_peers(const engine& e) {
  if (!e.comm) return {};
  std::string m;
  const std::vector<int>& pids = e.comm->pids();
  for (int r = 0; r < static_cast<int>(pids.size()); ++r) {
    if (r == e.rank || !rcclx::host::detail::process_gone(pids[r])) continue;
    m += (m.empty() ? "" : ", ") + ("rank " + std::to_string(r) + " (pid " + std::to_string(pids[r]) + ")");
  }
  return m;
}

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

}  // namespace

const char* backend_name() { return rcclx::current_backend == rcclx::backend::host ? "host" : "cuda"; }

std::string create(int rank, int num_ranks, allgather_fn allgather, const engine_options& o, engine_ptr& out) {
  if (o.max_tiles < 0 || o.max_tiles > 4096 - 1 - collective_slots)
    return "rcclx.Communicator: max_tiles = " + std::to_string(o.max_tiles) + " must be in [0, " +
           std::to_string(4096 - 1 - collective_slots) + "] (0: the default, 2048)";
  engine_ptr e(new engine);
  e->rank = rank;
  e->num_ranks = num_ranks;
  e->symmetric_bytes = o.symmetric_bytes > 0 ? o.symmetric_bytes : std::size_t(64) << 20;
  const int max_tiles = o.max_tiles > 0 ? o.max_tiles : 2048;
  auto fn = std::make_shared<allgather_fn>(std::move(allgather));
  // Segments of a job killed during its set-up (before their names were unlinked) carry their
  // creator's pid: remove those whose creator is gone.
  rcclx::host::reclaim_stale_segments();
  const std::string err = guarded(*e, [&] {
    e->bootstrap = std::make_unique<rcclx::host::callback_bootstrap>(
        rank, num_ranks, [fn](const void* in, void* o2, std::size_t bytes) {
          const std::string failure = (*fn)(in, o2, bytes);
          if (!failure.empty()) throw rcclx::error(rcclx::errc::peer_failure, failure);
        });
    rcclx::host::communicator_options co;
    if (o.buffer_bytes > 0) co.buffer_bytes = o.buffer_bytes;
    if (o.timeout_s > 0) co.timeout_ns = static_cast<std::uint64_t>(o.timeout_s * 1e9);
    if (o.check_calls >= 0) co.check_calls = o.check_calls != 0;
    co.max_blocks = rcclx::fused::pad_blocks_for(collective_slots, max_tiles);  // the collectives', then tiles
    e->comm = std::make_unique<communicator>(*e->bootstrap, co);
    e->tiles = e->comm->reserve_tile_slots(max_tiles, "rcclx.Communicator's tile-flag ops and kernel_handles");
  });
  if (!err.empty()) return err;
  out = std::move(e);
  return {};
}

int rank_of(const engine& e) { return e.rank; }
int num_ranks_of(const engine& e) { return e.num_ranks; }
void tile_slots_of(const engine& e, int& first, int& max_tiles) {
  first = e.tiles.first;
  max_tiles = e.tiles.max_tiles;
}


namespace {
// automatic: low precision where RCCL_LOW_PRECISION_ENABLE* enables it for this size (lpc/select.hpp).
rcclx::algorithm resolve(rcclx::lpc::collective c, algo a, std::size_t bytes) {
  if (a == algo::automatic && rcclx::lpc::use_low_precision(c, bytes)) return rcclx::algorithm::low_precision;
  return to_rcclx(a);
}
}  // namespace

std::string run_collective(engine& e, collective c, element t, const void* in, void* out, std::size_t count,
                           const reduction& op, algo a, void* stream, int root) {
  return guarded(e, [&] {
    const auto s = to_stream(stream);
    const auto reducing = [&](auto tag) {
      using T = decltype(tag);
      const T* i = static_cast<const T*>(in);
      T* o = static_cast<T*>(out);
      const std::size_t bytes = count * sizeof(T);
      switch (c) {
        case collective::allreduce:
          e.comm->allreduce<T>(i, o, count, to_rcclx(op), resolve(rcclx::lpc::collective::allreduce, a, bytes), s);
          break;
        case collective::reduce_scatter:
          e.comm->reduce_scatter<T>(i, o, count, to_rcclx(op),
                                    resolve(rcclx::lpc::collective::reduce_scatter, a, bytes), s);
          break;
        case collective::reduce: e.comm->reduce<T>(i, o, count, root, to_rcclx(op), to_rcclx(a), s); break;
        default: break;
      }
    };
    const auto copying = [&](auto tag) {
      using T = decltype(tag);
      const T* i = static_cast<const T*>(in);
      T* o = static_cast<T*>(out);
      const std::size_t bytes = count * sizeof(T);
      if (c == collective::allgather)
        e.comm->allgather<T>(i, o, count, resolve(rcclx::lpc::collective::allgather, a, bytes), s);
      else
        e.comm->alltoall<T>(i, o, count, resolve(rcclx::lpc::collective::alltoall, a, bytes), s);
    };
    switch (c) {
      case collective::allreduce:
      case collective::reduce_scatter:
      case collective::reduce: with_type(t, reducing); break;
      case collective::allgather:
      case collective::alltoall: with_copy_type(t, copying); break;
      case collective::broadcast:
        with_size_type(t, [&](auto tag) {
          using T = decltype(tag);
          e.comm->broadcast<T>(static_cast<const T*>(in), static_cast<T*>(out), count, root, to_rcclx(a), s);
        });
        break;
    }
  });
}

std::string run_alltoallv(engine& e, element t, const void* in, const std::size_t* in_splits, void* out,
                          const std::size_t* out_splits, void* stream) {
  return guarded(e, [&] {
    with_size_type(t, [&](auto tag) {
      using T = decltype(tag);
      e.comm->alltoallv<T>(static_cast<const T*>(in), in_splits, static_cast<T*>(out), out_splits, to_stream(stream));
    });
  });
}

std::string barrier(engine& e, void* stream) {
  return guarded(e, [&] { e.comm->barrier(to_stream(stream)); });
}

std::string symmetric_take(engine& e, std::size_t bytes, void*& ptr, std::function<void()>& release) {
  const std::shared_ptr<symmetric_pool> pool = e.pool;
  std::lock_guard<std::mutex> lock(pool->mutex);
  if (!pool->base) {
    std::string err = guarded(e, [&] {
      pool->base = rcclx::host::shareable_malloc(e.symmetric_bytes);
      pool->bytes = e.symmetric_bytes;
      e.comm->register_buffer(pool->base, pool->bytes);  // collective
      rcclx::host::unlink_when_mapped(pool->base);        // every peer has mapped it
    });
    if (!err.empty()) {
      if (pool->base) rcclx::host::shareable_free(pool->base);
      pool->base = nullptr;
      pool->bytes = 0;
      return "rcclx.symmetric_empty: registering the pool failed: " + err;
    }
  }
  const std::size_t need = (bytes + 255) / 256 * 256;  // every tensor 256-byte aligned
  if (pool->used + need > pool->bytes)
    return "rcclx.symmetric_empty: " + std::to_string(bytes) + " bytes do not fit: " +
           std::to_string(pool->bytes - pool->used) + " of the pool's " + std::to_string(pool->bytes) +
           " bytes are left (Communicator(symmetric_bytes=...) sets its size; it is reused once no symmetric tensor "
           "is alive)";
  ptr = static_cast<char*>(pool->base) + pool->used;
  pool->used += need;
  ++pool->live;
  release = [pool] {
    std::lock_guard<std::mutex> l(pool->mutex);
    if (--pool->live == 0) pool->used = 0;
  };
  return {};
}

bool is_registered(const engine& e, const void* p, std::size_t bytes) { return e.comm->is_registered(p, bytes); }

std::string register_graph_buffers(engine& e) {
  return guarded(e, [&] { e.comm->register_graph_buffers(); });
}

std::string synchronize(engine& e, void* stream) {
  return guarded(e, [&] { e.comm->synchronize(to_stream(stream)); });
}

std::string kernel_handles(const engine& e, const void* p, std::size_t bytes, std::vector<unsigned char>& out) {
  rcclx::pytorch::kernel_handles h{};
  h.magic = rcclx::pytorch::kernel_handles::magic_value;
  h.version = rcclx::pytorch::kernel_handles::layout_version;
  h.bytes = sizeof(h);
  h.max_ranks_of_writer = max_ranks;
  h.slots = e.tiles;
  h.buffer_bytes = bytes;
  const std::string err =
      guarded(e, [&] { h.table = e.comm->buffer_handle(static_cast<const unsigned char*>(p), bytes); });
  if (!err.empty()) return err;
  out.resize(sizeof(h));
  std::memcpy(out.data(), &h, sizeof(h));
  return {};
}

namespace {
// The fused ops' symmetric buffer, at least `need` bytes (collective: every rank makes the same
// calls). A larger one replaces the old after a barrier, so that no rank still reads the old one.
void ensure_fused_region(engine& e, std::size_t need, rcclx::gpu::stream_t stream) {
  if (e.fused.bytes >= need) return;
  if (rcclx::gpu::stream_is_capturing(stream))
    throw rcclx::error(rcclx::errc::invalid_argument,
                       "all_reduce_rmsnorm: this shape needs a larger fused workspace (" + std::to_string(need) +
                           " bytes), which cannot be allocated during graph capture: run the call once before "
                           "capturing it");
  if (e.fused.base) {
    e.comm->barrier(stream);
    e.comm->synchronize(stream);
    e.comm->unregister_buffer(e.fused.base);
    rcclx::host::shareable_free(e.fused.base);
    e.fused = {};
  }
  const std::size_t bytes = std::max<std::size_t>(need, std::size_t(1) << 20);
  void* p = rcclx::host::shareable_malloc(bytes);
  try {
    e.comm->register_buffer(p, bytes);  // collective
  } catch (...) {
    rcclx::host::shareable_free(p);
    throw;
  }
  rcclx::host::unlink_when_mapped(p);  // every peer has mapped it
  e.fused.base = p;
  e.fused.bytes = bytes;
}
}  // namespace

std::string all_reduce_rmsnorm(engine& e, const rmsnorm_call& c, algo a, void* stream) {
  const char* who = "all_reduce_rmsnorm";
  const rcclx::algorithm ra = to_rcclx(a);
  // This rank's argument errors are raised on every rank by the agreement check (nothing is launched).
  const std::string local = rmsnorm_errors(c, ra, e.tiles.max_tiles);
  return guarded(e, [&] {
    with_type(c.type, [&](auto tag) {
      e.comm->check_user_call<decltype(tag)>(who, c.tokens * c.hidden, static_cast<std::uint32_t>(c.hidden), local);
    });
    if (c.tokens == 0) return;
    const auto s = to_stream(stream);
    const rcclx::algorithm resolved = rmsnorm_algorithm(c, ra, e.num_ranks);
    ensure_fused_region(e, rmsnorm_workspace_bytes(c, resolved), s);
    const auto table = e.comm->buffer_handle(static_cast<const unsigned char*>(e.fused.base), e.fused.bytes);
    rmsnorm_launch(c, table, e.tiles, resolved, s);
  });
}

std::string time_all_reduce(engine& e, element t, void* p, std::size_t count, algo a, std::int64_t iters, void* stream,
                            double& seconds) {
  return guarded(e, [&] {
    with_type(t, [&](auto tag) {
      using T = decltype(tag);
      T* x = static_cast<T*>(p);
      const auto s = to_stream(stream);
      const rcclx::algorithm ra = resolve(rcclx::lpc::collective::allreduce, a, count * sizeof(T));
      const auto t0 = std::chrono::steady_clock::now();
      for (std::int64_t i = 0; i < iters; ++i) e.comm->allreduce<T>(x, x, count, rcclx::reduce_op::sum, ra, s);
      e.comm->synchronize(s);
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
  });
}

}  // namespace rcclx_torch
