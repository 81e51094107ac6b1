// The tile AllReduce calls of call_checks_test.cpp (call_runs.hpp), built with RCCLX_CHECKS=1.
#include "call_runs.hpp"

#include <rcclx/core/tile_audit.hpp>
#include <rcclx/fused/combine.hpp>
#include <rcclx/fused/combine_ops.hpp>
#include <rcclx/fused/epilogue.hpp>
#include <rcclx/fused/stages.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <cstring>

static_assert(rcclx::checks, "this test is built with RCCLX_CHECKS=1");

namespace call_checks {
namespace kernels {

namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
namespace core = rcclx::core;
constexpr int max_r = 8;
constexpr int threads = rcclx::current_backend == rcclx::backend::host && !rcclx::emulate_threads ? 1 : 128;

// A store of the sums into a row-major output (ld = cols) with a checked-mode check of its own:
// its rows x cols outputs must not lie in the symmetric bytes the call forbids, and its columns
// must be the map's.
struct checked_store {
  float* out;
  std::size_t rows, cols;

  template <int VPT, int E, class Group, class Map>
  RCCLX_HOST_DEVICE void operator()(const Group&, float (&v)[VPT][E], const fz::held_vectors<Map, E>& h) const {
    for (int k = 0; k < VPT; ++k) {
      if (!h.holds(k)) continue;
      const fz::position p = h.at(k);
      for (int e = 0; e < E; ++e) out[p.row * cols + p.col + static_cast<std::size_t>(e)] = v[k][e];
    }
  }

  RCCLX_HOST_DEVICE fz::stage_fault check(const fz::stage_context& ctx) const {
    if (fz::detail::touches_forbidden(ctx, out, out + rows * cols)) {
      const auto* o = reinterpret_cast<const unsigned char*>(out);
      return {core::misuse::stage_writes_symmetric, 0u, static_cast<std::uint32_t>(o - ctx.forbidden[0][0]), 0u};
    }
    if (ctx.cols != 0 && ctx.cols != cols)
      return {core::misuse::stage_cols, 0u, static_cast<std::uint32_t>(cols), static_cast<std::uint32_t>(ctx.cols)};
    return {};
  }
};

// A user's epilogue that stores the sums back into the tile's own input (no check(): not a stage).
struct input_store {
  float* in;  // ar.input(t) of the tile being reduced

  template <int VPT, int E, class Group, class Map>
  RCCLX_HOST_DEVICE void operator()(const Group&, float (&v)[VPT][E], const fz::held_vectors<Map, E>& h) const {
    for (int k = 0; k < VPT; ++k) {
      if (!h.holds(k)) continue;
      const fz::position p = h.at(k);
      for (int e = 0; e < E; ++e) in[p.col + static_cast<std::size_t>(e)] = v[k][e];
    }
  }
};

struct misuse_kernel {
  const core::peer_table<float, max_r>* tables;
  float* out[max_r];
  call_args a;

  template <class G, class AR>
  RCCLX_HOST_DEVICE void body(const G& g, rt::launch_index ix, const AR& ar) const {
    const int r = ix.rank, nb = ix.num_blocks;
    const int ps = a.publish_stride > 0 ? a.publish_stride : nb, rs = a.reduce_stride > 0 ? a.reduce_stride : nb;
    const fz::row_tiles map{static_cast<std::size_t>(a.num_tiles), a.tile_elems};
    const fz::epilogue<fz::store<float>> epi{{out[r], a.tile_elems}};
    const bool writable = a.null_rank != r;
    for (int t = ix.block; t < a.num_tiles; t += ps) {
      if (writable) {
        float* in = ar.input(t);
        for (std::size_t e = static_cast<std::size_t>(g.thread_rank()); e < a.tile_elems; e += static_cast<std::size_t>(g.size()))
          in[e] = static_cast<float>(r + 1) * 0.5f + static_cast<float>(t);
      }
      if (a.reduce_first_rank == r) (void)reduce(g, ar, t, map, epi);
      ar.publish(g, t);
      if (r == a.store_rank && t == a.store_tile && g.thread_rank() == 0) ar.input(t)[0] += 1000.0f;
      if (a.publish_twice) ar.publish(g, t);
    }
    if (a.publish_past_end && ix.block == 0) ar.publish(g, a.num_tiles);
    const int first = ((ix.block - a.reduce_shift) % nb + nb) % nb;
    for (int t = first; t < a.num_tiles; t += rs) {
      if (a.reduce_shift != 0 && g.thread_rank() == 0) {
        // Wait (bounded) until the tile's publisher marked it, so the reducer is named, not the order.
        const std::uint32_t* mark = core::audit_row(ar_tables(r).signals, a.slots.first + 1 + t);
        for (long i = 0; i < 200000000L &&
                        (rcclx::gpu::load_relaxed_system(mark) | rcclx::gpu::load_relaxed_system(mark + 2)) == 0u;
             ++i) {
        }
      }
      g.sync();
      if (a.reduce_first_rank == r) break;
      if (t == a.skip_reduce_tile) continue;
      if (!reduce(g, ar, t, map, epi)) break;
    }
    ar.finish(g, a.finish_blocks >= 0 ? a.finish_blocks : nb);
  }

  template <class G, class AR, class Map, class Epi>
  RCCLX_HOST_DEVICE bool reduce(const G& g, const AR& ar, int t, const Map& map, const Epi& epi) const {
    if (a.epilogue == 0) return ar.template reduce<4>(g, t, map, epi);
    if (a.epilogue == 4) return ar.template reduce<4>(g, t, map, input_store{ar.input(t)});
    float* o = a.epilogue == 2 ? ar.input(0) : out[ar.rank()];
    const checked_store st{o, static_cast<std::size_t>(a.num_tiles), a.epilogue == 3 ? a.tile_elems / 2 : a.tile_elems};
    return ar.template reduce<4>(g, t, map, st);
  }

  RCCLX_HOST_DEVICE const core::peer_table<float, max_r>& ar_tables(int r) const {
    return tables[a.tables_of_rank0 ? 0 : r];
  }

  template <rcclx::algorithm Algo, class G>
  RCCLX_HOST_DEVICE void run(const G& g, rt::launch_index ix) const {
    const auto& t = ar_tables(ix.rank);
    if (a.use_region) {
      const fz::tile_allreduce<float, max_r, Algo> ar(t, a.region, a.tile_elems, a.num_tiles);
      body(g, ix, ar);
    } else {
      const fz::tile_allreduce<float, max_r, Algo> ar(t, a.slots, a.tile_elems, a.num_tiles);
      body(g, ix, ar);
    }
  }

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    if (a.algo == algo_kind::tree) run<rcclx::algorithm::tree>(g, ix);
    else run<rcclx::algorithm::flat>(g, ix);
  }
};

// Two calls in one kernel (two_args). The second call's values are the first's + 100.
struct two_kernel {
  const core::peer_table<float, max_r>* tables;
  float* out[2][max_r];
  two_args a;

  template <class G, class AR>
  RCCLX_HOST_DEVICE void call(const G& g, rt::launch_index ix, const AR& ar, int c) const {
    const int r = ix.rank, nb = ix.num_blocks;
    const fz::row_tiles map{8, 64};
    const fz::epilogue<fz::store<float>> epi{{out[c][r], 64}};
    for (int t = ix.block; t < 8; t += nb) {
      float* in = ar.input(t);
      for (int e = g.thread_rank(); e < 64; e += g.size())
        in[e] = static_cast<float>(r + 1) * 0.5f + static_cast<float>(t) + 100.0f * static_cast<float>(c);
      ar.publish(g, t);
    }
    for (int t = ix.block; t < 8; t += nb)
      if (!ar.template reduce<4>(g, t, map, epi)) break;
  }

  template <class G, class AR>
  RCCLX_HOST_DEVICE void both(const G& g, rt::launch_index ix, const AR& a0, const AR& a1) const {
    call(g, ix, a0, 0);
    call(g, ix, a1, 1);
    a0.finish(g, ix.num_blocks);
    a1.finish(g, ix.num_blocks);
  }

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    using ar_t = fz::tile_allreduce<float, max_r>;
    const auto& t = tables[ix.rank];
    if (a.use_region) {
      const ar_t a0(t, a.region[0], 64, 8), a1(t, a.region[1], 64, 8);
      both(g, ix, a0, a1);
    } else {
      const ar_t a0(t, a.slots[0], 64, 8), a1(t, a.slots[1], 64, 8);
      both(g, ix, a0, a1);
    }
  }
};

struct combine_kernel {
  const core::peer_table<fz::argmax::record, max_r>* tables;
  fz::argmax::record* out[max_r];
  core::region region;

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    const int r = ix.rank;
    const fz::combine<fz::argmax::record, fz::argmax, max_r, rcclx::algorithm::tree> c(tables[r], region, 16, 64);
    for (int t = ix.block; t < c.num_tiles(); t += ix.num_blocks) {
      fz::argmax::record* in = c.input(t);
      for (std::size_t i = static_cast<std::size_t>(g.thread_rank()); i < c.records_in(t); i += static_cast<std::size_t>(g.size())) {
        const std::size_t k = static_cast<std::size_t>(t) * 16 + i;
        in[i] = {static_cast<float>((7 * k + 3 * static_cast<std::size_t>(r)) % 11), static_cast<std::uint32_t>(10 * k) + static_cast<std::uint32_t>(r)};
      }
      c.publish(g, t);
    }
    for (int t = ix.block; t < c.num_tiles(); t += ix.num_blocks)
      if (!c.reduce(g, t, [&](std::size_t i, const fz::argmax::record& rec) { out[r][i] = rec; })) break;
    c.finish(g, ix.num_blocks);
  }
};

}  // namespace kernels

namespace rt = rcclx::testing;
namespace core = rcclx::core;

struct call_setup::impl {
  explicit impl(std::size_t bytes) : bytes(bytes), world(ranks, 256, 40, 500ull * 1000 * 1000) {}
  std::size_t bytes;
  rt::emulated_world<kernels::max_r> world;
  std::vector<unsigned char*> buf;
  std::vector<float*> out;
  core::peer_table<float, kernels::max_r>* tables = nullptr;
};

call_setup::call_setup(std::size_t buffer_bytes) : p_(new impl(buffer_bytes)) {
  for (int r = 0; r < ranks; ++r) {
    p_->buf.push_back(static_cast<unsigned char*>(rcclx::gpu::device_malloc(buffer_bytes + guard_bytes)));
    p_->out.push_back(static_cast<float*>(rcclx::gpu::device_malloc(64 * 1024 * sizeof(float))));
  }
  p_->tables = static_cast<core::peer_table<float, kernels::max_r>*>(
      rcclx::gpu::device_malloc(sizeof(core::peer_table<float, kernels::max_r>) * ranks));
}

call_setup::~call_setup() {
  for (auto* b : p_->buf) rcclx::gpu::device_free(b);
  for (auto* o : p_->out) rcclx::gpu::device_free(o);
  rcclx::gpu::device_free(p_->tables);
}

void call_setup::reset(std::uint32_t value) { p_->world.reset(value); }
int call_setup::blocks() const { return rcclx::current_backend == rcclx::backend::host ? 4 : 8; }
std::size_t call_setup::buffer_bytes() const { return p_->bytes; }
int call_setup::max_blocks() const { return p_->world.max_blocks(); }
std::string call_setup::described_errors(rcclx::errc* code) const { return p_->world.describe_errors(code); }

std::vector<double> reference(int num_tiles, std::size_t tile_elems) {
  std::vector<double> ref(static_cast<std::size_t>(num_tiles) * tile_elems);
  for (int t = 0; t < num_tiles; ++t) {
    double s = 0;
    for (int r = 0; r < ranks; ++r) s += (r + 1) * 0.5 + t;
    for (std::size_t e = 0; e < tile_elems; ++e) ref[static_cast<std::size_t>(t) * tile_elems + e] = s;
  }
  return ref;
}

call_result call_setup::run(const call_args& a) {
  const int n = ranks;
  const std::size_t out_elems = static_cast<std::size_t>(a.num_tiles > 0 ? a.num_tiles : 0) * a.tile_elems + 64;
  // Tables over this setup's buffers (the guard after each is outside capacity_bytes).
  std::vector<core::peer_table<float, kernels::max_r>> tables(n);
  for (int r = 0; r < n; ++r) {
    tables[r] = p_->world.template table<float>(r);
    for (int q = 0; q < n; ++q) {
      unsigned char* b = p_->buf[q];
      if (q == a.misaligned_rank) b += 4;
      tables[r].data[q] = q == a.null_rank ? nullptr : reinterpret_cast<float*>(b);
    }
    tables[r].capacity_bytes = a.capacity ? a.capacity : p_->bytes;
  }
  rcclx::gpu::copy(p_->tables, tables.data(), sizeof(tables[0]) * n);
  const std::vector<float> s(out_elems, sentinel);
  const std::vector<unsigned char> guard(guard_bytes, 0xA5);
  kernels::misuse_kernel k{};
  k.tables = p_->tables;
  k.a = a;
  for (int r = 0; r < n; ++r) {
    rcclx::gpu::copy(p_->out[r], s.data(), out_elems * sizeof(float));
    rcclx::gpu::copy(p_->buf[r] + p_->bytes, guard.data(), guard_bytes);
    k.out[r] = p_->out[r];
  }
  const auto l = core::pad_layout<kernels::max_r>::of(p_->world.max_blocks(), p_->world.ll());
  const auto pads = [&] {
    std::vector<std::vector<std::uint32_t>> v(n, std::vector<std::uint32_t>(l.bytes / 4));
    for (int r = 0; r < n; ++r) {
      rcclx::gpu::copy(v[r].data(), p_->world.pad(r), l.bytes);
      for (std::size_t i = l.error / 4; i < (l.error + sizeof(core::error_record)) / 4; ++i) v[r][i] = 0;
    }
    return v;
  };
  const auto before = pads();
  rt::launch_emulated(n, blocks(), kernels::threads, k);
  rcclx::gpu::device_synchronize();
  call_result res;
  res.errors = p_->world.errors();
  res.pads_intact = pads() == before;
  for (int r = 0; r < n; ++r) {
    std::vector<float> o(out_elems);
    rcclx::gpu::copy(o.data(), p_->out[r], out_elems * sizeof(float));
    res.out.push_back(o);
    std::vector<unsigned char> gd(guard_bytes);
    rcclx::gpu::copy(gd.data(), p_->buf[r] + p_->bytes, guard_bytes);
    res.guard_intact = res.guard_intact && gd == guard;
  }
  return res;
}

combine_result call_setup::run_combine(const core::region& region) {
  const int n = ranks;
  std::vector<core::peer_table<float, kernels::max_r>> tables(n);
  for (int r = 0; r < n; ++r) {
    tables[r] = p_->world.template table<float>(r);
    for (int q = 0; q < n; ++q) tables[r].data[q] = reinterpret_cast<float*>(p_->buf[q]);
    tables[r].capacity_bytes = p_->bytes;
  }
  rcclx::gpu::copy(p_->tables, tables.data(), sizeof(tables[0]) * n);
  const std::size_t words = 2 * 64 + 16;
  const std::vector<std::uint32_t> s(words, 0xDEADBEEFu);
  kernels::combine_kernel k{};
  // peer_table's layout does not depend on T (as emulated_world's device tables use it).
  k.tables = reinterpret_cast<const core::peer_table<rcclx::fused::argmax::record, kernels::max_r>*>(p_->tables);
  k.region = region;
  for (int r = 0; r < n; ++r) {
    rcclx::gpu::copy(p_->out[r], s.data(), words * 4);
    k.out[r] = reinterpret_cast<rcclx::fused::argmax::record*>(p_->out[r]);
  }
  rt::launch_emulated(n, blocks(), kernels::threads, k);
  rcclx::gpu::device_synchronize();
  combine_result res;
  res.errors = p_->world.errors();
  for (int r = 0; r < n; ++r) {
    std::vector<std::uint32_t> o(words);
    rcclx::gpu::copy(o.data(), p_->out[r], words * 4);
    res.out.push_back(o);
  }
  return res;
}

two_result call_setup::run_two(const two_args& a) {
  const int n = ranks;
  const std::size_t out_elems = 8 * 64 + 64;
  std::vector<core::peer_table<float, kernels::max_r>> tables(n);
  for (int r = 0; r < n; ++r) {
    tables[r] = p_->world.template table<float>(r);
    for (int q = 0; q < n; ++q) tables[r].data[q] = reinterpret_cast<float*>(p_->buf[q]);
    tables[r].capacity_bytes = p_->bytes;
  }
  rcclx::gpu::copy(p_->tables, tables.data(), sizeof(tables[0]) * n);
  std::vector<float*> outs;
  const std::vector<float> s(out_elems, sentinel);
  kernels::two_kernel k{};
  k.tables = p_->tables;
  k.a = a;
  for (int c = 0; c < 2; ++c)
    for (int r = 0; r < n; ++r) {
      outs.push_back(static_cast<float*>(rcclx::gpu::device_malloc(out_elems * sizeof(float))));
      rcclx::gpu::copy(outs.back(), s.data(), out_elems * sizeof(float));
      k.out[c][r] = outs.back();
    }
  rt::launch_emulated(n, blocks(), kernels::threads, k);
  rcclx::gpu::device_synchronize();
  two_result res;
  res.errors = p_->world.errors();
  for (int c = 0; c < 2; ++c)
    for (int r = 0; r < n; ++r) {
      std::vector<float> o(out_elems);
      rcclx::gpu::copy(o.data(), k.out[c][r], out_elems * sizeof(float));
      res.out[c].push_back(o);
    }
  for (float* o : outs) rcclx::gpu::device_free(o);
  return res;
}

}  // namespace call_checks
