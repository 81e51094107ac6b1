// examples/09_decode_layer/decode_layer.hpp: one decode step of a tensor-parallel transformer
// layer as one kernel with three collectives, each in a region of its own of one region plan:
//
//   attention merge  combine<lse_merge>: the ranks' split-KV partial outputs (O_r, L_r) of every
//                    head of a token -> the attention output over the whole KV cache, every rank
//   o_proj           this rank's heads x W_o (rows of its heads) -> tile AllReduce, then
//                    residual add (h1 = x + attn W_o), RMSNorm, store (the MLP's input)
//   MLP              up projection (this rank's columns) + SiLU, down projection (its rows)
//   down_proj        -> tile AllReduce, then residual add (out = h1 + mlp), store
//
// Block b of every rank owns tokens b, b + G, ... from the merge to the layer's output, so no
// block waits for another block of its own rank. Rows of any length: a hidden size that is not a
// multiple of the vector width runs the ragged map (fz::ragged_row_tiles) on tiles padded to
// whole vectors. The float64 reference of the whole layer (with a first-order error bound per
// element) is at the end: the example and tests/multicall/decode_layer_test.cpp check against it.
#pragma once

#include <rcclx/core/region.hpp>
#include <rcclx/fused/combine.hpp>
#include <rcclx/fused/combine_ops.hpp>
#include <rcclx/fused/epilogue.hpp>
#include <rcclx/fused/region_plan.hpp>
#include <rcclx/fused/stages.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/gpu/shared.hpp>
#include <rcclx/testing/launch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace decode_layer {

namespace fz = rcclx::fused;
using rcclx::algorithm;
constexpr int max_ranks = 8;
constexpr bool on_gpu = rcclx::current_backend != rcclx::backend::host;
constexpr int threads = on_gpu ? 256 : 1;
constexpr int head_dim = 64;
constexpr std::size_t max_hidden = 1024;  // a block holds a whole row for the RMSNorm
constexpr float eps = 1e-5f;

template <class T>
using merge_op = fz::lse_merge<T, head_dim>;
template <class T>
using record = typename merge_op<T>::record;

// Elements of a row padded to whole 16-byte vectors: a tile of the AllReduces.
template <class T>
constexpr std::size_t padded(std::size_t hidden) {
  return fz::padded_cols<T>(hidden);
}
// Vectors per thread a reduce holds: the whole (padded) row at once (RMSNorm is row-wide).
template <class T>
constexpr int vecs_per_thread = static_cast<int>((max_hidden * sizeof(T) / 16 + threads - 1) / threads);

// Rank r's heads of H: [head_begin(r), head_begin(r + 1)).
inline int head_begin(int r, int n, int heads) { return static_cast<int>(static_cast<long>(heads) * r / n); }

// One rank's inputs, weights, scratch and outputs (device memory).
template <class T>
struct rank_args {
  const record<T>* partial;  // [tokens][heads]: this rank's attention partials over its part of the cache
  const T* wo;               // [its heads x head_dim][hidden]: the rows of W_o of its heads
  const T* wup;              // [hidden][ffn]: its columns of the up projection
  const T* wdown;            // [ffn][hidden]: its rows of the down projection
  const T* x;                // [tokens][hidden]: the layer's input (the residual), the same on every rank
  const T* norm_weight;      // [hidden]
  T* attn;                   // [tokens][heads x head_dim]: the merged attention output
  float* act;                // [tokens][ffn]: SiLU(up projection)
  T* h1;                     // [tokens][hidden]: x + attention output x W_o
  T* normed;                 // [tokens][hidden]: RMSNorm(h1), the MLP's input
  T* out;                    // [tokens][hidden]: h1 + MLP output
  int head_first, head_end;
};

struct layer_shape {
  int tokens, heads, ffn;  // ffn: the MLP's columns per rank
  std::size_t hidden;
};

// The kernel: every block of every rank (testing::launch_emulated), or of this process's rank
// (testing::launch_rank). MergeAlgo, OAlgo, DownAlgo: each call's algorithm. Map: fz::row_tiles
// (hidden a multiple of the vector width) or fz::ragged_row_tiles.
template <class T, algorithm MergeAlgo, algorithm OAlgo, algorithm DownAlgo, class Map>
struct layer_kernel {
  static constexpr int max_threads_per_block = threads;
  using merge_t = fz::combine<record<T>, merge_op<T>, max_ranks, MergeAlgo>;
  using o_proj_t = fz::tile_allreduce<T, max_ranks, OAlgo>;
  using down_proj_t = fz::tile_allreduce<T, max_ranks, DownAlgo>;
  static constexpr int vpt = vecs_per_thread<T>;

  const rcclx::core::peer_table<T, max_ranks>* tables[max_ranks];  // rank r's table (device memory)
  const rcclx::core::peer_table<record<T>, max_ranks>* record_tables[max_ranks];  // the same, for the merge's records
  rank_args<T> args[max_ranks];
  rcclx::core::region merge_region, o_proj_region, down_proj_region;
  layer_shape shape;

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, rcclx::testing::launch_index ix) const {
    const rank_args<T>& a = args[ix.rank];
    // [decode-kernel]
    const std::size_t H = shape.hidden, hp = padded<T>(H), heads = static_cast<std::size_t>(shape.heads);
    const std::size_t tokens = static_cast<std::size_t>(shape.tokens);
    const int rows = shape.tokens;
    // Three calls, three regions: each object alternates its own buffer halves and flags.
    const merge_t merge(*record_tables[ix.rank], merge_region, heads, tokens * heads);
    const o_proj_t o_proj(*tables[ix.rank], o_proj_region, hp, rows);
    const down_proj_t down_proj(*tables[ix.rank], down_proj_region, hp, rows);
    auto& tmp = rcclx::gpu::block_shared<typename fz::rms_norm<T, threads>::storage_type, struct decode_norm_tag>();
    const Map map{tokens, H};
    // After o_proj's sums: h1 = x + sums (the new residual), normed = RMSNorm(h1) * weight.
    const fz::epilogue<fz::residual_add<T>, fz::rms_norm<T, threads>, fz::store<T>> norm_epi{
        {a.x, a.h1, H}, {a.norm_weight, eps, H, &tmp}, {a.normed, H}};
    // After down_proj's sums: out = h1 + sums.
    const fz::epilogue<fz::residual_add<T>, fz::store<T>> out_epi{{a.h1, nullptr, H}, {a.out, H}};
    bool ok = true;
    for (int t = ix.block; t < rows && ok; t += ix.num_blocks) {  // this block's tokens, end to end
      // 1. attention merge: this rank's partials of token t's heads in, every rank's merge out
      for (std::size_t h = g.thread_rank(); h < heads; h += g.size()) merge.input(t)[h] = a.partial[t * heads + h];
      merge.publish(g, t);
      ok = merge.reduce_slices(g, t, [&](std::size_t i, int j, const typename merge_op<T>::slice& s) {
        T* o = a.attn + i * head_dim + j * merge_op<T>::slice_elems;  // record i: token i / heads, head i % heads
        for (int d = 0; d < merge_op<T>::slice_elems; ++d) o[d] = s.o[d];
      });
      if (!ok) break;  // a wait expired: leave (the error record names the rank)
      g.sync();
      // 2. o_proj: this rank's heads x W_o into the tile, AllReduce, residual + RMSNorm + store
      o_proj_partial(g, a, t, o_proj.input(t));
      o_proj.publish(g, t);
      if (!(ok = o_proj.template reduce<vpt>(g, t, map, norm_epi))) break;
      g.sync();
      // 3. MLP: SiLU(normed x W_up), then x W_down into the tile, AllReduce, residual + store
      mlp_partial(g, a, t, down_proj.input(t));
      down_proj.publish(g, t);
      ok = down_proj.template reduce<vpt>(g, t, map, out_epi);
    }
    merge.finish(g, ix.num_blocks);  // every block, once per call, also after a failure
    o_proj.finish(g, ix.num_blocks);
    down_proj.finish(g, ix.num_blocks);
    // [decode-kernel]
  }

  // Token t's partial o_proj row on this rank: its heads' merged outputs x its rows of W_o.
  template <class Group>
  RCCLX_HOST_DEVICE void o_proj_partial(const Group& g, const rank_args<T>& a, int t, T* dst) const {
    const std::size_t H = shape.hidden, width = static_cast<std::size_t>(shape.heads) * head_dim;
    const std::size_t first = static_cast<std::size_t>(a.head_first) * head_dim;
    const std::size_t k = static_cast<std::size_t>(a.head_end - a.head_first) * head_dim;
    const T* o = a.attn + static_cast<std::size_t>(t) * width + first;
    for (std::size_t j = g.thread_rank(); j < H; j += g.size()) {
      float s = 0.0f;
      for (std::size_t q = 0; q < k; ++q) s += static_cast<float>(o[q]) * static_cast<float>(a.wo[q * H + j]);
      dst[j] = T(s);
    }
  }

  // Token t's partial down_proj row on this rank: SiLU of its up-projection columns, x its rows of W_down.
  template <class Group>
  RCCLX_HOST_DEVICE void mlp_partial(const Group& g, const rank_args<T>& a, int t, T* dst) const {
    const std::size_t H = shape.hidden, F = static_cast<std::size_t>(shape.ffn);
    const T* x = a.normed + static_cast<std::size_t>(t) * H;
    float* act = a.act + static_cast<std::size_t>(t) * F;
    for (std::size_t f = g.thread_rank(); f < F; f += g.size()) {
      float s = 0.0f;
      for (std::size_t j = 0; j < H; ++j) s += static_cast<float>(x[j]) * static_cast<float>(a.wup[j * F + f]);
      act[f] = s / (1.0f + expf(-s));
    }
    g.sync();
    for (std::size_t j = g.thread_rank(); j < H; j += g.size()) {
      float s = 0.0f;
      for (std::size_t f = 0; f < F; ++f) s += act[f] * static_cast<float>(a.wdown[f * H + j]);
      dst[j] = T(s);
    }
  }
};

// ---- host side: the problem, the plan, the reference --------------------------------------------

// Every rank's inputs (the same in every process: one seed).
template <class T>
struct problem {
  layer_shape shape;
  int n;
  std::vector<std::vector<record<T>>> partial;  // [rank][tokens x heads]
  std::vector<T> wo;                            // [heads x head_dim][hidden]
  std::vector<std::vector<T>> wup, wdown;       // [rank]: [hidden][ffn], [ffn][hidden]
  std::vector<T> x, norm_weight;
};

template <class T>
problem<T> make_problem(int n, const layer_shape& s, unsigned seed = 9) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  problem<T> p{s, n, {}, {}, {}, {}, {}, {}};
  const std::size_t width = static_cast<std::size_t>(s.heads) * head_dim, H = s.hidden, F = static_cast<std::size_t>(s.ffn);
  const float wo_scale = 1.0f / std::sqrt(static_cast<float>(width)), up_scale = 1.0f / std::sqrt(static_cast<float>(H));
  p.partial.resize(n);
  for (int r = 0; r < n; ++r) {
    p.partial[r].resize(static_cast<std::size_t>(s.tokens) * s.heads);
    for (std::size_t i = 0; i < p.partial[r].size(); ++i) {
      for (int d = 0; d < head_dim; ++d) p.partial[r][i].o[d] = T(dist(gen));
      // a rank without keys for token 0 (a short sequence): L = -inf, its O is never read
      p.partial[r][i].lse = r == n - 1 && i < static_cast<std::size_t>(s.heads) ? -INFINITY : 2.0f * dist(gen);
    }
  }
  p.wo.resize(width * H);
  for (T& v : p.wo) v = T(wo_scale * dist(gen));
  p.wup.resize(n);
  p.wdown.resize(n);
  for (int r = 0; r < n; ++r) {
    p.wup[r].resize(H * F);
    p.wdown[r].resize(F * H);
    for (T& v : p.wup[r]) v = T(up_scale * dist(gen));
    for (T& v : p.wdown[r]) v = T(0.5f * dist(gen) / std::sqrt(static_cast<float>(F * n)));
  }
  p.x.resize(static_cast<std::size_t>(s.tokens) * H);
  for (T& v : p.x) v = T(dist(gen));
  p.norm_weight.resize(H);
  for (T& v : p.norm_weight) v = T(1.0f + 0.25f * dist(gen));
  return p;
}

// The plan of the kernel's three calls: the largest call (shape.tokens tokens) of each, sized for
// the algorithm it runs (automatic: for either).
template <class T, algorithm MergeAlgo, algorithm OAlgo, algorithm DownAlgo>
struct layer_plan {
  fz::region_plan plan;
  fz::region_plan::handle merge, o_proj, down_proj;
  explicit layer_plan(const layer_shape& s) {
    using K = layer_kernel<T, MergeAlgo, OAlgo, DownAlgo, fz::row_tiles>;
    const std::size_t heads = static_cast<std::size_t>(s.heads);
    merge = plan.add(K::merge_t::need(heads, static_cast<std::size_t>(s.tokens) * heads), "attention merge");
    o_proj = plan.add(K::o_proj_t::need(padded<T>(s.hidden), s.tokens), "o_proj");
    down_proj = plan.add(K::down_proj_t::need(padded<T>(s.hidden), s.tokens), "down_proj");
  }
};

// float64 reference of the whole layer, with a first-order bound of each output element's error
// (doubled): the roundings the kernel makes (partials and sums to T, FP32 dot products and sums,
// the merge's output to T, SiLU's expf) carried through every stage. u: T's unit roundoff.
struct reference {
  std::vector<double> out, out_err, normed, normed_err;
};

template <class T>
reference layer_reference(const problem<T>& p) {
  const layer_shape& s = p.shape;
  const int n = p.n;
  const std::size_t H = s.hidden, F = static_cast<std::size_t>(s.ffn), heads = static_cast<std::size_t>(s.heads);
  const std::size_t width = heads * head_dim;
  const double u = sizeof(T) == 2 ? 0x1p-8 : 0x1p-24, u32 = 0x1p-24;
  const auto f64 = [](const T& v) { return static_cast<double>(static_cast<float>(v)); };
  reference ref;
  ref.out.assign(s.tokens * H, 0);
  ref.out_err = ref.normed = ref.normed_err = ref.out;
  for (int t = 0; t < s.tokens; ++t) {
    // merged attention output and its error (FP32 fold, one rounding to T)
    std::vector<double> o(width), eo(width);
    for (std::size_t h = 0; h < heads; ++h) {
      const std::size_t i = static_cast<std::size_t>(t) * heads + h;
      double m = -INFINITY;
      for (int r = 0; r < n; ++r) m = std::max(m, static_cast<double>(p.partial[r][i].lse));
      double z = 0;
      for (int r = 0; r < n; ++r) z += std::exp(p.partial[r][i].lse - m);
      for (int d = 0; d < head_dim; ++d) {
        double v = 0, mag = 0;
        for (int r = 0; r < n; ++r) {
          if (std::isinf(p.partial[r][i].lse)) continue;
          const double w = std::exp(p.partial[r][i].lse - m) / z, x = f64(p.partial[r][i].o[d]);
          v += w * x;
          mag += w * std::fabs(x);
        }
        o[h * head_dim + d] = v;
        eo[h * head_dim + d] = u * std::fabs(v) + (4 * n + 8) * u32 * mag;
      }
    }
    // o_proj: per rank, its heads' rows; the FP32 dot product rounded to T; the FP32 sum rounded to T
    std::vector<double> r1(H), e1(H);
    for (std::size_t j = 0; j < H; ++j) {
      double sum = 0, e = 0, abs_parts = 0;
      for (int r = 0; r < n; ++r) {
        const std::size_t a0 = static_cast<std::size_t>(head_begin(r, n, s.heads)) * head_dim;
        const std::size_t a1 = static_cast<std::size_t>(head_begin(r + 1, n, s.heads)) * head_dim;
        double part = 0, pm = 0, pe = 0;
        for (std::size_t q = a0; q < a1; ++q) {
          const double w = f64(p.wo[q * H + j]);
          part += o[q] * w;
          pm += std::fabs(o[q] * w);
          pe += eo[q] * std::fabs(w);
        }
        const double ep = pe + (a1 - a0 + 1) * u32 * (pm + pe);
        e += ep + u * (std::fabs(part) + ep);
        abs_parts += std::fabs(part) + ep;
        sum += part;
      }
      const double es = e + (n - 1) * u32 * abs_parts + u * (std::fabs(sum) + e);
      r1[j] = sum + f64(p.x[static_cast<std::size_t>(t) * H + j]);
      e1[j] = es + (u + u32) * (std::fabs(r1[j]) + es);
    }
    // RMSNorm (docs/fusion.md R8)
    double ms = 0, dms = 0;
    for (std::size_t j = 0; j < H; ++j) {
      ms += r1[j] * r1[j];
      dms += 2 * std::fabs(r1[j]) * e1[j] + e1[j] * e1[j] + (H + 16) * u32 * (std::fabs(r1[j]) + e1[j]) * (std::fabs(r1[j]) + e1[j]);
    }
    ms /= static_cast<double>(H);
    dms /= static_cast<double>(H);
    const double f = 1.0 / std::sqrt(ms + eps), ef = dms / (2 * (ms + eps)) + 3 * u32;
    std::vector<double> y(H), ey(H);
    for (std::size_t j = 0; j < H; ++j) {
      const double w = f64(p.norm_weight[j]);
      const double v = r1[j] * f * w, e = std::fabs(w) * f * e1[j] + std::fabs(v) * (ef + 2 * u32);
      y[j] = v;
      ey[j] = e + u * (std::fabs(v) + e);  // stored as T
      ref.normed[static_cast<std::size_t>(t) * H + j] = v;
      ref.normed_err[static_cast<std::size_t>(t) * H + j] = 2 * ey[j];
    }
    // MLP per rank: act = SiLU(y W_up) (|SiLU'| <= 1.1), then act W_down rounded to T; the sum to T
    std::vector<std::vector<double>> act(n, std::vector<double>(F)), eact(n, std::vector<double>(F));
    for (int r = 0; r < n; ++r)
      for (std::size_t c = 0; c < F; ++c) {
        double z = 0, zm = 0, ze = 0;
        for (std::size_t j = 0; j < H; ++j) {
          const double w = f64(p.wup[r][j * F + c]);
          z += y[j] * w;
          zm += std::fabs(y[j] * w);
          ze += ey[j] * std::fabs(w);
        }
        const double ez = ze + (H + 1) * u32 * (zm + ze);
        act[r][c] = z / (1 + std::exp(-z));
        eact[r][c] = 1.1 * ez + 8 * u32 * std::fabs(act[r][c]);
      }
    for (std::size_t j = 0; j < H; ++j) {
      double sum = 0, e = 0, abs_parts = 0;
      for (int r = 0; r < n; ++r) {
        double part = 0, pm = 0, pe = 0;
        for (std::size_t c = 0; c < F; ++c) {
          const double w = f64(p.wdown[r][c * H + j]);
          part += act[r][c] * w;
          pm += std::fabs(act[r][c] * w);
          pe += eact[r][c] * std::fabs(w);
        }
        const double ep = pe + (F + 1) * u32 * (pm + pe);
        e += ep + u * (std::fabs(part) + ep);
        abs_parts += std::fabs(part) + ep;
        sum += part;
      }
      const double es = e + (n - 1) * u32 * abs_parts + u * (std::fabs(sum) + e);
      const double h1 = r1[j], eh1 = e1[j] + u * std::fabs(r1[j]);  // h1 as stored (T)
      const double v = sum + h1, ev = es + eh1 + (u + u32) * (std::fabs(v) + es + eh1);
      ref.out[static_cast<std::size_t>(t) * H + j] = v;
      ref.out_err[static_cast<std::size_t>(t) * H + j] = 2 * ev;
    }
  }
  return ref;
}

// Elements of got (a rank's [tokens][hidden] output) outside the bound; the largest error.
template <class T>
std::size_t out_of_bound(const std::vector<T>& got, const std::vector<double>& want, const std::vector<double>& bound,
                         double& max_err) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(static_cast<float>(got[i])) - want[i]);
    max_err = std::max(max_err, err);
    bad += !(err <= bound[i]);
  }
  return bad;
}

}  // namespace decode_layer
