// rcclx::fused::allreduce_rmsnorm and add_rmsnorm, the host launchers for ONE rank, called once per
// rank as separate processes would: from one std::thread per rank on the host backend (each runs
// its rank's blocks as threads, back-to-back calls at its own pace, so a fast rank is a call ahead
// of a slow one: the alternating buffer halves and the row epochs are what keeps them apart), or
// one stream per rank on a GPU. Both table overloads; every validation error.
#include <rcclx/fused/add_rmsnorm.hpp>
#include <rcclx/fused/allreduce_rmsnorm.hpp>
#include <rcclx/testing/emulated_world.hpp>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../support/catch.hpp"
#include "reference.hpp"

namespace {

namespace fz = rcclx::fused;
using rcclx::algorithm;
using T = rcclx::bf16;
constexpr int max_r = 8;
constexpr bool on_host = rcclx::current_backend == rcclx::backend::host;
#if defined(__SANITIZE_THREAD__)
constexpr bool tsan = true;
#else
constexpr bool tsan = false;
#endif

// Kernels of different ranks must run concurrently on one GPU; compute-sanitizer serialises them.
bool concurrent_kernels_possible() { return on_host || !rcclx_test::quick(); }
// Few blocks per rank on a GPU, so that every rank's kernel fits on the device at once.
int blocks_per_rank() { return on_host ? 0 : 4; }

struct rank_runner {
  int n;
  std::vector<rcclx::gpu::stream_t> streams;
  explicit rank_runner(int num_ranks) : n(num_ranks) {
    for (int r = 0; r < n; ++r) streams.push_back(on_host ? nullptr : rcclx::gpu::stream_create());
  }
  ~rank_runner() {
    for (auto s : streams) rcclx::gpu::stream_destroy(s);
  }
  void run(const std::function<void(int, rcclx::gpu::stream_t)>& fn) {
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
    for (int r = 0; r < n; ++r) fn(r, streams[r]);
    rcclx::gpu::device_synchronize();
#endif
  }
};

// Device buffers of one problem for every rank, and its reference.
struct problem_buffers {
  std::size_t tokens, hidden;
  std::vector<T*> x, res, pristine, out;
  T* weight;
  fused_ref::rms_expected expected;
  std::vector<void*> owned;

  problem_buffers(int n, std::size_t tokens_, std::size_t hidden_, std::uint64_t seed)
      : tokens(tokens_), hidden(hidden_) {
    const std::size_t count = tokens * hidden;
    std::vector<std::vector<T>> hx(n, std::vector<T>(count));
    std::vector<T> hres(count), hw(hidden);
    for (int r = 0; r < n; ++r) rcclx_test::fill_random(hx[r], seed + r);
    rcclx_test::fill_random(hres, seed + 100);
    for (std::size_t j = 0; j < hidden; ++j) hw[j] = T(0.75f + 0.5f * static_cast<float>(j % 7) / 7.0f);
    expected = fused_ref::rmsnorm_reference<T>(hx, hres, hw, tokens, hidden, 1e-5);
    for (int r = 0; r < n; ++r) {
      x.push_back(upload(hx[r].data(), count));
      pristine.push_back(upload(hres.data(), count));
      res.push_back(upload(hres.data(), count));
      out.push_back(upload(nullptr, count));
    }
    weight = upload(hw.data(), hidden);
  }
  ~problem_buffers() {
    for (void* p : owned) rcclx::gpu::device_free(p);
  }
  T* upload(const T* src, std::size_t count) {
    owned.push_back(rcclx::gpu::device_malloc(count * sizeof(T)));
    if (src) rcclx::gpu::copy(owned.back(), src, count * sizeof(T));
    return static_cast<T*>(owned.back());
  }
  fz::rmsnorm_args<T> args(int r) const { return {x[r], res[r], weight, out[r], tokens, hidden, 1e-5f}; }

  // Rank r's output and new residual against the reference.
  void check(int r) const {
    const std::size_t count = tokens * hidden;
    std::vector<T> o(count), nr(count);
    rcclx::gpu::copy(o.data(), out[r], count * sizeof(T));
    rcclx::gpu::copy(nr.data(), res[r], count * sizeof(T));
    std::string first;
    const std::size_t bad =
        fused_ref::mismatches(count, [&](std::size_t k) { return fused_ref::exact(o[k]); }, expected.out,
                              expected.out_tol, first, "output") +
        fused_ref::mismatches(count, [&](std::size_t k) { return fused_ref::exact(nr[k]); }, expected.res,
                              expected.res_tol, first, "residual");
    if (bad) throw std::runtime_error("rank " + std::to_string(r) + ": " + std::to_string(bad) + " wrong, " + first);
  }
};

constexpr int barrier_blocks = 8;

}  // namespace

TEST_CASE("fused::allreduce_rmsnorm launcher: back-to-back calls, each rank at its own pace", "[fused][launcher]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  if (!concurrent_kernels_possible()) {
    WARN("compute-sanitizer serialises kernels: per-rank launches cannot meet; skipped");
    return;
  }
  const int n = 4;
  const std::size_t max_tokens = 33, hidden = 1032;
  const fz::tile_slots slots{barrier_blocks, static_cast<int>(max_tokens)};
  rcclx::testing::emulated_world<max_r> world(n, fz::allreduce_rmsnorm_workspace_bytes<T>(max_tokens, hidden, algorithm::tree),
                                              fz::pad_blocks_for(barrier_blocks, static_cast<int>(max_tokens)));
  std::vector<std::unique_ptr<problem_buffers>> problems;
  for (std::size_t p = 0; p < 3; ++p)
    problems.push_back(std::make_unique<problem_buffers>(n, std::vector<std::size_t>{1, 33, 5}[p], hidden, 10 * p + 1));
  // Fewer where every thread of a block runs on the host (ThreadSanitizer, emulated threads).
  const int calls = tsan || rcclx::emulate_threads ? 24 : (on_host ? 120 : 300);
  rank_runner runner(n);
  // Both table overloads; the algorithm and the shape change from call to call.
  const auto* device_tables = world.device_tables<T>();
  runner.run([&](int r, rcclx::gpu::stream_t s) {
    const auto table = world.table<T>(r);
    for (int c = 0; c < calls; ++c) {
      const problem_buffers& p = *problems[c % 3];
      rcclx::gpu::copy_async(p.res[r], p.pristine[r], p.tokens * hidden * sizeof(T), s);
      const algorithm algo = c % 4 == 1 ? algorithm::tree : (c % 4 == 3 ? algorithm::automatic : algorithm::flat);
      if (c % 2) fz::allreduce_rmsnorm(table, p.args(r), slots, algo, s, blocks_per_rank());
      else fz::allreduce_rmsnorm(device_tables + r, n, p.args(r), slots, algo, s, blocks_per_rank());
      if (on_host) p.check(r);  // this rank's result, while the others may be a call behind or ahead
    }
  });
  world.throw_if_error();
  for (int r = 0; r < n; ++r)
    for (const auto& p : problems) REQUIRE_NOTHROW(p->check(r));
}

TEST_CASE("fused::allreduce_rmsnorm launcher: the call quoted in docs/fusion.md", "[fused][launcher]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  if (!concurrent_kernels_possible()) return;
  const int n = 3;
  const std::size_t tokens = 7, hidden = 2048;
  problem_buffers p(n, tokens, hidden, 77);
  // [fusion-launcher-setup]
  // Every rank: a symmetric buffer big enough for either algorithm, and signal pads with room for
  // the barrier blocks of other collectives (8 here) plus 1 + max_tokens tile slots.
  const int max_tokens = 64;
  const rcclx::fused::tile_slots slots{8, max_tokens};
  rcclx::testing::emulated_world<8> world(
      n, rcclx::fused::allreduce_rmsnorm_workspace_bytes<rcclx::bf16>(max_tokens, hidden, rcclx::algorithm::tree),
      rcclx::fused::pad_blocks_for(8, max_tokens));
  // [fusion-launcher-setup]
  rank_runner runner(n);
  runner.run([&](int rank, rcclx::gpu::stream_t stream) {
    rcclx::bf16 *x = p.x[rank], *residual = p.res[rank], *out = p.out[rank], *weight = p.weight;
    // [fusion-launcher]
    // Each rank (process) calls the launcher with its own view of the buffers, on its stream:
    const rcclx::core::peer_table<rcclx::bf16, 8> table = world.table<rcclx::bf16>(rank);
    const rcclx::fused::rmsnorm_args<rcclx::bf16> args{x, residual, weight, out, tokens, hidden, 1e-5f};
    rcclx::fused::allreduce_rmsnorm(table, args, slots, rcclx::algorithm::automatic, stream, blocks_per_rank());
    // [fusion-launcher]
  });
  world.throw_if_error();
  for (int r = 0; r < n; ++r) REQUIRE_NOTHROW(p.check(r));
}

TEST_CASE("fused::add_rmsnorm launcher: the unfused second half", "[fused][launcher]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  // add_rmsnorm on the float64-exact sum: with one "rank", the AllReduce is the identity.
  problem_buffers p(1, 9, 2056, 5);
  fz::add_rmsnorm(p.args(0));
  rcclx::gpu::device_synchronize();
  REQUIRE_NOTHROW(p.check(0));
}

TEST_CASE("fused launchers: invalid arguments are clear errors", "[fused][launcher]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const int n = 2;
  const std::size_t tokens = 4, hidden = 1024;
  const fz::tile_slots slots{barrier_blocks, 8};
  rcclx::testing::emulated_world<max_r> world(n, fz::allreduce_rmsnorm_workspace_bytes<T>(8, hidden, algorithm::tree),
                                              fz::pad_blocks_for(barrier_blocks, 8));
  problem_buffers p(n, tokens, hidden, 3);
  const auto t = world.table<T>(0);
  auto error_of = [](auto&& f) -> std::pair<rcclx::errc, std::string> {
    try {
      f();
    } catch (const rcclx::error& e) {
      return {e.code(), e.what()};
    }
    return {rcclx::errc::ok, ""};
  };
  auto expect = [&](auto&& f, rcclx::errc code, const char* text) {
    const auto e = error_of(f);
    CAPTURE(e.second, text);
    REQUIRE(e.first == code);
    REQUIRE(e.second.find(text) != std::string::npos);
  };
  const auto good = p.args(0);
  auto with = [&](auto change) {
    auto a = good;
    change(a);
    return a;
  };
  // A good call is accepted (and computes: the other rank is not running, so only check acceptance
  // through a zero-token call).
  expect([&] { fz::allreduce_rmsnorm(t, with([](auto& a) { a.tokens = 0; }), slots); }, rcclx::errc::ok, "");
  // Any hidden in [1, max_hidden] is taken (rows that are not whole vectors: the rows kernels).
  expect([&] { fz::allreduce_rmsnorm(t, with([](auto& a) { a.hidden = 0; }), slots); }, rcclx::errc::invalid_argument,
         "hidden = 0 must be positive");
  expect([&] { fz::allreduce_rmsnorm(t, with([](auto& a) { a.hidden = 16392; }), slots); }, rcclx::errc::unsupported,
         "exceeds rcclx::fused::max_hidden = 16384");
  expect([&] { fz::allreduce_rmsnorm(t, with([](auto& a) { a.eps = -1.0f; }), slots); }, rcclx::errc::invalid_argument,
         "eps");
  expect([&] { fz::allreduce_rmsnorm(t, with([](auto& a) { a.input = nullptr; }), slots); },
         rcclx::errc::invalid_argument, "input must not be null");
  expect([&] { fz::allreduce_rmsnorm(t, with([](auto& a) { a.weight += 1; }), slots); }, rcclx::errc::misaligned,
         "weight");
  expect([&] { fz::allreduce_rmsnorm(t, with([&](auto& a) { a.output = a.residual; }), slots); },
         rcclx::errc::invalid_argument, "residual and output overlap");
  expect([&] { fz::allreduce_rmsnorm(t, with([&](auto& a) { a.input = world.table<T>(0).data[0]; }), slots); },
         rcclx::errc::invalid_argument, "symmetric buffer");
  expect([&] { fz::allreduce_rmsnorm(t, good, fz::tile_slots{barrier_blocks, 3}); }, rcclx::errc::invalid_argument,
         "num_tiles = 4 is outside [0, 3]");
  expect([&] { fz::allreduce_rmsnorm(t, good, fz::tile_slots{barrier_blocks + 1, 8}); }, rcclx::errc::invalid_argument,
         "max_blocks = 17");
  // A symmetric buffer sized for flat is too small for tree (which also holds the published rows).
  rcclx::testing::emulated_world<max_r> small(n, fz::allreduce_rmsnorm_workspace_bytes<T>(tokens, hidden, algorithm::flat),
                                              fz::pad_blocks_for(barrier_blocks, 8));
  expect([&] { fz::allreduce_rmsnorm(small.table<T>(0), good, slots, algorithm::tree); }, rcclx::errc::invalid_argument,
         "bytes of symmetric buffer");
  expect([&] { fz::allreduce_rmsnorm(t, good, slots, algorithm::low_precision); }, rcclx::errc::unsupported,
         "low_precision");
  expect([&] { fz::allreduce_rmsnorm(t, good, slots, static_cast<algorithm>(9)); }, rcclx::errc::invalid_argument,
         "not an rcclx::algorithm");
  expect([&] { fz::allreduce_rmsnorm(t, good, slots, algorithm::flat, {}, -1); }, rcclx::errc::invalid_argument,
         "num_blocks = -1");
  expect([&] { fz::allreduce_rmsnorm(static_cast<const rcclx::core::peer_table<T, max_r>*>(nullptr), n, good, slots); },
         rcclx::errc::invalid_argument, "device_table is null");
  expect([&] { fz::allreduce_rmsnorm(world.device_tables<T>(), 1, good, slots); }, rcclx::errc::invalid_argument,
         "num_ranks = 1");
  // FP8 output needs its scale.
  fz::rmsnorm_args<T, rcclx::fp8::e4m3> q{good.input, good.residual, good.weight,
                                         reinterpret_cast<std::uint8_t*>(good.output), tokens, hidden, 1e-5f, nullptr};
  expect([&] { fz::allreduce_rmsnorm(t, q, slots); }, rcclx::errc::invalid_argument, "scale");
  expect([&] { fz::add_rmsnorm(q); }, rcclx::errc::invalid_argument, "scale");
  expect([&] { fz::add_rmsnorm(with([](auto& a) { a.hidden = 0; })); }, rcclx::errc::invalid_argument, "hidden = 0");
  // Per-token FP8 output needs its scales array and a positive qmax.
  fz::rmsnorm_args<T, fz::per_token<rcclx::fp8::e4m3>> pt{good.input, good.residual, good.weight,
                                                          reinterpret_cast<std::uint8_t*>(good.output), tokens, hidden, 1e-5f};
  expect([&] { fz::allreduce_rmsnorm(t, pt, slots); }, rcclx::errc::invalid_argument, "token_scales");
  expect([&] { fz::add_rmsnorm(pt); }, rcclx::errc::invalid_argument, "token_scales");
  pt.token_scales = reinterpret_cast<float*>(const_cast<T*>(good.input));  // any 4-aligned array apart from output and residual
  pt.qmax = 0.0f;
  expect([&] { fz::add_rmsnorm(pt); }, rcclx::errc::invalid_argument, "qmax = 0");
}
