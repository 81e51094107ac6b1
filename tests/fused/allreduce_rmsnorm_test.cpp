// Fused AllReduce + residual add + RMSNorm (+ FP8 output) on emulated ranks: flat and tree against
// the float64 reference of tests/fused/reference.hpp, every rank bit-identical, flat == tree ==
// the unfused path (dda AllReduce, then fused::add_rmsnorm) bit for bit; ranks 2..8, odd token
// counts and row lengths; many back-to-back calls with changing shapes; counter wrap-around; a
// missing rank. The same source runs on the host backend and on a GPU.
#include <rcclx/fused/add_rmsnorm.hpp>
#include <rcclx/fused/allreduce_rmsnorm.hpp>
#include <rcclx/gpu/cluster.hpp>
#include <rcclx/testing/emulated_kernels.hpp>
#include <rcclx/testing/emulated_fused_kernels.hpp>
#include <rcclx/testing/emulated_world.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "../support/catch.hpp"
#include "reference.hpp"

namespace {

namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
using rcclx::algorithm;
constexpr int max_r = 8;
constexpr int barrier_blocks = 64;  // pad slots left to the DDA AllReduce of the unfused path
constexpr bool on_host = rcclx::current_backend == rcclx::backend::host;

#if defined(__SANITIZE_THREAD__)
constexpr bool tsan = true;
#else
constexpr bool tsan = false;
#endif
const bool quick = rcclx_test::quick();
// Fewer cases where every thread of a block runs on the host (ThreadSanitizer, emulated threads).
constexpr bool small = tsan || rcclx::emulate_threads;

template <class T, class F>
using out_t = fz::output_t<T, std::conditional_t<std::is_void<F>::value, T, F>>;
template <class T, class F>
using out_arg_t = std::conditional_t<std::is_void<F>::value, T, F>;

// Every rank's buffers for calls up to max_tokens x max_hidden, and the world underneath.
template <class T, class F>
struct bench_world {
  using O = out_t<T, F>;
  int n;
  std::size_t max_count;
  rt::emulated_world<max_r> world;
  fz::tile_slots slots;
  std::vector<T*> x, res, sum;
  std::vector<O*> out;
  T* weight = nullptr;
  float* scale = nullptr;
  std::vector<void*> owned;

  bench_world(int num_ranks, std::size_t max_tokens, std::size_t max_hidden, std::uint64_t timeout_ns = 0,
              rcclx::core::ll_layout ll = rcclx::core::default_ll_layout())
      : n(num_ranks), max_count(max_tokens * max_hidden),
        world(num_ranks, fz::allreduce_rmsnorm_workspace_bytes<T, out_arg_t<T, F>>(max_tokens, max_hidden, algorithm::tree),
              fz::pad_blocks_for(barrier_blocks, static_cast<int>(max_tokens)),
              timeout_ns ? timeout_ns : rcclx::core::default_timeout_ns, ll),
        slots{barrier_blocks, static_cast<int>(max_tokens)} {
    for (int r = 0; r < n; ++r) {
      x.push_back(alloc<T>(max_count));
      res.push_back(alloc<T>(max_count));
      sum.push_back(alloc<T>(max_count));
      out.push_back(alloc<O>(max_count));
    }
    weight = alloc<T>(max_hidden);
    scale = alloc<float>(1);
  }
  ~bench_world() {
    for (void* p : owned) rcclx::gpu::device_free(p);
  }
  template <class U>
  U* alloc(std::size_t count) {
    owned.push_back(rcclx::gpu::device_malloc(count * sizeof(U) + 16));
    return static_cast<U*>(owned.back());
  }
  std::vector<fz::rmsnorm_args<T, out_arg_t<T, F>>> args(std::size_t tokens, std::size_t hidden, bool unfused) const {
    std::vector<fz::rmsnorm_args<T, out_arg_t<T, F>>> a(n);
    for (int r = 0; r < n; ++r) a[r] = {unfused ? sum[r] : x[r], res[r], weight, out[r], tokens, hidden, 1e-5f, scale};
    return a;
  }
};

// One problem: inputs on the host and their reference.
template <class T>
struct problem {
  std::size_t tokens, hidden;
  std::vector<std::vector<T>> x;
  std::vector<T> residual, weight;
  double scale;
};

template <class T>
problem<T> make_problem(int n, std::size_t tokens, std::size_t hidden, std::uint64_t seed, double scale = 0.03) {
  problem<T> p{tokens, hidden, std::vector<std::vector<T>>(n, std::vector<T>(tokens * hidden)),
               std::vector<T>(tokens * hidden), std::vector<T>(hidden), scale};
  for (int r = 0; r < n; ++r) rcclx_test::fill_random(p.x[r], seed * 131 + r);
  rcclx_test::fill_random(p.residual, seed * 131 + 99);
  std::mt19937_64 g(seed);
  for (auto& w : p.weight) w = T(static_cast<float>(1.0 + 0.5 * (std::ldexp(static_cast<double>(g() >> 11), -53) - 0.5)));
  return p;
}

template <class T, class F>
void upload(bench_world<T, F>& w, const problem<T>& p) {
  for (int r = 0; r < w.n; ++r) {
    rcclx::gpu::copy(w.x[r], p.x[r].data(), p.x[r].size() * sizeof(T));
    rcclx::gpu::copy(w.res[r], p.residual.data(), p.residual.size() * sizeof(T));
    std::vector<unsigned char> poison(p.residual.size() * sizeof(out_t<T, F>), 0x5A);
    rcclx::gpu::copy(w.out[r], poison.data(), poison.size());
  }
  rcclx::gpu::copy(w.weight, p.weight.data(), p.weight.size() * sizeof(T));
  const float s = static_cast<float>(p.scale);
  rcclx::gpu::copy(w.scale, &s, sizeof(float));
}

// Outputs and new residuals of every rank, as raw bytes.
struct results {
  std::vector<std::vector<unsigned char>> out, res;
  bool operator==(const results& o) const { return out == o.out && res == o.res; }
};

template <class T, class F>
results download(const bench_world<T, F>& w, std::size_t count) {
  results r;
  for (int q = 0; q < w.n; ++q) {
    r.out.emplace_back(count * sizeof(out_t<T, F>));
    r.res.emplace_back(count * sizeof(T));
    rcclx::gpu::copy(r.out.back().data(), w.out[q], r.out.back().size());
    rcclx::gpu::copy(r.res.back().data(), w.res[q], r.res.back().size());
  }
  return r;
}

template <class T, class F>
results run_fused(bench_world<T, F>& w, const problem<T>& p, algorithm algo, int blocks = 0) {
  upload(w, p);
  const auto a = w.args(p.tokens, p.hidden, false);
  rt::launch_allreduce_rmsnorm<T, out_arg_t<T, F>, max_r>(w.world, a.data(), w.slots, algo, blocks);
  rcclx::gpu::device_synchronize();
  w.world.throw_if_error();
  return download(w, p.tokens * p.hidden);
}

// After a launch with a rank missing: the recorded error is a timeout of `what` naming `missing`.
template <class T, class F>
void require_timeout(const bench_world<T, F>& w, const char* what, const char* missing) {
  rcclx::gpu::device_synchronize();
  try {
    w.world.throw_if_error();
    FAIL("no error");
  } catch (const rcclx::error& e) {
    REQUIRE(e.code() == rcclx::errc::timeout);
    REQUIRE(std::string(e.what()).find(what) != std::string::npos);
    REQUIRE(std::string(e.what()).find(missing) != std::string::npos);
  }
}

// The unfused path with rcclx's own kernels: DDA flat AllReduce of x into sum, then add_rmsnorm.
template <class T, class F>
results run_unfused(bench_world<T, F>& w, const problem<T>& p) {
  upload(w, p);
  const std::size_t count = p.tokens * p.hidden;
  using ar = rt::emulated_allreduce<rcclx::core::op_sum, algorithm::flat, T, max_r>;
  rt::rank_buffers<T, max_r> b{};
  for (int r = 0; r < w.n; ++r) {
    b.in[r] = w.x[r];
    b.out[r] = w.sum[r];
  }
  const int threads = rt::emulated_launch_config().threads;
  int nb = rcclx::dda::num_blocks_for<T>(count, algorithm::flat, w.n);
  nb = std::max(1, std::min({nb, barrier_blocks, rt::max_blocks_per_rank<ar>(w.n, threads)}));
  rt::launch_emulated(w.n, nb, threads, ar{w.world.template device_tables<T>(), b, count});
  const auto a = w.args(p.tokens, p.hidden, true);
  rt::launch_add_rmsnorm<T, out_arg_t<T, F>, max_r>(w.n, a.data());
  rcclx::gpu::device_synchronize();
  w.world.throw_if_error();
  return download(w, count);
}

// Rank 0 against the reference, every rank bit-identical to rank 0.
template <class T, class F>
void check(const results& got, const problem<T>& p, const fused_ref::rms_expected& e) {
  const std::size_t count = p.tokens * p.hidden;
  std::string first;
  const double s = p.scale;
  const std::size_t bad_out = fused_ref::mismatches(
      count, [&](std::size_t k) { return fused_ref::output_value<T, F>(got.out[0].data(), k, s); }, e.out, e.out_tol,
      first, "output");
  CAPTURE(first);
  REQUIRE(bad_out == 0);
  const std::size_t bad_res = fused_ref::mismatches(
      count, [&](std::size_t k) { return fused_ref::output_value<T, void>(got.res[0].data(), k, 0.0); }, e.res,
      e.res_tol, first, "residual");
  CAPTURE(first);
  REQUIRE(bad_res == 0);
  for (std::size_t r = 1; r < got.out.size(); ++r) {
    CAPTURE(r);
    REQUIRE(got.out[r] == got.out[0]);
    REQUIRE(got.res[r] == got.res[0]);
  }
}

template <class T, class F>
fused_ref::rms_expected reference_of(const problem<T>& p) {
  return fused_ref::rmsnorm_reference<T, F>(p.x, p.residual, p.weight, p.tokens, p.hidden, 1e-5,
                                            std::is_void<F>::value ? 0.0 : p.scale);
}

// flat, tree and unfused on one problem: all correct, all the same bits.
template <class T, class F>
void all_paths(bench_world<T, F>& w, const problem<T>& p) {
  const auto e = reference_of<T, F>(p);
  const results flat = run_fused(w, p, algorithm::flat);
  check<T, F>(flat, p, e);
  const results tree = run_fused(w, p, algorithm::tree);
  check<T, F>(tree, p, e);
  REQUIRE(tree == flat);
  const results unfused = run_unfused(w, p);
  check<T, F>(unfused, p, e);
  REQUIRE(unfused == flat);
}

template <class T, class F>
void matrix(int n, const std::vector<std::size_t>& tokens_list, const std::vector<std::size_t>& hidden_list) {
  std::size_t max_t = 0, max_h = 0;
  for (auto t : tokens_list) max_t = std::max(max_t, t);
  for (auto h : hidden_list) max_h = std::max(max_h, h);
  bench_world<T, F> w(n, max_t, max_h);
  for (const std::size_t tokens : tokens_list) {
    for (const std::size_t hidden : hidden_list) {
      CAPTURE(n, tokens, hidden);
      all_paths(w, make_problem<T>(n, tokens, hidden, n * 1000 + tokens * 7 + hidden));
    }
  }
}

std::vector<std::size_t> hidden_sizes() {
  // 1024 + 8 and 1024 + 8 + 16 * 7: odd multiples of the vector width; 4096 + 8: several vectors per
  // thread on a GPU; 16384: the largest row (a GPU build only: 4 or 8 vectors per thread).
  // Emulated threads: 4104, several vectors per thread of a 512-thread block, as on a GPU.
  if (rcclx::emulate_threads) return {1032, 4104};
  if (on_host) return tsan ? std::vector<std::size_t>{1032} : std::vector<std::size_t>{1032, 1144};
  if (quick) return {1032};
  return {1032, 4104, 16384};
}

}  // namespace

TEMPLATE_TEST_CASE("fused allreduce_rmsnorm: flat, tree and unfused against float64, ranks 2..8", "[fused]", float,
                   rcclx::bf16) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = TestType;
  const int n = quick ? GENERATE(2, 8) : small ? GENERATE(2, 3, 8) : GENERATE(2, 3, 4, 5, 6, 7, 8);
  matrix<T, void>(n, {1, 3, 17}, hidden_sizes());
}

TEMPLATE_TEST_CASE("fused allreduce_rmsnorm: FP8 output (e4m3, e4m3_fnuz, e5m2)", "[fused][fp8]", float, rcclx::bf16) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = TestType;
  const int n = GENERATE(2, 5, 8);
  if (quick && n == 5) return;
  matrix<T, rcclx::fp8::e4m3>(n, {1, 17}, {1032});
  matrix<T, rcclx::fp8::e4m3_fnuz>(n, {3}, {1032});
  matrix<T, rcclx::fp8::e5m2>(n, {3}, {1032});
}

namespace {
// LL regions large enough for every cluster case here (on GPUs 64 x 64 KiB).
constexpr rcclx::core::ll_layout big_ll{on_host ? 8 : 64, 64 * 1024};

// True (with a warning naming the case) where the device has no thread-block clusters.
bool skip_without_clusters() {
  if (rcclx::gpu::clusters_available()) return false;
  WARN("no thread-block clusters (CUDA sm_90+ only): skipping " << Catch::getResultCapture().getCurrentTestName());
  return true;
}
}  // namespace

// The decode path on CUDA sm_90 (fused/allreduce_rmsnorm_cluster.hpp): each row over a cluster of
// blocks. The launcher must take it where it applies (a silent fallback would hide it from every
// other test), and give the bits of the tile-flag flat kernel (RCCLX_RMSNORM_CLUSTER=0) and the float64 bounds.
template <class T>
void cluster_against_tile(int n, std::size_t tokens, std::size_t hidden) {
  CAPTURE(n, tokens, hidden);
  bench_world<T, void> w(n, tokens, hidden);
  const auto p = make_problem<T>(n, tokens, hidden, n * 31 + tokens * 7 + hidden);
  upload(w, p);
  const auto a = w.args(tokens, hidden, false);
  rt::fused_launch_info info;
  const int used =
      rt::launch_allreduce_rmsnorm<T, T, max_r>(w.world, a.data(), w.slots, algorithm::flat, 0, {}, &info);
  rcclx::gpu::device_synchronize();
  w.world.throw_if_error();
  // The cluster kernel ran: one cluster per row (or per two rows where one per row cannot all be
  // resident) of 8 blocks (two vectors per logical thread, one per block thread), 4, 2, or one
  // block of 512 threads (one row each).
  CAPTURE(used, info.cluster_blocks, info.cluster_threads, info.rows_per_cluster);
  REQUIRE(info.blocks_per_rank == used);
  REQUIRE((info.cluster_blocks == 2 * fz::rmsnorm_cluster_blocks || info.cluster_blocks == fz::rmsnorm_cluster_blocks ||
           info.cluster_blocks == 2 || (info.cluster_blocks == 1 && info.rows_per_cluster == 1)));
  REQUIRE(info.rows_per_cluster >= 1);
  REQUIRE(info.rows_per_cluster <= fz::rmsnorm_cluster_max_rows<1>);
  const std::size_t groups = (tokens + static_cast<std::size_t>(info.rows_per_cluster) - 1) /
                             static_cast<std::size_t>(info.rows_per_cluster);
  REQUIRE(used == static_cast<int>(groups) * info.cluster_blocks);
  const results cluster = download(w, tokens * hidden);
  check<T, void>(cluster, p, reference_of<T, void>(p));
  setenv("RCCLX_RMSNORM_CLUSTER", "0", 1);
  const results tile = run_fused(w, p, algorithm::flat);
  unsetenv("RCCLX_RMSNORM_CLUSTER");
  REQUIRE(tile == cluster);
}

TEST_CASE("fused allreduce_rmsnorm: the cluster kernel equals the tile-flag flat kernel", "[fused][cluster]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  if (skip_without_clusters()) return;
  // Shapes whose clusters are all resident at once on an H200 with 8 emulated ranks: 8 rows x 8 ranks
  // in clusters of 4, 16 rows x 8 ranks at hidden 4096 only in one block of 512 threads per row, 31
  // rows with two per cluster of 2 x 256; hidden 8192 (two vectors per logical thread) in clusters of 8 x 128
  // threads, one vector each.
  for (const int n : {2, 5, 8})
    for (const std::size_t tokens : {1, 3})
      for (const std::size_t hidden : {1032, 4096, 8192}) cluster_against_tile<rcclx::bf16>(n, tokens, hidden);
  cluster_against_tile<rcclx::bf16>(8, 8, 4096);
  cluster_against_tile<rcclx::bf16>(8, 16, 4096);
  cluster_against_tile<rcclx::bf16>(8, 31, 4096);  // two rows per cluster (one cluster has one)
  cluster_against_tile<float>(8, 2, 4104);
}

#if RCCLX_BACKEND_CUDA
namespace {

// The emulated cluster kernel of one shape, with the blocks of rank `absent` (if any) leaving at once.
template <int VPT, int CB, int KS, class T>
__global__ void __launch_bounds__(rt::emulated_fused_threads * KS / CB)
    cluster_kernel_without(rt::emulated_cluster_params<T, T, max_r> p, int absent) {
  if (static_cast<int>(blockIdx.x) / p.blocks_per_rank != absent) rt::emulated_cluster_body<VPT, CB, KS>(p);
}

// Runs that shape with `groups` clusters per rank: cluster q takes rows q, q + groups, ..., so
// groups < tokens puts several rows (and the exchange slots' reuse) in one cluster.
template <int VPT, int CB, int KS, class T>
void launch_cluster_shape(bench_world<T, void>& w, const problem<T>& p, int groups, int absent = -1) {
  upload(w, p);
  const auto a = w.args(p.tokens, p.hidden, false);
  rt::emulated_cluster_params<T, T, max_r> c{};
  c.tables = w.world.template device_tables<T>();
  for (int r = 0; r < w.n; ++r) c.args[r] = a[r];
  c.blocks_per_rank = groups * CB;
  REQUIRE(fz::rmsnorm_cluster_fits<T>(w.world.template table<T>(0).signals, p.tokens, p.hidden, groups, CB));
  rcclx::gpu::launch_clusters(cluster_kernel_without<VPT, CB, KS, T>, w.n * c.blocks_per_rank,
                              rt::emulated_fused_threads * KS / CB, CB, rcclx::gpu::stream_t{}, c, absent);
}

template <int VPT, int CB, int KS>
void cluster_shape_rows(int n, std::size_t tokens, std::size_t hidden) {
  using T = rcclx::bf16;
  bench_world<T, void> w(n, tokens, hidden, 0, big_ll);
  const auto p = make_problem<T>(n, tokens, hidden, 40 + CB * 3 + KS);
  setenv("RCCLX_RMSNORM_CLUSTER", "0", 1);
  const results tile = run_fused(w, p, algorithm::flat);
  unsetenv("RCCLX_RMSNORM_CLUSTER");
  for (const int groups : {1, 2, static_cast<int>(tokens)}) {
    CAPTURE(n, tokens, hidden, CB, KS, groups);
    launch_cluster_shape<VPT, CB, KS>(w, p, groups);
    rcclx::gpu::device_synchronize();
    w.world.throw_if_error();
    const results r = download(w, tokens * hidden);
    check<T, void>(r, p, reference_of<T, void>(p));
    REQUIRE(r == tile);
  }
}
}  // namespace

TEST_CASE("fused allreduce_rmsnorm: every cluster shape, several rows per cluster", "[fused][cluster]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  if (skip_without_clusters()) return;
  // Five rows: with one or two clusters per rank a cluster reuses its two exchange slots (rows
  // m and m + 2), the mbarrier phases alternating; with five, one row each.
  for (const int n : {3, 8}) {
    cluster_shape_rows<1, 1, 1>(n, 5, 4096);
    cluster_shape_rows<1, 2, 1>(n, 5, 4096);
    cluster_shape_rows<1, 4, 1>(n, 5, 4096);
    cluster_shape_rows<2, 8, 2>(n, 5, 8192);
    cluster_shape_rows<2, 2, 2>(n, 5, 8192);
    cluster_shape_rows<2, 4, 1>(n, 5, 8192);
    cluster_shape_rows<2, 2, 1>(n, 5, 8192);
  }
}

TEST_CASE("fused allreduce_rmsnorm: the cluster kernel with a rank that never arrives names it and writes nothing",
          "[fused][cluster]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  if (skip_without_clusters()) return;
  using T = rcclx::bf16;
  const int n = 4, absent = 2;
  const std::size_t tokens = 3;
  for (const int groups : {1, 3}) {
    for (const int shape : {0, 1, 2}) {  // 2 x 256 and 1 x 512 at 4096, 2 x 512 (KSplit 2) at 8192
      const std::size_t hidden = shape < 2 ? 4096 : 8192;
      CAPTURE(groups, shape, hidden);
      bench_world<T, void> w(n, tokens, hidden, rcclx_test::absent_timeout_ns, big_ll);
      const auto p = make_problem<T>(n, tokens, hidden, 7);
      if (shape == 0) launch_cluster_shape<1, 2, 1>(w, p, groups, absent);
      else if (shape == 1) launch_cluster_shape<1, 1, 1>(w, p, groups, absent);
      else launch_cluster_shape<2, 2, 2>(w, p, groups, absent);
      require_timeout(w, "LL packet", "waiting for rank 2");
      // Every rank that ran skipped its stores: the residuals are as uploaded, the outputs untouched.
      const results r = download(w, tokens * hidden);
      std::vector<unsigned char> res0(tokens * hidden * sizeof(T)), poison(tokens * hidden * sizeof(T), 0x5A);
      std::memcpy(res0.data(), p.residual.data(), res0.size());
      for (int q = 0; q < n; ++q) {
        CAPTURE(q);
        REQUIRE(r.res[q] == res0);
        REQUIRE(r.out[q] == poison);
      }
      w.world.reset();
      check<T, void>(run_fused(w, p, algorithm::flat), p, reference_of<T, void>(p));  // usable again after reset
    }
  }
}
#endif

TEST_CASE("fused allreduce_rmsnorm: FP8 output saturates", "[fused][fp8]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = rcclx::bf16;
  bench_world<T, rcclx::fp8::e4m3> w(4, 5, 1032);
  // Scale 1/1000: every |value| above 0.448 saturates to 448 (0x7E / 0xFE).
  auto p = make_problem<T>(4, 5, 1032, 5, 1.0 / 1000);
  all_paths(w, p);
  const results r = run_fused(w, p, algorithm::flat);
  int saturated = 0;
  for (unsigned char c : r.out[0]) saturated += (c & 0x7F) == 0x7E;
  REQUIRE(saturated > 100);
}

TEST_CASE("fused allreduce_rmsnorm: prefill shapes", "[fused][large]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = rcclx::bf16;
  const std::size_t tokens = on_host ? (tsan ? 40 : 130) : (quick ? 64 : 2049);
  const std::size_t hidden = on_host ? 1032 : 4096;
  bench_world<T, void> w(8, tokens, hidden);
  all_paths(w, make_problem<T>(8, tokens, hidden, 77));
}

TEST_CASE("fused allreduce_rmsnorm: explicit block counts", "[fused]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = float;
  const std::size_t tokens = 23, hidden = 1032;
  bench_world<T, void> w(3, tokens, hidden);
  const auto p = make_problem<T>(3, tokens, hidden, 3);
  const auto e = reference_of<T, void>(p);
  const results ref = run_fused(w, p, algorithm::flat);
  for (const int blocks : on_host ? std::vector<int>{1, 2, 4} : std::vector<int>{1, 5, 16}) {
    for (const algorithm algo : {algorithm::flat, algorithm::tree}) {
      CAPTURE(blocks, rcclx::to_string(algo));
      const results r = run_fused(w, p, algo, blocks);
      check<T, void>(r, p, e);
      REQUIRE(r == ref);
    }
  }
}

TEST_CASE("fused allreduce_rmsnorm: back-to-back calls with changing shapes and algorithms", "[fused]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = rcclx::bf16;
  const int n = on_host ? 4 : 8;
  const int calls = rcclx_test::scaled(small ? 40 : (on_host ? 300 : 1000));
  const std::vector<std::size_t> tokens_list{1, 2, 5, 17, 64};
  const std::vector<std::size_t> hidden_list{1032, 2048, 1144};
  bench_world<T, void> w(n, 64, 2048);
  // A few problems per shape; calls cycle through them so that stale data from any earlier call
  // (a half reused too early, a flag satisfied by an old epoch) would show as a wrong row.
  std::vector<problem<T>> problems;
  std::vector<fused_ref::rms_expected> expected;
  for (std::size_t s = 0; s < 9; ++s) {
    problems.push_back(make_problem<T>(n, tokens_list[s % 5], hidden_list[s % 3], 500 + s));
    expected.push_back(reference_of<T, void>(problems.back()));
  }
  std::mt19937 g(3);
  for (int c = 0; c < calls; ++c) {
    const std::size_t s = g() % problems.size();
    const algorithm algo = (g() % 3 == 0) ? algorithm::tree : algorithm::flat;
    CAPTURE(c, s, rcclx::to_string(algo));
    const results r = run_fused(w, problems[s], algo);
    if (on_host || c % 8 == 0) check<T, void>(r, problems[s], expected[s]);
  }
}

TEST_CASE("fused allreduce_rmsnorm: counters wrap around 2^32", "[fused]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = float;
  bench_world<T, void> w(3, 9, 1032);
  w.world.reset(0xFFFFFFFFu - 4u);  // the call counter and the row flags cross 2^32 below
  for (int c = 0; c < 12; ++c) {
    CAPTURE(c);
    const auto p = make_problem<T>(3, 1 + c % 9, 1032, 900 + c);
    check<T, void>(run_fused(w, p, c % 2 ? algorithm::tree : algorithm::flat), p, reference_of<T, void>(p));
  }
}

TEST_CASE("fused allreduce_rmsnorm: a rank that never arrives is a timeout error naming it", "[fused]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = float;
  const int n = 4, absent = 2;
  const std::size_t tokens = 6, hidden = 1032;
  for (const algorithm algo : {algorithm::flat, algorithm::tree}) {
    CAPTURE(rcclx::to_string(algo));
    bench_world<T, void> w(n, tokens, hidden, rcclx_test::absent_timeout_ns);
    const auto p = make_problem<T>(n, tokens, hidden, 1);
    upload(w, p);
    const auto a = w.args(tokens, hidden, false);
    rt::with_emulated_rmsnorm<T, T, max_r>(algo, hidden, [&](auto k) {
      using kernel = decltype(k);
      kernel f{};
      f.tables = w.world.template device_tables<T>();
      for (int r = 0; r < n; ++r) f.args[r] = a[r];
      f.slots = w.slots;
      rt::launch_emulated(n, 2, rt::emulated_fused_threads, rt::without_rank(f, absent));
    });
    require_timeout(w, "tile barrier", "waiting for rank 2");
    w.world.reset();
    check<T, void>(run_fused(w, p, algo), p, reference_of<T, void>(p));  // usable again after reset
  }
}
