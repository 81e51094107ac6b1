// fused::allreduce_rmsnorm and add_rmsnorm with rows of any length (hidden 1, 7, 1000, 4097) and
// with per-token FP8 output (Out = per_token<F>), through the per-rank launchers on emulated ranks:
// against float64 (docs/fusion.md's bounds with H = the true hidden), ranks bit-identical, flat and
// tree bit-identical, and bit-identical to add_rmsnorm on the AllReduce's sum.
#include <rcclx/fused/add_rmsnorm.hpp>
#include <rcclx/fused/allreduce_rmsnorm.hpp>
#include <rcclx/testing/emulated_world.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "../fused/reference.hpp"
#include "../support/catch.hpp"

namespace {

namespace fz = rcclx::fused;
using rcclx::algorithm;
constexpr int max_r = 8;

// Each rank's launch from its own host thread (host backend) or stream (GPU).
void on_ranks(int n, const std::function<void(int, rcclx::gpu::stream_t)>& fn) {
#if RCCLX_BACKEND_HOST
  std::vector<std::thread> th;
  std::vector<std::exception_ptr> errors(n);
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      try {
        fn(r, nullptr);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : th) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
#else
  std::vector<rcclx::gpu::stream_t> s;
  for (int r = 0; r < n; ++r) s.push_back(rcclx::gpu::stream_create());
  for (int r = 0; r < n; ++r) fn(r, s[r]);
  rcclx::gpu::device_synchronize();
  for (auto x : s) rcclx::gpu::stream_destroy(x);
#endif
}

template <class Out>
struct out_info {
  static constexpr bool per_token = false;
};
template <class F>
struct out_info<fz::per_token<F>> {
  static constexpr bool per_token = true;
  using format = F;
};

template <class T, class Out>
struct rows_problem {
  using out_t = fz::output_t<T, Out>;
  int n;
  std::size_t tokens, hidden;
  std::vector<std::vector<T>> hx;
  std::vector<T> hres, hw, hsum;
  std::vector<void*> owned;
  T* weight;
  T* sum;  // the AllReduce's sum (rank order, FP32, rounded once): add_rmsnorm's input

  rows_problem(int n_, std::size_t t, std::size_t h, std::uint64_t seed) : n(n_), tokens(t), hidden(h) {
    const std::size_t count = t * h;
    hx.assign(n, std::vector<T>(count));
    hres.resize(count);
    hw.resize(h);
    hsum.resize(count);
    for (int r = 0; r < n; ++r) rcclx_test::fill_random(hx[r], seed + r);
    rcclx_test::fill_random(hres, seed + 100);
    for (std::size_t j = 0; j < h; ++j) hw[j] = T(0.75f + 0.5f * static_cast<float>(j % 7) / 7.0f);
    for (std::size_t k = 0; k < count; ++k) {
      float acc = static_cast<float>(hx[0][k]);
      for (int r = 1; r < n; ++r) acc += static_cast<float>(hx[r][k]);
      hsum[k] = T(acc);
    }
    weight = upload(hw.data(), h * sizeof(T));
    sum = upload(hsum.data(), count * sizeof(T));
  }
  ~rows_problem() {
    for (void* p : owned) rcclx::gpu::device_free(p);
  }
  template <class P = T>
  P* upload(const void* src, std::size_t bytes) {
    owned.push_back(rcclx::gpu::device_malloc(bytes + 64));
    if (src) rcclx::gpu::copy(owned.back(), src, bytes);
    return static_cast<P*>(owned.back());
  }
};

// One rank's result: output bytes, new residual, scales (+ 2 sentinels).
struct rows_result {
  std::vector<unsigned char> out, res;
  std::vector<float> scales;
  bool operator==(const rows_result& o) const { return out == o.out && res == o.res && scales == o.scales; }
};

constexpr float scale_sentinel = -3.5f;

template <class T, class Out>
fz::rmsnorm_args<T, Out> make_args(const T* x, T* res, const T* w, fz::output_t<T, Out>* out, float* scales,
                                   std::size_t tokens, std::size_t hidden) {
  fz::rmsnorm_args<T, Out> a{};
  a.input = x;
  a.residual = res;
  a.weight = w;
  a.output = out;
  a.tokens = tokens;
  a.hidden = hidden;
  a.eps = 1e-5f;
  if constexpr (out_info<Out>::per_token) a.token_scales = scales;
  return a;
}

// Fused on n ranks (fused = true) or add_rmsnorm on the sum (rank 0 only).
template <class T, class Out>
std::vector<rows_result> run_rows(rows_problem<T, Out>& p, rcclx::testing::emulated_world<max_r>* world, algorithm algo) {
  using out_t = fz::output_t<T, Out>;
  const std::size_t count = p.tokens * p.hidden;
  const int ranks = world ? p.n : 1;
  std::vector<T*> x(ranks), res(ranks);
  std::vector<out_t*> out(ranks);
  std::vector<float*> sc(ranks);
  const std::vector<float> s0(p.tokens + 2, scale_sentinel);
  for (int r = 0; r < ranks; ++r) {
    x[r] = world ? p.upload(p.hx[r].data(), count * sizeof(T)) : p.sum;
    res[r] = p.upload(p.hres.data(), count * sizeof(T));
    out[r] = p.template upload<out_t>(nullptr, count * sizeof(out_t));
    sc[r] = p.template upload<float>(s0.data(), s0.size() * 4);
  }
  const fz::tile_slots slots{0, static_cast<int>(p.tokens)};
  if (world) {
    on_ranks(ranks, [&](int r, rcclx::gpu::stream_t s) {
      fz::allreduce_rmsnorm(world->template table<T>(r), make_args<T, Out>(x[r], res[r], p.weight, out[r], sc[r], p.tokens, p.hidden),
                            slots, algo, s);
    });
    world->throw_if_error();
  } else {
    fz::add_rmsnorm(make_args<T, Out>(x[0], res[0], p.weight, out[0], sc[0], p.tokens, p.hidden));
    rcclx::gpu::device_synchronize();
  }
  std::vector<rows_result> got(ranks);
  for (int r = 0; r < ranks; ++r) {
    got[r].out.resize(count * sizeof(out_t));
    got[r].res.resize(count * sizeof(T));
    got[r].scales.resize(s0.size());
    rcclx::gpu::copy(got[r].out.data(), out[r], got[r].out.size());
    rcclx::gpu::copy(got[r].res.data(), res[r], got[r].res.size());
    rcclx::gpu::copy(got[r].scales.data(), sc[r], s0.size() * 4);
  }
  return got;
}

template <class T, class Out>
void rows_case(int n, std::size_t hidden) {
  const std::size_t tokens = 5;
  CAPTURE(n, hidden, sizeof(T), out_info<Out>::per_token);
  rows_problem<T, Out> p(n, tokens, hidden, hidden * 7 + n);
  rcclx::testing::emulated_world<max_r> world(n, fz::allreduce_rmsnorm_workspace_bytes<T, Out>(tokens, hidden, algorithm::tree),
                                              static_cast<int>(tokens) + 1);
  const auto flat = run_rows(p, &world, algorithm::flat);
  const auto tree = run_rows(p, &world, algorithm::tree);
  const auto unfused = run_rows(p, nullptr, algorithm::flat);
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    REQUIRE(flat[r] == flat[0]);
    REQUIRE(tree[r] == flat[0]);
  }
  REQUIRE(unfused[0] == flat[0]);
  const rows_result& g = flat[0];
  REQUIRE(g.scales[tokens] == scale_sentinel);
  REQUIRE(g.scales[tokens + 1] == scale_sentinel);
  const auto e = fused_ref::rmsnorm_reference<T>(p.hx, p.hres, p.hw, tokens, hidden, 1e-5);
  std::string first;
  std::size_t bad = fused_ref::mismatches(
      tokens * hidden,
      [&](std::size_t k) {
        T v;
        std::memcpy(&v, g.res.data() + k * sizeof(T), sizeof(T));
        return fused_ref::exact(v);
      },
      e.res, e.res_tol, first, "residual");
  if constexpr (out_info<Out>::per_token) {
    using F = typename out_info<Out>::format;
    const double qmax = rcclx::fp8::format_traits<F>::max_finite, u32 = fused_ref::u32;
    for (std::size_t i = 0; i < tokens; ++i) {
      double amax = 0, e_amax = 0;
      for (std::size_t j = 0; j < hidden; ++j) {
        const std::size_t k = i * hidden + j;
        const double ey = e.out_tol[k] / 2;  // e_y + u_T (|y| + e_y): a bound on y's own error
        if (std::fabs(e.out[k]) > amax) amax = std::fabs(e.out[k]);
        e_amax = std::max(e_amax, ey);
      }
      const double s = g.scales[i];
      CAPTURE(i, s, amax);
      REQUIRE(std::fabs(s - amax / qmax) <= s * (e_amax / amax + 2 * u32));
      for (std::size_t j = 0; j < hidden; ++j) {
        const std::size_t k = i * hidden + j;
        const double y = e.out[k], ey = e.out_tol[k] / 2;
        const double got = fp8_ref::decode(fp8_ref::params_of<F>(), g.out[k]) * s;
        const double tol = 2 * (ey + fused_ref::fp8_info<F>::u() * (std::fabs(y) + ey) +
                                s * fused_ref::fp8_info<F>::half_step() + u32 * std::fabs(y));
        if (!(std::fabs(got - y) <= tol)) {
          if (bad == 0) first = "code " + std::to_string(k) + ": " + std::to_string(got) + " vs " + std::to_string(y);
          ++bad;
        }
      }
    }
  } else {
    bad += fused_ref::mismatches(
        tokens * hidden, [&](std::size_t k) { return fused_ref::output_value<T, void>(g.out.data(), k, 0); }, e.out,
        e.out_tol, first, "output");
  }
  CAPTURE(first);
  REQUIRE(bad == 0);
}

}  // namespace

TEST_CASE("rows of any length: allreduce_rmsnorm and add_rmsnorm at hidden 1, 7, 1000, 4097", "[rows][rmsnorm]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  for (const std::size_t h : {std::size_t(1), std::size_t(7), std::size_t(1000), std::size_t(4097), std::size_t(1001)})
    for (const int n : {2, 3}) {
      rows_case<float, float>(n, h);
      rows_case<rcclx::bf16, rcclx::bf16>(n, h);
    }
}

TEST_CASE("per-token FP8: allreduce_rmsnorm with Out = per_token<F>", "[rows][rmsnorm][fp8]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  namespace f8 = rcclx::fp8;
  for (const std::size_t h : {std::size_t(1), std::size_t(7), std::size_t(1000), std::size_t(1024), std::size_t(4097)})
    for (const int n : {2, 3}) {
      rows_case<rcclx::bf16, fz::per_token<f8::e4m3>>(n, h);
      rows_case<float, fz::per_token<f8::e5m2>>(n, h);
      rows_case<rcclx::bf16, fz::per_token<f8::e4m3_fnuz>>(n, h);
    }
  for (const std::size_t h : {std::size_t(7), std::size_t(4097)}) {
    rows_case<rcclx::bf16, fz::per_token<f8::e5m2_fnuz>>(8, h);
    rows_case<float, float>(8, h);
  }
}

TEST_CASE("rows of any length: workspace sizes and region needs", "[rows][rmsnorm]") {
  using bf = rcclx::bf16;
  // Whole vectors: 2 * round16(S) flat, 2 * (S + round16(S) + round16(4 tokens)) tree, as before.
  REQUIRE(fz::allreduce_rmsnorm_workspace_bytes<bf>(4, 1024, algorithm::flat) == 2u * 8192u);
  REQUIRE(fz::allreduce_rmsnorm_workspace_bytes<bf>(4, 1024, algorithm::tree) == 2u * (8192u + 8192u + 16u));
  // hidden 7 (bf16): rows padded to 8 elements.
  REQUIRE(fz::allreduce_rmsnorm_workspace_bytes<bf>(4, 7, algorithm::flat) == 2u * 64u);
  REQUIRE(fz::allreduce_rmsnorm_workspace_bytes<bf>(4, 7, algorithm::tree) == 2u * (64u + 64u + 16u));
  // hidden 4097 (float): padded to 4100.
  REQUIRE(fz::allreduce_rmsnorm_workspace_bytes<float>(3, 4097, algorithm::flat) == 2u * 49200u);
  const auto a = fz::allreduce_rmsnorm_need<bf>(4, 7, algorithm::automatic);
  REQUIRE((a.bytes == 2u * (64u + 64u + 16u) && a.max_tiles == 4 && a.sized_for == 3u));
  const auto f = fz::allreduce_rmsnorm_need<bf, fz::per_token<rcclx::fp8::e4m3>>(4, 7, algorithm::flat);
  REQUIRE((f.bytes == 128u && f.sized_for == 1u));
  REQUIRE(fz::allreduce_rmsnorm_need<bf>(4, 7, algorithm::tree).sized_for == 2u);
}
