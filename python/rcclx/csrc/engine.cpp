// The rcclx side of the torch extension (engine.hpp): the communicator over a callback bootstrap
// (the group's allgather), its symmetric pool, the fused ops' workspace, the barrier and the handles;
// run_collective dispatches to the collectives' own translation units (engine_impl.hpp). No torch
// header here; nvcc compiles this file as engine.cu for the CUDA backend.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <utility>

#include "engine_impl.hpp"
#include "fused.hpp"

namespace rcclx_torch {

void engine_deleter::operator()(engine* e) const { delete e; }

namespace detail {

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

}  // namespace detail

using detail::guarded;
using detail::to_rcclx;
using detail::to_stream;

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
          detail::allreduce_of<T>::run(*e.comm, i, o, count, to_rcclx(op),
                                       detail::resolve(rcclx::lpc::collective::allreduce, a, bytes), s);
          break;
        case collective::reduce_scatter:
          detail::reduce_of<T>::reduce_scatter(*e.comm, i, o, count, to_rcclx(op),
                                               detail::resolve(rcclx::lpc::collective::reduce_scatter, a, bytes), s);
          break;
        case collective::reduce:
          detail::reduce_of<T>::reduce(*e.comm, i, o, count, root, to_rcclx(op), to_rcclx(a), s);
          break;
        default: break;
      }
    };
    switch (c) {
      case collective::allreduce:
      case collective::reduce_scatter:
      case collective::reduce: detail::with_type(t, reducing); break;
      case collective::allgather: detail::allgather(e, t, in, out, count, a, s); break;
      case collective::alltoall: detail::alltoall(e, t, in, out, count, a, s); break;
      case collective::broadcast: detail::broadcast(e, t, in, out, count, root, a, s); break;
    }
  });
}

std::string barrier(engine& e, void* stream) {
  return guarded(e, [&] { e.comm->barrier(to_stream(stream)); });
}

std::string symmetric_take(engine& e, std::size_t bytes, void*& ptr, std::function<void()>& release) {
  const std::shared_ptr<detail::symmetric_pool> pool = e.pool;
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
    detail::with_type(c.type, [&](auto tag) {
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
    detail::with_type(t, [&](auto tag) {
      using T = decltype(tag);
      T* x = static_cast<T*>(p);
      const auto s = to_stream(stream);
      const rcclx::algorithm ra = detail::resolve(rcclx::lpc::collective::allreduce, a, count * sizeof(T));
      const auto t0 = std::chrono::steady_clock::now();
      for (std::int64_t i = 0; i < iters; ++i)
        detail::allreduce_of<T>::run(*e.comm, x, x, count, rcclx::reduce_op::sum, ra, s);
      e.comm->synchronize(s);
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
  });
}

}  // namespace rcclx_torch
