// Example 09's layer on emulated ranks for tests/multicall (decode_runs.hpp).
#include "decode_runs.hpp"

#include <rcclx/testing/emulated_world.hpp>

#include <algorithm>
#include <cstring>

#include <rcclx/fused/allreduce_rmsnorm.hpp>

#include "../../examples/09_decode_layer/decode_layer.hpp"
#include "../fused/reference.hpp"

namespace multicall_test {

namespace dl = decode_layer;
namespace fz = rcclx::fused;
using rcclx::algorithm;

const char* name(algos a) {
  switch (a) {
    case algos::flat: return "flat";
    case algos::tree: return "tree";
    case algos::automatic: return "automatic";
    case algos::mixed: return "merge automatic, o_proj tree, down_proj flat";
  }
  return "?";
}

namespace {

template <class U>
U* put(std::vector<void*>& owned, const std::vector<U>& v) {
  owned.push_back(rcclx::gpu::device_malloc(v.size() * sizeof(U) + 16));
  rcclx::gpu::copy(owned.back(), v.data(), v.size() * sizeof(U));
  return static_cast<U*>(owned.back());
}
template <class U>
U* zeros(std::vector<void*>& owned, std::size_t count) {
  owned.push_back(rcclx::gpu::device_malloc(count * sizeof(U) + 16));
  rcclx::gpu::memset_zero(owned.back(), count * sizeof(U) + 16);
  return static_cast<U*>(owned.back());
}

template <class T>
std::vector<T> download(const T* d, std::size_t count) {
  std::vector<T> h(count);
  rcclx::gpu::copy(h.data(), d, count * sizeof(T));
  return h;
}

template <class T>
std::uint32_t bits_of(const T& x) {
  std::uint32_t b = 0;
  std::memcpy(&b, &x, sizeof(T));
  return b;
}

template <class T, algorithm M, algorithm O, algorithm D, class Map>
layer_run run(int n, std::size_t hidden, int launches) {
  using kernel = dl::layer_kernel<T, M, O, D, Map>;
  const dl::layer_shape s{6, 8, 32, hidden};  // 6 tokens on 4 blocks: two blocks own two tokens
  dl::layer_plan<T, M, O, D> lp(s);
  rcclx::testing::emulated_world<dl::max_ranks> world(n, lp.plan.bytes(), lp.plan.slots());
  lp.plan.place(world);
  kernel k{};
  for (int r = 0; r < n; ++r) {
    k.tables[r] = world.device_tables<T>() + r;
    k.record_tables[r] = world.device_tables<dl::record<T>>() + r;
  }
  k.merge_region = lp.plan[lp.merge];
  k.o_proj_region = lp.plan[lp.o_proj];
  k.down_proj_region = lp.plan[lp.down_proj];
  k.shape = s;
  const dl::problem<T> p = dl::make_problem<T>(n, s, 17u + static_cast<unsigned>(hidden));
  std::vector<void*> owned;
  const std::size_t H = hidden, tokens = static_cast<std::size_t>(s.tokens), count = tokens * H;
  for (int r = 0; r < n; ++r) {
    const int h0 = dl::head_begin(r, n, s.heads), h1 = dl::head_begin(r + 1, n, s.heads);
    std::vector<T> wo(p.wo.begin() + static_cast<std::size_t>(h0) * dl::head_dim * H,
                      p.wo.begin() + static_cast<std::size_t>(h1) * dl::head_dim * H);
    if (wo.empty()) wo.resize(1);
    dl::rank_args<T>& a = k.args[r];
    a.partial = put(owned, p.partial[r]);
    a.wo = put(owned, wo);
    a.wup = put(owned, p.wup[r]);
    a.wdown = put(owned, p.wdown[r]);
    a.x = put(owned, p.x);
    a.norm_weight = put(owned, p.norm_weight);
    a.attn = zeros<T>(owned, tokens * static_cast<std::size_t>(s.heads) * dl::head_dim);
    a.act = zeros<float>(owned, tokens * static_cast<std::size_t>(s.ffn));
    a.h1 = zeros<T>(owned, count);
    a.normed = zeros<T>(owned, count);
    a.out = zeros<T>(owned, count);
    a.head_first = h0;
    a.head_end = h1;
  }
  layer_run res;
  try {
    const int blocks = std::max(1, std::min(4, rcclx::testing::max_blocks_per_rank<kernel>(n, dl::threads)));
    for (int i = 0; i < launches; ++i) rcclx::testing::launch_emulated(world, blocks, dl::threads, k);
  } catch (const std::exception& e) {
    res.error = e.what();
  }
  const dl::reference ref = dl::layer_reference(p);
  std::vector<T> out0, normed0;
  for (int r = 0; r < n; ++r) {
    const std::vector<T> out = download(k.args[r].out, count), normed = download(k.args[r].normed, count);
    double unused = 0;
    res.out_of_bound += dl::out_of_bound(out, ref.out, ref.out_err, res.max_err) +
                        dl::out_of_bound(normed, ref.normed, ref.normed_err, unused);
    res.checked += 2 * count;
    if (r == 0) {
      out0 = out;
      normed0 = normed;
      for (const T& x : out) res.bits.push_back(bits_of(x));
      for (const T& x : normed) res.bits.push_back(bits_of(x));
    } else {
      for (std::size_t i = 0; i < count; ++i)
        res.rank_differ += (bits_of(out[i]) != bits_of(out0[i])) + (bits_of(normed[i]) != bits_of(normed0[i]));
    }
  }
  for (void* q : owned) rcclx::gpu::device_free(q);
  return res;
}

template <class T, class Map>
layer_run run_algos(int n, algos a, std::size_t hidden, int launches) {
  constexpr algorithm F = algorithm::flat, R = algorithm::tree, A = algorithm::automatic;
  switch (a) {
    case algos::flat: return run<T, F, F, F, Map>(n, hidden, launches);
    case algos::tree: return run<T, R, R, R, Map>(n, hidden, launches);
    case algos::automatic: return run<T, A, A, A, Map>(n, hidden, launches);
    case algos::mixed: return run<T, A, R, F, Map>(n, hidden, launches);
  }
  return {};
}

template <class T>
layer_run run_type(int n, algos a, std::size_t hidden, int launches) {
  if (hidden % (16 / sizeof(T)) == 0) return run_algos<T, fz::row_tiles>(n, a, hidden, launches);
  return run_algos<T, fz::ragged_row_tiles>(n, a, hidden, launches);
}

}  // namespace

layer_run run_layer(int n, bool bf16, algos a, std::size_t hidden, int launches) {
  return bf16 ? run_type<rcclx::bf16>(n, a, hidden, launches) : run_type<float>(n, a, hidden, launches);
}

// ---- the ready-made AllReduce + RMSNorm block next to a tile AllReduce, one region each ----------

namespace {
constexpr std::size_t norm_tokens = 5, norm_hidden = 256, tile_elems = 64;
constexpr int tile_count = 6;
constexpr float norm_eps = 1e-5f;
constexpr int norm_vpt = static_cast<int>((norm_hidden / 8 + dl::threads - 1) / dl::threads);

RCCLX_HOST_DEVICE inline float tile_value(int r, int t, std::size_t e) {
  return static_cast<float>(r + 1) + 0.5f * static_cast<float>((static_cast<std::size_t>(t) * 5 + e) % 11);
}
}  // namespace

template <algorithm A>
struct rmsnorm_tile_kernel {
  static constexpr int max_threads_per_block = dl::threads;
  using T = rcclx::bf16;
  const rcclx::core::peer_table<T, dl::max_ranks>* tables[dl::max_ranks];
  fz::rmsnorm_args<T> args[dl::max_ranks];
  T* tile_out[dl::max_ranks];  // [tile_count][tile_elems]
  rcclx::core::region norm_region, tile_region;

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, rcclx::testing::launch_index ix) const {
    // The ready-made block takes a table and a slot range: the table narrowed to its region.
    const rcclx::core::peer_table<T, dl::max_ranks> narrowed = rcclx::core::region_table(*tables[ix.rank], norm_region);
    (void)fz::allreduce_rmsnorm_block<A, norm_vpt, dl::threads>(g, narrowed, args[ix.rank], norm_region.slots, ix.block,
                                                                 ix.num_blocks);
    const fz::tile_allreduce<T, dl::max_ranks, A> ar(*tables[ix.rank], tile_region, tile_elems, tile_count);
    for (int t = ix.block; t < tile_count; t += ix.num_blocks) {
      T* in = ar.input(t);
      for (std::size_t e = g.thread_rank(); e < tile_elems; e += g.size()) in[e] = T(tile_value(ix.rank, t, e));
      ar.publish(g, t);
    }
    const fz::epilogue<fz::store<T>> epi{{tile_out[ix.rank], tile_elems}};
    for (int t = ix.block; t < tile_count; t += ix.num_blocks)
      if (!ar.template reduce<1>(g, t, fz::row_tiles{static_cast<std::size_t>(tile_count), tile_elems}, epi)) break;
    ar.finish(g, ix.num_blocks);
  }
};

namespace {
template <algorithm A>
rmsnorm_region_run run_norm(int n, int launches) {
  using T = rcclx::bf16;
  using kernel = rmsnorm_tile_kernel<A>;
  fz::region_plan plan;
  const auto norm = plan.add(fz::allreduce_rmsnorm_need<T>(norm_tokens, norm_hidden, A), "AllReduce + RMSNorm");
  const auto tile = plan.add(fz::tile_allreduce<T, dl::max_ranks, A>::need(tile_elems, tile_count), "tile AllReduce");
  rcclx::testing::emulated_world<dl::max_ranks> world(n, plan.bytes(), plan.slots());
  plan.place(world);
  const std::size_t count = norm_tokens * norm_hidden;
  std::vector<std::vector<T>> x(n, std::vector<T>(count));
  std::vector<T> res(count), weight(norm_hidden);
  for (int r = 0; r < n; ++r) rcclx_test::fill_random(x[r], 101 + r);
  rcclx_test::fill_random(res, 7);
  for (std::size_t j = 0; j < norm_hidden; ++j) weight[j] = T(1.0f + 0.125f * static_cast<float>(j % 5));
  std::vector<void*> owned;
  kernel k{};
  k.norm_region = plan[norm];
  k.tile_region = plan[tile];
  T* w = put(owned, weight);
  for (int r = 0; r < n; ++r) {
    k.tables[r] = world.device_tables<T>() + r;
    k.args[r] = fz::rmsnorm_args<T>{put(owned, x[r]), put(owned, res), w, zeros<T>(owned, count), norm_tokens, norm_hidden,
                                    norm_eps};
    k.tile_out[r] = zeros<T>(owned, static_cast<std::size_t>(tile_count) * tile_elems);
  }
  rmsnorm_region_run out;
  const int blocks = std::max(1, std::min(4, rcclx::testing::max_blocks_per_rank<kernel>(n, dl::threads)));
  try {
    for (int i = 0; i < launches; ++i) {
      if (i > 0)  // the residual is updated in place: every launch starts from the same one
        for (int r = 0; r < n; ++r) rcclx::gpu::copy(k.args[r].residual, res.data(), count * sizeof(T));
      rcclx::testing::launch_emulated(world, blocks, dl::threads, k);
    }
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  const fused_ref::rms_expected e = fused_ref::rmsnorm_reference<T>(x, res, weight, norm_tokens, norm_hidden, norm_eps);
  std::vector<T> out0;
  for (int r = 0; r < n; ++r) {
    const std::vector<T> o = download(k.args[r].output, count), nr = download(k.args[r].residual, count);
    std::string first;
    out.out_of_bound += fused_ref::mismatches(count, [&](std::size_t i) { return fused_ref::exact(o[i]); }, e.out,
                                              e.out_tol, first, "output");
    out.out_of_bound += fused_ref::mismatches(count, [&](std::size_t i) { return fused_ref::exact(nr[i]); }, e.res,
                                              e.res_tol, first, "residual");
    out.checked += 2 * count;
    if (r == 0) out0 = o;
    for (std::size_t i = 0; r > 0 && i < count; ++i) out.rank_differ += bits_of(o[i]) != bits_of(out0[i]);
    const std::vector<T> t = download(k.tile_out[r], static_cast<std::size_t>(tile_count) * tile_elems);
    for (int q = 0; q < tile_count; ++q)
      for (std::size_t i = 0; i < tile_elems; ++i) {
        double want = 0;
        for (int p = 0; p < n; ++p) want += tile_value(p, q, i);
        out.tile_wrong += static_cast<double>(static_cast<float>(t[static_cast<std::size_t>(q) * tile_elems + i])) != want;
      }
  }
  for (void* q : owned) rcclx::gpu::device_free(q);
  return out;
}
}  // namespace

rmsnorm_region_run run_rmsnorm_and_tile(int n, bool tree, int launches) {
  return tree ? run_norm<algorithm::tree>(n, launches) : run_norm<algorithm::flat>(n, launches);
}

}  // namespace multicall_test
