// The per-rank host launchers of the LPC and plain collectives (lpc::allreduce, dda::allgather, ...),
// called once per rank as separate processes would (threads on the host, one stream per rank on a
// GPU), both table overloads; back-to-back calls with changing counts at each rank's own pace;
// workspace_bytes; every validation error; run-time selection from the environment.
#include <rcclx/dda/allgather.hpp>
#include <rcclx/dda/alltoall.hpp>
#include <rcclx/dda/reduce_scatter.hpp>
#include <rcclx/lpc/allgather.hpp>
#include <rcclx/lpc/allreduce.hpp>
#include <rcclx/lpc/alltoall.hpp>
#include <rcclx/lpc/reduce_scatter.hpp>
#include <rcclx/lpc/select.hpp>
#include <rcclx/testing/emulated_world.hpp>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "../support/catch.hpp"
#include "../support/launchers.hpp"
#include "../support/rank_runner.hpp"
#include "common.hpp"

namespace {

using namespace lpc_test;
constexpr int mr = 8;

// Device input and output buffers of every rank, and the host copy of the inputs.
template <class T>
struct rank_data {
  std::vector<std::vector<T>> host_in;
  std::vector<T*> in, out;
  std::size_t out_count;
  rank_data(int n, std::size_t count, std::size_t out_elems, std::uint64_t seed)
      : host_in(n), in(n), out(n), out_count(out_elems) {
    for (int r = 0; r < n; ++r) {
      std::mt19937_64 g(seed + static_cast<std::uint64_t>(r));
      host_in[r].resize(count);
      for (auto& x : host_in[r]) x = value_of<T>(g, 1, n);
      in[r] = static_cast<T*>(rcclx::gpu::device_malloc(count * sizeof(T) + 16));
      out[r] = static_cast<T*>(rcclx::gpu::device_malloc(out_elems * sizeof(T) + 16));
      rcclx::gpu::copy(in[r], host_in[r].data(), count * sizeof(T));
      std::vector<unsigned char> poison(out_elems * sizeof(T), 0x5A);
      rcclx::gpu::copy(out[r], poison.data(), poison.size());
    }
  }
  ~rank_data() {
    for (auto p : in) rcclx::gpu::device_free(p);
    for (auto p : out) rcclx::gpu::device_free(p);
  }
  std::vector<T> output(int r) const {
    std::vector<T> o(out_count);
    rcclx::gpu::copy(o.data(), out[r], out_count * sizeof(T));
    return o;
  }
};

std::size_t out_elems(lpc::collective c, std::size_t count, int n) {
  const std::size_t nn = static_cast<std::size_t>(n);
  return c == lpc::collective::allgather ? count * nn : c == lpc::collective::reduce_scatter ? count / nn : count;
}

// Every rank's output against the model (LPC) or exactly / within the fp32 bound (plain).
template <class T>
void check(const rank_data<T>& d, lpc::collective c, bool low_precision, reduce_op op, const quant_model& m) {
  const int n = static_cast<int>(d.in.size());
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    std::vector<expect> want;
    if (c == lpc::collective::allreduce) want = allreduce(d.host_in, m, op);
    else if (c == lpc::collective::allgather) want = allgather(d.host_in, m);
    else if (c == lpc::collective::reduce_scatter) want = reduce_scatter(d.host_in, r, m, op);
    else want = alltoall(d.host_in, r, m);
    std::string first;
    if (!low_precision && c == lpc::collective::reduce_scatter) {
      // Plain: the DDA reference over rank r's block (fp32 accumulation bound, one rounding).
      const std::size_t b = d.host_in[0].size() / static_cast<std::size_t>(n);
      std::vector<std::vector<T>> block(n);
      for (int p = 0; p < n; ++p) block[p].assign(d.host_in[p].begin() + r * b, d.host_in[p].begin() + (r + 1) * b);
      REQUIRE(rcclx_test::count_mismatches(block, d.output(r), op, first) == 0);
      continue;
    }
    if (!low_precision)
      for (auto& e : want) e.tol = 0.0;  // plain AllGather / AlltoAll: exact copies
    first = first_violation(d.output(r), want);
    CAPTURE(first);
    REQUIRE(first.empty());
  }
}

}  // namespace

TEMPLATE_TEST_CASE("lpc and plain launchers: one call per rank, both table overloads", "[lpc][launcher]", float,
                   rcclx::bf16) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = TestType;
  if (!rcclx_test::concurrent_kernels_possible()) {
    WARN("kernels are serialised under compute-sanitizer: per-rank launches cannot meet; skipped");
    return;
  }
  const int n = GENERATE(2, 5, 8);
  const std::size_t nn = static_cast<std::size_t>(n);
  // Under ThreadSanitizer the largest size (minutes of instrumented element loops) is left out:
  // the same protocol paths run at 1001 already.
  for (const std::size_t base : {std::size_t{1}, std::size_t{1001}, std::size_t{40000}}) {
    if (base == 40000 && tsan) continue;
    for (const lpc::collective c : all_collectives) {
      const bool divisible = c == lpc::collective::reduce_scatter || c == lpc::collective::alltoall;
      const std::size_t count = divisible ? base * nn : base + 2;
      for (const bool low_precision : {true, false}) {
        if (!low_precision && c == lpc::collective::allreduce) continue;  // dda::allreduce: tests/dda
        for (const bool device_table : {false, true}) {
          CAPTURE(n, count, lpc::to_string(c), low_precision, device_table);
          const std::size_t cap = std::max(lpc::workspace_bytes<>(c, count, n), count * sizeof(T));
          rcclx::testing::emulated_world<mr> world(n, cap, 32);
          rank_data<T> d(n, count, out_elems(c, count, n), count * 3 + nn);
          rcclx_test::rank_runner runner(n);
          const int nb = rcclx_test::launcher_blocks_per_rank();
          runner.run([&](int r, rcclx::gpu::stream_t s) {
            const auto* dt = world.device_tables<T>() + r;
            const auto t = world.table<T>(r);
            const T* in = d.in[r];
            T* out = d.out[r];
            if (low_precision) {
              switch (c) {
                case lpc::collective::allreduce:
                  device_table ? lpc::allreduce(dt, n, in, out, count, reduce_op::sum, s, nb)
                               : lpc::allreduce(t, in, out, count, reduce_op::sum, s, nb);
                  break;
                case lpc::collective::allgather:
                  device_table ? lpc::allgather(dt, n, in, out, count, s, nb) : lpc::allgather(t, in, out, count, s, nb);
                  break;
                case lpc::collective::reduce_scatter:
                  device_table ? lpc::reduce_scatter(dt, n, in, out, count, reduce_op::sum, s, nb)
                               : lpc::reduce_scatter(t, in, out, count, reduce_op::sum, s, nb);
                  break;
                case lpc::collective::alltoall:
                  device_table ? lpc::alltoall(dt, n, in, out, count, s, nb) : lpc::alltoall(t, in, out, count, s, nb);
                  break;
              }
            } else {
              switch (c) {
                case lpc::collective::allgather:
                  device_table ? rcclx::dda::allgather(dt, n, in, out, count, s, nb)
                               : rcclx::dda::allgather(t, in, out, count, s, nb);
                  break;
                case lpc::collective::reduce_scatter:
                  device_table ? rcclx::dda::reduce_scatter(dt, n, in, out, count, reduce_op::sum, s, nb)
                               : rcclx::dda::reduce_scatter(t, in, out, count, reduce_op::sum, s, nb);
                  break;
                case lpc::collective::alltoall:
                  device_table ? rcclx::dda::alltoall(dt, n, in, out, count, s, nb)
                               : rcclx::dda::alltoall(t, in, out, count, s, nb);
                  break;
                default: break;
              }
            }
          });
          world.throw_if_error();
          check(d, c, low_precision, reduce_op::sum, model_of<lpc::default_config>());
        }
      }
    }
  }
}

TEST_CASE("lpc launchers: back-to-back calls with changing counts, each rank at its own pace", "[lpc][launcher]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  if (!rcclx_test::concurrent_kernels_possible()) {
    WARN("kernels are serialised under compute-sanitizer: per-rank launches cannot meet; skipped");
    return;
  }
  const int calls = tsan ? 30 : 300;
  const int n = 4;
  const std::size_t max_count = 12000;
  const std::size_t cap = std::max(lpc::workspace_bytes<>(lpc::collective::allgather, max_count, n),
                                   lpc::workspace_bytes<>(lpc::collective::allreduce, max_count, n));
  rcclx::testing::emulated_world<mr> world(n, cap, 32);
  rank_data<float> d(n, max_count, max_count * n, 7);
  std::vector<std::size_t> counts(calls);
  std::mt19937_64 g(11);
  for (auto& c : counts) c = g() % (max_count + 1);
  counts.back() = max_count - 5;
  rcclx_test::rank_runner runner(n);
  // Each rank issues its whole sequence without waiting for the others: the barriers alone pair
  // call k of every rank, and the FP8 slots of the buffer do not move with the count.
  runner.run([&](int r, rcclx::gpu::stream_t s) {
    for (int k = 0; k < calls; ++k) {
      const auto t = world.table<float>(r);
      if (k % 2 == 0 || k == calls - 1)
        lpc::allgather(t, d.in[r], d.out[r], counts[k], s, rcclx_test::launcher_blocks_per_rank());
      else
        lpc::allreduce(t, d.in[r], d.out[r], counts[k], reduce_op::sum, s, rcclx_test::launcher_blocks_per_rank());
    }
  });
  world.throw_if_error();
  for (auto& v : d.host_in) v.resize(counts.back());
  d.out_count = counts.back() * n;
  check(d, lpc::collective::allgather, true, reduce_op::sum, model_of<lpc::default_config>());
}

TEST_CASE("lpc::workspace_bytes is exactly what a call needs", "[lpc][launcher]") {
  for (const lpc::collective c : all_collectives) {
    for (const int n : {2, 3, 8, 16}) {
      for (const std::size_t base : {std::size_t{1}, std::size_t{31}, std::size_t{33}, std::size_t{100003}}) {
        const std::size_t count = c == lpc::collective::reduce_scatter || c == lpc::collective::alltoall
                                      ? base * static_cast<std::size_t>(n)
                                      : base;
        const std::size_t w = lpc::workspace_bytes<>(c, count, n);
        const int k = c == lpc::collective::allreduce ? n + 1 : c == lpc::collective::allgather ? 1 : n;
        // The slots of a buffer of exactly w bytes hold the call's largest chunk, those of w - 1 do not.
        const std::size_t chunk = lpc::detail::chunk_elems<32>(c, count, n);
        CAPTURE(lpc::to_string(c), n, count, w, chunk);
        REQUIRE(lpc::detail::slots<lpc::default_config>(w, k).elems >= chunk);
        REQUIRE(lpc::detail::slots<lpc::default_config>(w - 1, k).elems < chunk);
        // FP8 codes and fp32 scales: about 1.125 bytes per element (4.5x less than float, 1.8x bf16).
        if (count >= 100000) REQUIRE(w < count * 1.13 * (c == lpc::collective::allreduce ? (n + 1.0) / n : 1.0) + 4096);
      }
    }
  }
  REQUIRE(lpc::workspace_bytes<>(lpc::collective::allreduce, 0, 8) == 0);
}

TEST_CASE("lpc launchers: invalid arguments are clear errors", "[lpc][launcher]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const int n = 2;
  const std::size_t count = 1024;
  const std::size_t cap = lpc::workspace_bytes<>(lpc::collective::allreduce, count, n);
  // A short wait bound: a call that wrongly passes validation fails fast (rank 1 never calls).
  rcclx::testing::emulated_world<mr> world(n, cap, 4, 100ull * 1000 * 1000);
  const auto t = world.table<float>(0);
  float* in = static_cast<float*>(rcclx::gpu::device_malloc(8 * count * sizeof(float)));
  float* out = in + 4 * count;
  float* own = t.data[0];
  struct outcome {
    rcclx::errc code;
    std::string what;
  };
  auto attempt = [](auto&& f) {
    try {
      f();
    } catch (const rcclx::error& e) {
      return outcome{e.code(), e.what()};
    }
    return outcome{rcclx::errc::ok, ""};
  };
  auto expect_error = [](const outcome& o, rcclx::errc code, const char* text) {
    CAPTURE(o.what, text);
    REQUIRE(o.code == code);
    REQUIRE(o.what.find(text) != std::string::npos);
  };
  using rcclx::errc;
  // Capacity: named with both sizes.
  const std::string need = std::to_string(lpc::workspace_bytes<>(lpc::collective::allreduce, 4 * count, n));
  expect_error(attempt([&] { lpc::allreduce(t, in, out, 4 * count); }), errc::invalid_argument, need.c_str());
  expect_error(attempt([&] { lpc::allreduce(t, in, out, 4 * count); }), errc::invalid_argument,
               ("capacity of " + std::to_string(cap)).c_str());
  expect_error(attempt([&] { lpc::allgather(t, in, out, 2 * count); }), errc::invalid_argument, "workspace_bytes");
  // Counts that do not split into num_ranks blocks.
  expect_error(attempt([&] { lpc::reduce_scatter(t, in, out, 7); }), errc::invalid_argument,
               "count = 7 is not a multiple of num_ranks = 2");
  expect_error(attempt([&] { lpc::alltoall(t, in, out, 9); }), errc::invalid_argument, "not a multiple");
  expect_error(attempt([&] { rcclx::dda::alltoall(t, in, out, 9); }), errc::invalid_argument, "not a multiple");
  expect_error(attempt([&] { rcclx::dda::reduce_scatter(t, in, out, 9); }), errc::invalid_argument, "not a multiple");
  // Ops, alignment, overlaps, the symmetric buffer.
  expect_error(attempt([&] { lpc::allreduce(t, in, out, 4, static_cast<reduce_op>(9)); }), errc::invalid_argument,
               "op = 9");
  const float* odd = reinterpret_cast<const float*>(reinterpret_cast<const char*>(in) + 2);
  expect_error(attempt([&] { lpc::allreduce(t, odd, out, 4); }), errc::misaligned, "input");
  expect_error(attempt([&] { lpc::allreduce(t, in, in + 2, 4); }), errc::invalid_argument, "overlap partially");
  expect_error(attempt([&] { lpc::allgather(t, in + 4, in, 4); }), errc::invalid_argument, "must be disjoint");
  expect_error(attempt([&] { lpc::reduce_scatter(t, in, in, 4); }), errc::invalid_argument, "must be disjoint");
  expect_error(attempt([&] { lpc::allreduce(t, own, out, 4); }), errc::invalid_argument, "input lies in");
  expect_error(attempt([&] { lpc::allreduce(t, in, own + 8, 4); }), errc::invalid_argument, "output lies in");
  expect_error(attempt([&] { rcclx::dda::allgather(t, in, own, 4); }), errc::invalid_argument, "output overlaps");
  expect_error(attempt([&] { lpc::allreduce(t, in, out, 4, reduce_op::sum, {}, 5); }), errc::invalid_argument,
               "max_blocks = 4");
  expect_error(attempt([&] { lpc::alltoall(t, in, out, 4, {}, -1); }), errc::invalid_argument, "num_blocks = -1");
  // Tables.
  auto bad_table = t;
  bad_table.data[1] = reinterpret_cast<float*>(reinterpret_cast<char*>(bad_table.data[1]) + 4);
  expect_error(attempt([&] { lpc::allgather(bad_table, in, out, 4); }), errc::misaligned, "table.data[1]");
  auto one_rank = t;
  one_rank.signals.num_ranks = 1;
  expect_error(attempt([&] { lpc::allreduce(one_rank, in, out, 4); }), errc::invalid_argument, "num_ranks = 1");
  expect_error(attempt([&] { lpc::allreduce(world.device_tables<float>(), 9, in, out, 4); }), errc::invalid_argument,
               "num_ranks = 9");
  expect_error(attempt([&] { lpc::allgather(static_cast<const rcclx::core::peer_table<float, mr>*>(nullptr), 2, in, out, 4); }),
               errc::invalid_argument, "device_table is null");
  // A schedule that does not fit the rank count.
  using xr = lpc::config<lpc::default_format, 32, rcclx::fp8::scale_kind::fp32, rcclx::mesh::xor_pairs>;
  rcclx::testing::emulated_world<mr> three(3, cap, 4);
  expect_error(attempt([&] { lpc::allreduce<xr>(three.table<float>(0), in, out, 4); }), errc::unsupported,
               "num_ranks = 3");
  // count 0 is valid and does nothing (no barrier: every rank skips it alike).
  expect_error(attempt([&] { lpc::allreduce(t, in, out, 0); }), errc::ok, "");
  expect_error(attempt([&] { lpc::reduce_scatter(t, in, out, 0); }), errc::ok, "");
  rcclx::gpu::device_free(in);
}

namespace {
// Sets environment variables for one scope and restores the previous values.
struct scoped_env {
  std::vector<std::pair<std::string, std::string>> saved;
  std::vector<std::string> unset_later;
  void set(const char* name, const char* value) {
    if (const char* old = std::getenv(name)) saved.emplace_back(name, old);
    else unset_later.emplace_back(name);
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~scoped_env() {
    for (auto& kv : saved) setenv(kv.first.c_str(), kv.second.c_str(), 1);
    for (auto& k : unset_later) unsetenv(k.c_str());
  }
};
}  // namespace

TEST_CASE("lpc selection: RCCL_LOW_PRECISION_ENABLE* and RCCLX_LPC_MIN_BYTES", "[lpc][select]") {
  scoped_env env;
  const char* all[] = {"RCCL_LOW_PRECISION_ENABLE", "RCCL_LOW_PRECISION_ENABLE_ALLREDUCE",
                       "RCCL_LOW_PRECISION_ENABLE_ALLGATHER", "RCCL_LOW_PRECISION_ENABLE_REDUCESCATTER",
                       "RCCL_LOW_PRECISION_ENABLE_ALLTOALL", "RCCLX_LPC_MIN_BYTES"};
  for (const char* v : all) env.set(v, nullptr);
  const std::size_t big = 64u << 20, small = 1u << 20;
  // Off by default: automatic never picks low precision.
  for (const lpc::collective c : all_collectives) {
    REQUIRE_FALSE(lpc::enabled(c));
    REQUIRE(lpc::select_algorithm(c, big, 8) != algorithm::low_precision);
  }
  REQUIRE(lpc::resolve_algorithm<float>(lpc::collective::allgather, algorithm::automatic, big, 8) == algorithm::flat);
  REQUIRE(lpc::resolve_algorithm<float>(lpc::collective::alltoall, algorithm::tree, big, 8) == algorithm::flat);
  REQUIRE(lpc::resolve_algorithm<float>(lpc::collective::allreduce, algorithm::automatic, 16, 8) == algorithm::flat);
  // All four, above the default 16 MiB threshold only.
  env.set("RCCL_LOW_PRECISION_ENABLE", "1");
  for (const lpc::collective c : all_collectives) {
    REQUIRE(lpc::enabled(c));
    REQUIRE(lpc::select_algorithm(c, big, 8) == algorithm::low_precision);
    REQUIRE(lpc::select_algorithm(c, small, 8) != algorithm::low_precision);
    REQUIRE(lpc::select_algorithm(c, 16u << 20, 8) == algorithm::low_precision);
  }
  // Not for types the LPC collectives do not take; an explicit choice is kept.
  REQUIRE(lpc::resolve_algorithm<rcclx::fp16>(lpc::collective::allreduce, algorithm::automatic, big / 2, 8) !=
          algorithm::low_precision);
  REQUIRE(lpc::resolve_algorithm<float>(lpc::collective::allreduce, algorithm::tree, big, 8) == algorithm::tree);
  // A per-collective switch overrides the global one, either way.
  env.set("RCCL_LOW_PRECISION_ENABLE_ALLGATHER", "0");
  REQUIRE_FALSE(lpc::enabled(lpc::collective::allgather));
  REQUIRE(lpc::enabled(lpc::collective::alltoall));
  env.set("RCCL_LOW_PRECISION_ENABLE", "off");
  env.set("RCCL_LOW_PRECISION_ENABLE_REDUCESCATTER", "TRUE");
  REQUIRE(lpc::enabled(lpc::collective::reduce_scatter));
  REQUIRE_FALSE(lpc::enabled(lpc::collective::allreduce));
  // The threshold.
  env.set("RCCLX_LPC_MIN_BYTES", "1K");
  REQUIRE(lpc::min_bytes() == 1024);
  REQUIRE(lpc::use_low_precision(lpc::collective::reduce_scatter, 1024));
  REQUIRE_FALSE(lpc::use_low_precision(lpc::collective::reduce_scatter, 1023));
  // Bad values are errors naming the variable.
  env.set("RCCLX_LPC_MIN_BYTES", "lots");
  try {
    (void)lpc::min_bytes();
    FAIL("no error");
  } catch (const rcclx::error& e) {
    REQUIRE(std::string(e.what()).find("RCCLX_LPC_MIN_BYTES") != std::string::npos);
  }
  env.set("RCCL_LOW_PRECISION_ENABLE_ALLTOALL", "maybe");
  try {
    (void)lpc::enabled(lpc::collective::alltoall);
    FAIL("no error");
  } catch (const rcclx::error& e) {
    REQUIRE(e.code() == rcclx::errc::invalid_argument);
    REQUIRE(std::string(e.what()).find("RCCL_LOW_PRECISION_ENABLE_ALLTOALL = 'maybe'") != std::string::npos);
  }
}

TEST_CASE("lpc selection: emulated_peers' automatic follows the environment", "[lpc][select]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  scoped_env env;
  env.set("RCCL_LOW_PRECISION_ENABLE", nullptr);
  env.set("RCCL_LOW_PRECISION_ENABLE_ALLREDUCE", nullptr);
  env.set("RCCL_LOW_PRECISION_ENABLE_ALLGATHER", nullptr);
  env.set("RCCLX_LPC_MIN_BYTES", "4K");
  peers_t<float> peers(4, 4096);  // 16 KiB per rank
  fill_all(peers, 0, 1);
  peers.allreduce();
  REQUIRE(peers.last_algorithm() != algorithm::low_precision);
  env.set("RCCL_LOW_PRECISION_ENABLE_ALLREDUCE", "1");
  peers.allreduce();
  REQUIRE(peers.last_algorithm() == algorithm::low_precision);
  check_lpc(peers, lpc::collective::allreduce, reduce_op::sum, model_of<lpc::default_config>());
  peers.allgather();
  REQUIRE(peers.last_algorithm() == algorithm::flat);
  env.set("RCCL_LOW_PRECISION_ENABLE", "1");
  peers.allgather();
  REQUIRE(peers.last_algorithm() == algorithm::low_precision);
  env.set("RCCLX_LPC_MIN_BYTES", "1M");
  peers.allgather();
  REQUIRE(peers.last_algorithm() == algorithm::flat);
}
