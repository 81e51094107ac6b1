// rcclx::dda::allreduce, the host launcher for ONE rank, called once per rank as separate
// processes would: on the host backend from one std::thread per rank (each launcher runs its
// rank's blocks as threads), on a GPU from one stream per rank (the ranks' kernels run
// concurrently on one device). Both table overloads, back-to-back calls, every validation error.
#include <rcclx/dda/allreduce.hpp>
#include <rcclx/testing/emulated_world.hpp>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../support/catch.hpp"
#include "../support/launchers.hpp"
#include "../support/rank_runner.hpp"
#include "reference.hpp"

namespace {

using rcclx::algorithm;
using rcclx::reduce_op;
constexpr int max_r = 8;

using rcclx_test::rank_runner;
int blocks_per_rank() { return rcclx_test::launcher_blocks_per_rank(); }
using rcclx_test::concurrent_kernels_possible;

template <class T>
struct rank_data {
  std::vector<std::vector<T>> host_in;
  std::vector<T*> in, out;
  rank_data(int n, std::size_t count, std::uint64_t seed) : host_in(n), in(n), out(n) {
    for (int r = 0; r < n; ++r) {
      host_in[r].resize(count);
      rcclx_test::fill_random(host_in[r], seed + r);
      in[r] = static_cast<T*>(rcclx::gpu::device_malloc(count * sizeof(T)));
      out[r] = static_cast<T*>(rcclx::gpu::device_malloc(count * sizeof(T)));
      rcclx::gpu::copy(in[r], host_in[r].data(), count * sizeof(T));
      std::vector<unsigned char> poison(count * sizeof(T), 0x5A);
      rcclx::gpu::copy(out[r], poison.data(), poison.size());
    }
  }
  ~rank_data() {
    for (auto p : in) rcclx::gpu::device_free(p);
    for (auto p : out) rcclx::gpu::device_free(p);
  }
  void check(std::size_t count, reduce_op op) {
    std::vector<T> first_out;
    for (std::size_t r = 0; r < out.size(); ++r) {
      std::vector<T> o(count);
      rcclx::gpu::copy(o.data(), out[r], count * sizeof(T));
      if (r == 0) {
        std::string first;
        CAPTURE(first);
        REQUIRE(rcclx_test::count_mismatches(host_in, o, op, first) == 0);
        first_out = o;
      } else {
        REQUIRE(rcclx_test::bitwise_equal(o, first_out));
      }
    }
  }
};

}  // namespace

TEST_CASE("dda::allreduce launcher: one call per rank, both table overloads", "[dda][launcher]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  if (!concurrent_kernels_possible()) {
    WARN("kernels are serialised under compute-sanitizer: per-rank launches cannot meet; skipped");
    return;
  }
  const int n = GENERATE(2, 4, 8);
  for (const std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{70001}}) {
    for (const algorithm algo : {algorithm::flat, algorithm::tree, algorithm::automatic}) {
      for (const reduce_op op : {reduce_op::sum, reduce_op::min}) {
        for (const bool device_table : {false, true}) {
          CAPTURE(n, count, rcclx::to_string(algo), rcclx::to_string(op), device_table);
          rcclx::testing::emulated_world<max_r> world(n, count * sizeof(float), 32);
          rank_data<float> d(n, count, count + n);
          rank_runner runner(n);
          runner.run([&](int r, rcclx::gpu::stream_t s) {
            if (device_table)
              rcclx::dda::allreduce(world.device_tables<float>() + r, n, d.in[r], d.out[r], count, op, algo, s,
                                    blocks_per_rank());
            else
              rcclx::dda::allreduce(world.table<float>(r), d.in[r], d.out[r], count, op, algo, s, blocks_per_rank());
          });
          world.throw_if_error();
          d.check(count, op);
        }
      }
    }
  }
}

TEST_CASE("dda::allreduce launcher: back-to-back calls with changing sizes, each rank at its own pace",
          "[dda][launcher]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  if (!concurrent_kernels_possible()) {
    WARN("kernels are serialised under compute-sanitizer: per-rank launches cannot meet; skipped");
    return;
  }
#if defined(__SANITIZE_THREAD__)
  const int calls = 60;
#else
  const int calls = 600;
#endif
  const int n = 4;
  const std::size_t max_count = 20000;
  rcclx::testing::emulated_world<max_r> world(n, max_count * sizeof(rcclx::bf16), 32);
  rank_data<rcclx::bf16> d(n, max_count, 42);
  std::vector<std::size_t> counts(calls);
  std::mt19937_64 g(9);
  for (auto& c : counts) c = g() % (max_count + 1);
  counts.back() = max_count - 3;
  rank_runner runner(n);
  // Each rank issues its whole sequence without waiting for the others: the barriers alone pair
  // call k of every rank (the grid depends only on the count and algorithm: the same everywhere).
  runner.run([&](int r, rcclx::gpu::stream_t s) {
    for (int k = 0; k < calls; ++k) {
      const algorithm a = k % 3 == 0 ? algorithm::tree : (k % 3 == 1 ? algorithm::flat : algorithm::automatic);
      rcclx::dda::allreduce(world.table<rcclx::bf16>(r), d.in[r], d.out[r], counts[k], reduce_op::sum, a, s,
                            blocks_per_rank());
    }
  });
  world.throw_if_error();
  for (auto& v : d.host_in) v.resize(counts.back());
  d.check(counts.back(), reduce_op::sum);
}

TEST_CASE("dda::allreduce launcher: invalid arguments are clear errors", "[dda][launcher]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const int n = 2;
  const std::size_t cap = 1024;
  // Pads without LL regions: every flat call takes the barrier protocol, whose buffer rules
  // (capacity, output != own buffer) are checked here; the LL one-shot's are in ll_test.cpp.
  rcclx::testing::emulated_world<max_r> world(n, cap * sizeof(float), 4, rcclx::core::default_timeout_ns,
                                              rcclx::core::ll_layout{0, 0});
  const auto t = world.table<float>(0);
  float* in = static_cast<float*>(rcclx::gpu::device_malloc(4 * cap * sizeof(float)));
  float* out = in + 2 * cap;
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
  auto expect = [](const outcome& o, rcclx::errc code, const char* text) {
    CAPTURE(o.what, text);
    REQUIRE(o.code == code);
    REQUIRE(o.what.find(text) != std::string::npos);
  };
  using rcclx::dda::allreduce;
  expect(attempt([&] { allreduce(t, in, out, cap + 1); }), rcclx::errc::invalid_argument, "exceeds the symmetric buffer capacity");
  expect(attempt([&] { allreduce(t, in, out, 4, reduce_op::sum, algorithm::low_precision); }), rcclx::errc::unsupported,
         "low_precision");
  expect(attempt([&] { allreduce(t, in, out, 4, static_cast<reduce_op>(9)); }), rcclx::errc::invalid_argument, "op = 9");
  expect(attempt([&] { allreduce(t, in, out, 4, reduce_op::sum, static_cast<algorithm>(9)); }),
         rcclx::errc::invalid_argument, "algorithm = 9");
  const float* odd = reinterpret_cast<const float*>(reinterpret_cast<const char*>(in) + 2);
  expect(attempt([&] { allreduce(t, odd, out, 4); }), rcclx::errc::misaligned, "input");
  expect(attempt([&] { allreduce(t, in, in + 2, 4); }), rcclx::errc::invalid_argument, "overlap partially");
  expect(attempt([&] { allreduce(t, own + 1, out, 4); }), rcclx::errc::invalid_argument, "input overlaps");
  expect(attempt([&] { allreduce(t, in, own, 4, reduce_op::sum, algorithm::flat); }), rcclx::errc::invalid_argument,
         "use algorithm::tree");
  expect(attempt([&] { allreduce(t, in, out, 4, reduce_op::sum, algorithm::flat, {}, 5); }),
         rcclx::errc::invalid_argument, "max_blocks = 4");
  expect(attempt([&] { allreduce(t, in, out, 4, reduce_op::sum, algorithm::flat, {}, -1); }),
         rcclx::errc::invalid_argument, "num_blocks = -1");
  auto bad_table = t;
  bad_table.data[1] = reinterpret_cast<float*>(reinterpret_cast<char*>(bad_table.data[1]) + 4);
  expect(attempt([&] { allreduce(bad_table, in, out, 4); }), rcclx::errc::misaligned, "table.data[1]");
  auto one_rank = t;
  one_rank.signals.num_ranks = 1;
  expect(attempt([&] { allreduce(one_rank, in, out, 4); }), rcclx::errc::invalid_argument, "num_ranks = 1");
  expect(attempt([&] { allreduce(world.device_tables<float>(), 9, in, out, 4); }), rcclx::errc::invalid_argument,
         "num_ranks = 9");
  expect(attempt([&] { allreduce(static_cast<const rcclx::core::peer_table<float, max_r>*>(nullptr), 2, in, out, 4); }),
         rcclx::errc::invalid_argument, "device_table is null");
  // count 0 is valid and does nothing (no barrier: every rank skips it alike).
  expect(attempt([&] { allreduce(t, in, out, 0); }), rcclx::errc::ok, "");
  rcclx::gpu::device_free(in);
}

TEST_CASE("dda::allreduce launcher: threads above the kernels' bound are refused before launch", "[dda][launcher]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  // The kernels are compiled with __launch_bounds__(512): a larger block could not run, so it is
  // refused on every backend (the host backend too, which runs a block as one thread), naming the
  // value and the bound, for both algorithms and both table forms; 512 runs.
  const int n = 2;
  const std::size_t count = 5000;
  rcclx::testing::emulated_world<max_r> world(n, count * sizeof(float), 32);
  rank_data<float> d(n, count, 77);
  for (const algorithm algo : {algorithm::flat, algorithm::tree}) {
    for (const bool device_table : {false, true}) {
      for (const int threads : {1024, 544}) {
        CAPTURE(rcclx::to_string(algo), device_table, threads);
        std::string what;
        try {
          if (device_table)
            rcclx::dda::allreduce(world.device_tables<float>(), n, d.in[0], d.out[0], count, reduce_op::sum, algo, {},
                                  blocks_per_rank(), threads);
          else
            rcclx::dda::allreduce(world.table<float>(0), d.in[0], d.out[0], count, reduce_op::sum, algo, {},
                                  blocks_per_rank(), threads);
        } catch (const rcclx::error& e) {
          REQUIRE(e.code() == rcclx::errc::invalid_argument);
          what = e.what();
        }
        const std::string want = "threads = " + std::to_string(threads) +
                                 " exceeds 512, the ready-made kernels' bound (__launch_bounds__)";
        CAPTURE(what);
        REQUIRE(what.find(want) != std::string::npos);
      }
    }
  }
  std::string what;
  try {
    rcclx::dda::allreduce(world.table<float>(0), d.in[0], d.out[0], count, reduce_op::sum, algorithm::flat, {}, 0, 100);
  } catch (const rcclx::error& e) {
    what = e.what();
  }
  REQUIRE(what.find("threads = 100 must be 0 (default) or a multiple of 32 in [32, 512]") != std::string::npos);
  world.throw_if_error();  // nothing was launched
  if (!concurrent_kernels_possible()) {
    WARN("kernels are serialised under compute-sanitizer: the 512-thread calls are skipped");
    return;
  }
  for (const algorithm algo : {algorithm::flat, algorithm::tree}) {
    CAPTURE(rcclx::to_string(algo));
    rank_runner runner(n);
    runner.run([&](int r, rcclx::gpu::stream_t s) {
      rcclx::dda::allreduce(world.table<float>(r), d.in[r], d.out[r], count, reduce_op::sum, algo, s,
                            blocks_per_rank(), 512);
    });
    world.throw_if_error();
    d.check(count, reduce_op::sum);
  }
}
