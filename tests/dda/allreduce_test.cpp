// DDA AllReduce (flat and tree) on emulated ranks: every op, type, rank count 2..8 and 16, odd and
// large counts, in place and out of place, against an independent float64 reference; all ranks
// bit-identical, flat and tree bit-identical; unwritten elements caught by poisoned outputs.
// The same source runs on the host backend (a rank's block is a std::thread) and on a GPU (all
// ranks in one launch).
#include "../support/emulated_peers.hpp"

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../support/catch.hpp"
#include "reference.hpp"

namespace {

using rcclx::algorithm;
using rcclx::reduce_op;
constexpr int max_r = 16;

#if defined(__SANITIZE_THREAD__)
constexpr bool tsan = true;
#else
constexpr bool tsan = false;
#endif
// ThreadSanitizer (host) and compute-sanitizer (GPU, RCCLX_TEST_QUICK=1) runs are much slower: a
// smaller matrix, the same kinds of cases.
const bool quick = rcclx_test::quick();
const bool small_matrix = tsan || quick;

template <class T>
std::uint64_t seed_of(int n, std::size_t count, int rank, int salt) {
  return (static_cast<std::uint64_t>(n) << 48) ^ (count * 0x9E3779B97F4A7C15ull) ^
         (static_cast<std::uint64_t>(rank) << 32) ^ (sizeof(T) << 8) ^ static_cast<std::uint64_t>(salt);
}

template <class T>
std::vector<std::vector<T>> fill_inputs(rcclx::testing::emulated_peers<T, max_r>& peers, int salt) {
  const int n = peers.num_ranks();
  std::vector<std::vector<T>> in(n);
  for (int r = 0; r < n; ++r) {
    rcclx_test::fill_random(peers.input(r), seed_of<T>(n, peers.count(), r, salt));
    in[r] = peers.input(r);
  }
  return in;
}

// Every rank's output against the reference, and bit-identical to rank 0's.
template <class T>
void check_outputs(const rcclx::testing::emulated_peers<T, max_r>& peers, const std::vector<std::vector<T>>& in,
                   reduce_op op) {
  // Rank 0 against the reference; the others must hold exactly rank 0's bits.
  std::string first;
  const std::size_t bad = rcclx_test::count_mismatches(in, peers.output(0), op, first);
  CAPTURE(first);
  REQUIRE(bad == 0);
  for (int r = 1; r < peers.num_ranks(); ++r) {
    CAPTURE(r);
    if (!rcclx_test::bitwise_equal(peers.output(r), peers.output(0))) {
      const std::size_t bad_r = rcclx_test::count_mismatches(in, peers.output(r), op, first);
      CAPTURE(bad_r, first);
      FAIL("rank " << r << " differs from rank 0");
    }
  }
}

std::vector<std::size_t> counts_for(int n) {
  std::mt19937_64 g(static_cast<std::uint64_t>(n) * 7919u);
  std::vector<std::size_t> c{0, 1, 7, 8, 4095};
  c.push_back(1 + g() % 20000);  // random
  if (!small_matrix || n == 2 || n == 8) c.push_back(65537);
  return c;
}

}  // namespace

TEMPLATE_TEST_CASE("dda allreduce: every op, type, rank count and odd count against float64", "[dda]", float,
                   rcclx::bf16, rcclx::fp16, std::int32_t) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = TestType;
  const int n = quick ? GENERATE(2, 8) : small_matrix ? GENERATE(2, 3, 8, 16) : GENERATE(2, 3, 4, 5, 6, 7, 8, 16);
  for (const std::size_t count : counts_for(n)) {
    for (const reduce_op op : {reduce_op::sum, reduce_op::min, reduce_op::max}) {
      CAPTURE(n, count, rcclx::to_string(op));
      rcclx::testing::emulated_peers<T, max_r> peers(n, count);
      const auto in = fill_inputs(peers, static_cast<int>(op));
      peers.allreduce(algorithm::flat, op);
      REQUIRE(peers.last_algorithm() == algorithm::flat);
      check_outputs(peers, in, op);
      const std::vector<T> flat = peers.output(0);
      peers.allreduce(algorithm::tree, op);
      REQUIRE(peers.last_algorithm() == algorithm::tree);
      check_outputs(peers, in, op);
      // Same rank order, same fp32 accumulation, one rounding: flat and tree agree bit for bit.
      REQUIRE(rcclx_test::bitwise_equal(flat, peers.output(0)));
      if (quick) continue;
      peers.allreduce(algorithm::automatic, op);
      REQUIRE(rcclx_test::bitwise_equal(flat, peers.output(0)));
    }
  }
}

TEMPLATE_TEST_CASE("dda allreduce: in place, input in the symmetric buffer, both", "[dda]", float, rcclx::bf16,
                   std::int32_t) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = TestType;
  // (16 ranks: in the matrix above; under ThreadSanitizer not here too.)
  const int n = quick ? GENERATE(2, 8) : tsan ? GENERATE(2, 5, 8) : GENERATE(2, 5, 8, 16);
  const int placement = GENERATE(0, 1, 2);  // 0: in place, 1: input in symmetric buffer, 2: both
  for (const std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{4095}, std::size_t{65537}}) {
    if (small_matrix && count == 65537 && n != 8) continue;
    for (const algorithm algo : {algorithm::flat, algorithm::tree}) {
      if (placement == 2 && algo == algorithm::flat) continue;  // flat cannot write into its own buffer
      for (const reduce_op op : {reduce_op::sum, reduce_op::max}) {
        CAPTURE(n, placement, count, rcclx::to_string(algo), rcclx::to_string(op));
        rcclx::testing::emulated_options o;
        o.in_place = placement != 1;
        o.input_in_symmetric_buffer = placement != 0;
        rcclx::testing::emulated_peers<T, max_r> peers(n, count, o);
        const auto in = fill_inputs(peers, 100 + placement);
        peers.allreduce(algo, op);
        check_outputs(peers, in, op);
      }
    }
  }
}

TEST_CASE("dda allreduce: 2^22+3 elements", "[dda][large]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const std::size_t count = small_matrix ? (std::size_t{1} << 18) + 3 : (std::size_t{1} << 22) + 3;
  SECTION("bf16 sum, 8 ranks, flat and tree") {
    rcclx::testing::emulated_peers<rcclx::bf16, max_r> peers(8, count);
    const auto in = fill_inputs(peers, 1);
    peers.allreduce(algorithm::tree);
    check_outputs(peers, in, reduce_op::sum);
    const auto tree = peers.output(0);
    peers.allreduce(algorithm::flat);
    check_outputs(peers, in, reduce_op::sum);
    REQUIRE(rcclx_test::bitwise_equal(tree, peers.output(0)));
  }
  SECTION("float max, 3 ranks, tree") {
    rcclx::testing::emulated_peers<float, max_r> peers(3, count);
    const auto in = fill_inputs(peers, 2);
    peers.allreduce(algorithm::tree, reduce_op::max);
    check_outputs(peers, in, reduce_op::max);
  }
  SECTION("fp16 sum, 16 ranks, tree") {
    rcclx::testing::emulated_peers<rcclx::fp16, max_r> peers(16, count);
    const auto in = fill_inputs(peers, 3);
    peers.allreduce(algorithm::tree);
    check_outputs(peers, in, reduce_op::sum);
  }
  SECTION("int32 sum (wrapping), 5 ranks, automatic") {
    rcclx::testing::emulated_peers<std::int32_t, max_r> peers(5, count);
    const auto in = fill_inputs(peers, 4);
    peers.allreduce();
    check_outputs(peers, in, reduce_op::sum);
  }
}

TEMPLATE_TEST_CASE("dda allreduce: NaN, infinities and signed zeros", "[dda]", float, rcclx::bf16, rcclx::fp16) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = TestType;
  const int n = GENERATE(2, 8);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // Element columns: [NaN on one rank] [+inf on one rank] [-inf and +inf] [-0 everywhere]
  //                  [+0 and -0 mixed] [a NaN on the last rank only] ... then plain values.
  const std::size_t count = 37;
  for (const algorithm algo : {algorithm::flat, algorithm::tree}) {
    for (const reduce_op op : {reduce_op::sum, reduce_op::min, reduce_op::max}) {
      CAPTURE(n, rcclx::to_string(algo), rcclx::to_string(op));
      rcclx::testing::emulated_peers<T, max_r> peers(n, count);
      std::vector<std::vector<T>> in(n);
      for (int r = 0; r < n; ++r) {
        auto& v = peers.input(r);
        for (std::size_t i = 0; i < count; ++i) v[i] = T(static_cast<float>(r) - static_cast<float>(i % 5));
        v[0] = T(r == 1 ? nan : 1.0f);
        v[1] = T(r == 0 ? inf : 2.0f);
        v[2] = T(r == 0 ? -inf : (r == n - 1 ? inf : 0.5f));
        v[3] = T(-0.0f);
        v[4] = T(r % 2 ? -0.0f : 0.0f);
        v[5] = T(r == n - 1 ? nan : -3.0f);
        in[r] = v;
      }
      peers.allreduce(algo, op);
      check_outputs(peers, in, op);
      const auto& out = peers.output(0);
      REQUIRE(std::isnan(rcclx_test::exact(out[0])));  // NaN propagates through sum, min and max
      REQUIRE(std::isnan(rcclx_test::exact(out[5])));
      if (op == reduce_op::sum) REQUIRE(std::isnan(rcclx_test::exact(out[2])));  // -inf + inf
      if (op == reduce_op::min) REQUIRE(rcclx_test::exact(out[2]) == -std::numeric_limits<double>::infinity());
      if (op == reduce_op::max) REQUIRE(rcclx_test::exact(out[1]) == std::numeric_limits<double>::infinity());
      REQUIRE(rcclx_test::exact(out[3]) == 0.0);
      REQUIRE(std::signbit(rcclx_test::exact(out[3])));  // -0 + -0 = -0, min/max of -0s = -0
    }
  }
}

namespace {

// K AllReduce calls with changing counts inside ONE kernel, alternating flat and tree, call k
// writing to its own output slice: checks that ownership by tile keeps consecutive calls with
// different partitions race-free without any grid-wide sync.
struct calls_in_one_kernel {
  static constexpr int max_threads_per_block = 512;  // the ready-made kernels' register budget
  const rcclx::core::peer_table<float, max_r>* tables;
  rcclx::testing::rank_buffers<float, max_r> buf;
  std::size_t max_count;
  int calls;

  RCCLX_HOST_DEVICE static std::size_t count_of(int k, std::size_t max_count) {
    return (static_cast<std::size_t>(k) * 2654435761u) % (max_count + 1);
  }

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rcclx::testing::launch_index ix) const {
    const auto t = tables[ix.rank];
    for (int k = 0; k < calls; ++k) {
      const std::size_t c = count_of(k, max_count);
      float* out = buf.out[ix.rank] + static_cast<std::size_t>(k) * max_count;
      const bool ok = (k % 2 == 0) ? rcclx::dda::flat_allreduce<rcclx::core::op_sum>(g, t, buf.in[ix.rank], out, c,
                                                                                    ix.block, ix.num_blocks)
                                   : rcclx::dda::tree_allreduce<rcclx::core::op_sum>(g, t, buf.in[ix.rank], out, c,
                                                                                    ix.block, ix.num_blocks);
      if (!ok) return;
    }
  }
};

}  // namespace

TEST_CASE("dda allreduce: consecutive calls in one kernel with changing counts", "[dda]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const int n = GENERATE(2, 7);
  const int calls = tsan ? 12 : 40;
  const std::size_t max_count = rcclx::current_backend == rcclx::backend::host ? 999 : 70001;
  CAPTURE(n, calls);
  // Outputs hold every call's result: `calls` slices of max_count.
  rcclx::testing::emulated_peers<float, max_r> peers(n, max_count);
  std::vector<std::vector<float>> in(n);
  for (int r = 0; r < n; ++r) {
    rcclx_test::fill_random(peers.input(r), 77 + r);
    in[r] = peers.input(r);
  }
  peers.upload_inputs();
  std::vector<float*> outs(n);
  auto buf = peers.device_buffers();
  const std::size_t slice_bytes = max_count * calls * sizeof(float);
  for (int r = 0; r < n; ++r) {
    outs[r] = static_cast<float*>(rcclx::gpu::device_malloc(slice_bytes));
    std::vector<unsigned char> poison(slice_bytes, 0x5A);
    rcclx::gpu::copy(outs[r], poison.data(), slice_bytes);
    buf.out[r] = outs[r];
  }
  const int blocks = rcclx::current_backend == rcclx::backend::host ? 3 : 5;
  rcclx::testing::launch_emulated(n, blocks, rcclx::testing::emulated_launch_config().threads,
                                  calls_in_one_kernel{peers.device_tables(), buf, max_count, calls});
  rcclx::gpu::device_synchronize();
  peers.world().throw_if_error();
  std::vector<float> host(max_count * calls);
  for (int r = 0; r < n; ++r) {
    rcclx::gpu::copy(host.data(), outs[r], slice_bytes);
    rcclx::gpu::device_free(outs[r]);
    for (int k = 0; k < calls; ++k) {
      const std::size_t c = calls_in_one_kernel::count_of(k, max_count);
      CAPTURE(r, k, c);
      const std::vector<float> out(host.begin() + k * max_count, host.begin() + k * max_count + c);
      std::vector<std::vector<float>> in_c(n);
      for (int p = 0; p < n; ++p) in_c[p].assign(in[p].begin(), in[p].begin() + c);
      std::string first;
      CAPTURE(first);
      REQUIRE(rcclx_test::count_mismatches(in_c, out, reduce_op::sum, first) == 0);
      // Nothing beyond the count was written.
      std::uint32_t word;
      for (std::size_t i = c; i < max_count; ++i) {
        std::memcpy(&word, &host[k * max_count + i], 4);
        REQUIRE(word == 0x5A5A5A5Au);
      }
    }
  }
}

TEST_CASE("dda allreduce: 10^4 back-to-back calls with changing sizes", "[dda]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const bool host = rcclx::current_backend == rcclx::backend::host;
  const int n = host ? 4 : 8;
  const int calls = rcclx_test::scaled(tsan ? 400 : 10000);
  const std::size_t max_count = host ? 3000 : 300000;
  CAPTURE(n, calls);
  rcclx::testing::emulated_peers<rcclx::bf16, max_r> peers(n, max_count);
  std::vector<std::vector<rcclx::bf16>> in(n);
  for (int r = 0; r < n; ++r) {
    rcclx_test::fill_random(peers.input(r), 991 + r);
    in[r] = peers.input(r);
  }
  peers.upload_inputs();
  // Expected result of every element (a prefix of it for each call).
  std::vector<rcclx_test::expected> ref(max_count);
  for (std::size_t i = 0; i < max_count; ++i) ref[i] = rcclx_test::reference(in, i, reduce_op::sum);
  std::mt19937_64 g(12345);
  std::vector<rcclx::bf16> out(max_count);
  const auto tables = peers.device_tables();
  const auto buf = peers.device_buffers();
  const std::vector<std::uint16_t> poison(max_count, 0x5A5A);
  std::size_t checked = 0;
  for (int k = 0; k < calls; ++k) {
    const std::size_t c = g() % (max_count + 1);
    const int check_rank = k % n;
    const bool check = host || k % 16 == 0;
    if (check) rcclx::gpu::copy(buf.out[check_rank], poison.data(), max_count * 2);
    using flat_k = rcclx::testing::emulated_allreduce<rcclx::core::op_sum, algorithm::flat, rcclx::bf16, max_r>;
    using tree_k = rcclx::testing::emulated_allreduce<rcclx::core::op_sum, algorithm::tree, rcclx::bf16, max_r>;
    const algorithm a = (k % 3 == 0) ? algorithm::tree : algorithm::flat;
    const int threads = rcclx::testing::emulated_launch_config().threads;
    if (c > 0) {
      if (a == algorithm::flat) {
        rcclx::testing::launch_emulated(n, peers.emulated_blocks<flat_k>(a) , threads, flat_k{tables, buf, c});
      } else {
        rcclx::testing::launch_emulated(n, peers.emulated_blocks<tree_k>(a), threads, tree_k{tables, buf, c});
      }
    }
    if (!check) continue;
    rcclx::gpu::device_synchronize();
    rcclx::gpu::copy(out.data(), buf.out[check_rank], max_count * 2);
    for (std::size_t i = 0; i < max_count; ++i) {
      if (i < c) {
        const double got = rcclx_test::exact(out[i]);
        if (!(std::fabs(got - ref[i].value) <= ref[i].tol)) {
          CAPTURE(k, c, i, got, ref[i].value);
          FAIL("wrong element");
        }
      } else if (out[i].bits != 0x5A5A) {
        CAPTURE(k, c, i);
        FAIL("element beyond the count was written");
      }
    }
    ++checked;
  }
  rcclx::gpu::device_synchronize();
  REQUIRE_NOTHROW(peers.world().throw_if_error());
  REQUIRE(checked > 0);
}

TEMPLATE_TEST_CASE("dda allreduce: input and output aligned only to sizeof(T)", "[dda]", float, rcclx::bf16) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = TestType;
  const int n = GENERATE(3, 8);
  const std::size_t count = 5001;
  for (const algorithm algo : {algorithm::flat, algorithm::tree}) {
    CAPTURE(n, rcclx::to_string(algo));
    rcclx::testing::emulated_peers<T, max_r> peers(n, count + 1);
    std::vector<std::vector<T>> in(n);
    for (int r = 0; r < n; ++r) {
      rcclx_test::fill_random(peers.input(r), 5 + r);
      in[r].assign(peers.input(r).begin() + 1, peers.input(r).end());
    }
    auto buf = peers.device_buffers();
    for (int r = 0; r < n; ++r) {  // one element in: off the 16-byte grid
      buf.in[r] += 1;
      buf.out[r] += 1;
    }
    const int threads = rcclx::testing::emulated_launch_config().threads;
    if (algo == algorithm::flat) {
      using k = rcclx::testing::emulated_allreduce<rcclx::core::op_sum, algorithm::flat, T, max_r>;
      peers.run(peers.template emulated_blocks<k>(algo), threads, k{peers.device_tables(), buf, count});
    } else {
      using k = rcclx::testing::emulated_allreduce<rcclx::core::op_sum, algorithm::tree, T, max_r>;
      peers.run(peers.template emulated_blocks<k>(algo), threads, k{peers.device_tables(), buf, count});
    }
    for (int r = 0; r < n; ++r) {
      const std::vector<T> out(peers.output(r).begin() + 1, peers.output(r).end());
      std::string first;
      CAPTURE(r, first);
      REQUIRE(rcclx_test::count_mismatches(in, out, reduce_op::sum, first) == 0);
      unsigned char first_bytes[sizeof(T)];  // the element before was not written
      std::memcpy(first_bytes, &peers.output(r)[0], sizeof(T));
      for (unsigned char b : first_bytes) REQUIRE(b == 0x5A);
    }
  }
}

TEST_CASE("dda allreduce: explicit block counts", "[dda]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const int n = 4;
  const bool host = rcclx::current_backend == rcclx::backend::host;
  for (const int blocks : host ? std::vector<int>{1, 2, 3, 4} : std::vector<int>{1, 3, 17, 24}) {
    for (const algorithm algo : {algorithm::flat, algorithm::tree}) {
      CAPTURE(blocks, rcclx::to_string(algo));
      rcclx::testing::emulated_options o;
      o.blocks_per_rank = blocks;
      rcclx::testing::emulated_peers<rcclx::fp16, max_r> peers(n, 100003, o);
      const auto in = fill_inputs(peers, blocks);
      peers.allreduce(algo);
      REQUIRE(peers.last_blocks_per_rank() == blocks);
      check_outputs(peers, in, reduce_op::sum);
    }
  }
}

namespace {
// An AllReduce on which rank `absent` never arrives.
struct missing_rank_kernel {
  const rcclx::core::peer_table<float, max_r>* tables;
  rcclx::testing::rank_buffers<float, max_r> buf;
  std::size_t count;
  int absent;
  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rcclx::testing::launch_index ix) const {
    if (ix.rank == absent) return;
    (void)rcclx::dda::tree_allreduce<rcclx::core::op_sum>(g, tables[ix.rank], buf.in[ix.rank], buf.out[ix.rank],
                                                          count, ix.block, ix.num_blocks);
  }
};
}  // namespace

TEST_CASE("dda allreduce: a rank that never arrives is a timeout error naming it", "[dda]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  rcclx::testing::emulated_options o;
  o.timeout_ns = rcclx_test::absent_timeout_ns;
  rcclx::testing::emulated_peers<float, max_r> peers(4, 1000, o);
  try {
    peers.run(2, rcclx::testing::emulated_launch_config().threads,
              missing_rank_kernel{peers.device_tables(), peers.device_buffers(), 1000, 2});
    FAIL("no error");
  } catch (const rcclx::error& e) {
    REQUIRE(e.code() == rcclx::errc::timeout);
    REQUIRE(std::string(e.what()).find("waiting for rank 2") != std::string::npos);
  }
  peers.world().reset();
  const auto in = fill_inputs(peers, 9);
  peers.allreduce(algorithm::tree);  // usable again after reset
  check_outputs(peers, in, reduce_op::sum);
}

TEST_CASE("emulated_peers: invalid input is a clear rcclx::error", "[dda]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using peers_f = rcclx::testing::emulated_peers<float, max_r>;
  auto code_of = [](auto&& f) {
    try {
      f();
    } catch (const rcclx::error& e) {
      return e.code();
    }
    return rcclx::errc::ok;
  };
  REQUIRE(code_of([] { peers_f p(1, 10); }) == rcclx::errc::invalid_argument);
  REQUIRE(code_of([] { rcclx::testing::emulated_peers<float, 8> p(9, 10); }) == rcclx::errc::invalid_argument);
  REQUIRE(code_of([] { rcclx::testing::emulated_peers<double> p(2, 10); }) == rcclx::errc::unsupported);
  peers_f p(2, 10);
  rcclx::testing::emulated_peers<rcclx::fp16, max_r> h(2, 10);  // low precision takes float and bf16 only
  REQUIRE(code_of([&] { h.allreduce(algorithm::low_precision); }) == rcclx::errc::unsupported);
  REQUIRE(code_of([&] { p.allreduce(static_cast<algorithm>(42)); }) == rcclx::errc::invalid_argument);
  REQUIRE(code_of([&] { p.allreduce(algorithm::flat, static_cast<reduce_op>(7)); }) == rcclx::errc::invalid_argument);
  REQUIRE(code_of([&] { p.input(2); }) == rcclx::errc::invalid_argument);
  REQUIRE(code_of([&] { p.input(0).resize(3); p.allreduce(); }) == rcclx::errc::invalid_argument);
  rcclx::testing::emulated_options o;
  o.in_place = o.input_in_symmetric_buffer = true;
  rcclx::testing::emulated_peers<float, max_r> q(2, 10, o);
  REQUIRE(code_of([&] { q.allreduce(algorithm::flat); }) == rcclx::errc::invalid_argument);
  REQUIRE(code_of([&] { q.allreduce(algorithm::tree); }) == rcclx::errc::ok);
  try {
    peers_f bad(17, 4);
  } catch (const rcclx::error& e) {
    REQUIRE(std::string(e.what()).find("num_ranks = 17") != std::string::npos);
  }
}
