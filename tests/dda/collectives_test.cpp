// The plain (full-precision) AllGather, AlltoAll and ReduceScatter by direct loads on emulated
// ranks: AllGather and AlltoAll are bitwise copies (every type, ranks 2..8 and 16, counts whose
// blocks are not 16-byte aligned); ReduceScatter is within the fp32 accumulation bound of a float64
// reference for sum, exact for min/max, and bit-identical to the AllReduce's block of the same
// rank; every mesh schedule, inputs in the symmetric buffer, AlltoAll in place, clear errors.
#include "../support/emulated_peers.hpp"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../support/catch.hpp"
#include "reference.hpp"

namespace {

using rcclx::algorithm;
using rcclx::reduce_op;
namespace lpc = rcclx::lpc;
constexpr int max_r = 16;
template <class T>
using peers_t = rcclx::testing::emulated_peers<T, max_r>;

#if defined(__SANITIZE_THREAD__)
constexpr bool tsan = true;
#else
constexpr bool tsan = false;
#endif
const bool small_matrix = tsan || rcclx_test::quick();

template <class T>
std::vector<std::vector<T>> fill(peers_t<T>& peers, std::uint64_t salt) {
  std::vector<std::vector<T>> in;
  for (int r = 0; r < peers.num_ranks(); ++r) {
    rcclx_test::fill_random(peers.input(r), salt * 131u + static_cast<std::uint64_t>(r) * 7u + peers.count());
    in.push_back(peers.input(r));
  }
  return in;
}

// output(r) of an AllGather must be every rank's input, in rank order, bit for bit.
template <class T>
void check_allgather(const peers_t<T>& peers, const std::vector<std::vector<T>>& in) {
  std::vector<T> want;
  for (const auto& x : in) want.insert(want.end(), x.begin(), x.end());
  for (int r = 0; r < peers.num_ranks(); ++r) {
    CAPTURE(r);
    REQUIRE(rcclx_test::bitwise_equal(peers.output(r), want));
  }
}

// output(r) block p of an AlltoAll must be block r of rank p's input, bit for bit.
template <class T>
void check_alltoall(const peers_t<T>& peers, const std::vector<std::vector<T>>& in) {
  const int n = peers.num_ranks();
  const std::size_t c = peers.count() / static_cast<std::size_t>(n);
  for (int r = 0; r < n; ++r) {
    std::vector<T> want;
    for (int p = 0; p < n; ++p) want.insert(want.end(), in[p].begin() + r * c, in[p].begin() + (r + 1) * c);
    CAPTURE(r);
    REQUIRE(rcclx_test::bitwise_equal(peers.output(r), want));
  }
}

template <class T>
void check_reduce_scatter(const peers_t<T>& peers, const std::vector<std::vector<T>>& in, reduce_op op) {
  const int n = peers.num_ranks();
  const std::size_t c = peers.count() / static_cast<std::size_t>(n);
  for (int r = 0; r < n; ++r) {
    // The reference over rank r's block only: shift every input by r * c elements.
    std::vector<std::vector<T>> block(n);
    for (int p = 0; p < n; ++p) block[p].assign(in[p].begin() + r * c, in[p].begin() + (r + 1) * c);
    std::string first;
    const std::size_t bad = rcclx_test::count_mismatches(block, peers.output(r), op, first);
    CAPTURE(r, first);
    REQUIRE(bad == 0);
  }
}

std::vector<int> rank_counts() {
  if (rcclx_test::quick()) return {2, 8};
  if (small_matrix) return {2, 3, 8, 16};
  return {2, 3, 4, 5, 6, 7, 8, 16};
}

// Per-rank block sizes C (count = N * C): 16-byte-aligned blocks and not (C * sizeof(T) % 16 != 0).
std::vector<std::size_t> block_sizes() {
  if (small_matrix) return {1, 33, 1000};
  return {1, 3, 33, 256, 1000, 4097};
}

}  // namespace

TEMPLATE_TEST_CASE("dda allgather and alltoall: bitwise copies, every type and rank count", "[dda][collectives]",
                   float, rcclx::bf16, rcclx::fp16, std::int32_t) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = TestType;
  for (const int n : rank_counts()) {
    for (const std::size_t c : block_sizes()) {
      const std::size_t count = c * static_cast<std::size_t>(n);
      CAPTURE(n, count);
      peers_t<T> peers(n, count);
      const auto in = fill(peers, 1);
      peers.allgather(algorithm::flat);
      REQUIRE(peers.last_algorithm() == algorithm::flat);
      REQUIRE(peers.output(0).size() == count * static_cast<std::size_t>(n));
      check_allgather(peers, in);
      peers.alltoall(algorithm::tree);  // tree and flat both mean the one-shot algorithm here
      REQUIRE(peers.last_algorithm() == algorithm::flat);
      check_alltoall(peers, in);
    }
  }
  // AllGather of a count that is not a multiple of anything.
  peers_t<T> odd(3, 1001);
  const auto in = fill(odd, 2);
  odd.allgather();
  check_allgather(odd, in);
}

TEMPLATE_TEST_CASE("dda reduce_scatter: every op, type and rank count; equals the AllReduce's block", "[dda][collectives]",
                   float, rcclx::bf16, rcclx::fp16, std::int32_t) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = TestType;
  for (const int n : rank_counts()) {
    for (const std::size_t c : block_sizes()) {
      for (const reduce_op op : {reduce_op::sum, reduce_op::min, reduce_op::max}) {
        const std::size_t count = c * static_cast<std::size_t>(n);
        CAPTURE(n, count, rcclx::to_string(op));
        peers_t<T> peers(n, count);
        const auto in = fill(peers, 3 + static_cast<int>(op));
        peers.reduce_scatter(algorithm::flat, op);
        REQUIRE(peers.output(0).size() == c);
        check_reduce_scatter(peers, in, op);
        std::vector<std::vector<T>> rs;
        for (int r = 0; r < n; ++r) rs.push_back(peers.output(r));
        // Same rank order, same fp32 accumulation, one rounding: block r of the AllReduce.
        peers.allreduce(algorithm::tree, op);
        for (int r = 0; r < n; ++r) {
          const std::vector<T> block(peers.output(r).begin() + r * c, peers.output(r).begin() + (r + 1) * c);
          REQUIRE(rcclx_test::bitwise_equal(block, rs[r]));
        }
      }
    }
  }
}

TEST_CASE("dda collectives: every schedule, inputs in the symmetric buffer, AlltoAll in place", "[dda][collectives]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using lin = lpc::config<lpc::default_format, 32, rcclx::fp8::scale_kind::fp32, rcclx::mesh::linear>;
  using xr = lpc::config<lpc::default_format, 32, rcclx::fp8::scale_kind::fp32, rcclx::mesh::xor_pairs>;
  const int n = GENERATE(2, 4, 8);
  const std::size_t count = static_cast<std::size_t>(n) * 1003;
  SECTION("schedules") {
    peers_t<float> peers(n, count);
    const auto in = fill(peers, 4);
    peers.allgather<algorithm::flat, lin>();  // the plain kernels of this schedule only
    check_allgather(peers, in);
    peers.allgather<algorithm::flat, xr>();  // the plain kernels of this schedule only
    check_allgather(peers, in);
    peers.alltoall<algorithm::flat, lin>();  // the plain kernels of this schedule only
    check_alltoall(peers, in);
    peers.alltoall<algorithm::flat, xr>();  // the plain kernels of this schedule only
    check_alltoall(peers, in);
  }
  SECTION("inputs in the symmetric buffers") {
    rcclx::testing::emulated_options o;
    o.input_in_symmetric_buffer = true;
    peers_t<rcclx::bf16> peers(n, count, o);
    const auto in = fill(peers, 5);
    peers.allgather(algorithm::flat);
    check_allgather(peers, in);
    peers.alltoall(algorithm::flat);
    check_alltoall(peers, in);
    peers.reduce_scatter(algorithm::flat, reduce_op::sum);
    check_reduce_scatter(peers, in, reduce_op::sum);
  }
  SECTION("AlltoAll in place") {
    rcclx::testing::emulated_options o;
    o.in_place = true;
    peers_t<std::int32_t> peers(n, count, o);
    const auto in = fill(peers, 6);
    peers.alltoall(algorithm::flat);
    check_alltoall(peers, in);
  }
}

TEST_CASE("dda collectives through emulated_peers: invalid input is a clear rcclx::error", "[dda][collectives]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  auto what_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const rcclx::error& e) {
      return std::string(rcclx::to_string(e.code())) + ": " + e.what();
    }
    return "ok";
  };
  peers_t<float> p(3, 10);
  REQUIRE(what_of([&] { p.reduce_scatter(); }).find("count = 10 is not a multiple of num_ranks = 3") != std::string::npos);
  REQUIRE(what_of([&] { p.alltoall(); }).find("invalid_argument") != std::string::npos);
  REQUIRE(what_of([&] { p.allgather(); }) == "ok");
  REQUIRE(what_of([&] { p.allgather(static_cast<algorithm>(11)); }).find("algorithm = 11") != std::string::npos);
  REQUIRE(what_of([&] { p.reduce_scatter(algorithm::flat, static_cast<reduce_op>(5)); }).find("op = 5") != std::string::npos);
  rcclx::testing::emulated_options o;
  o.in_place = true;
  peers_t<float> q(2, 10, o);
  REQUIRE(what_of([&] { q.allgather(); }).find("in_place") != std::string::npos);
  REQUIRE(what_of([&] { q.reduce_scatter(); }).find("in_place") != std::string::npos);
  REQUIRE(what_of([&] { q.alltoall(); }) == "ok");
  rcclx::testing::emulated_options s;
  s.input_in_symmetric_buffer = true;
  peers_t<float> sym(2, 64, s);
  REQUIRE(what_of([&] { sym.allreduce(algorithm::low_precision); }).find("input_in_symmetric_buffer") != std::string::npos);
  peers_t<std::int32_t> ints(2, 64);
  REQUIRE(what_of([&] { ints.alltoall(algorithm::low_precision); }).find("unsupported") != std::string::npos);
}
