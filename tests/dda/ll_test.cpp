// The LL one-shot (dda::flat_allreduce_ll, core/ll.hpp): the same bits as the barrier one-shot and
// a float64 reference, flags that survive counter wrap-around, many calls with changing sizes, and
// a missing rank reported as a bounded LL timeout naming it. Runs on host threads and on a GPU.
#include <rcclx/core/ll.hpp>
#include <rcclx/dda/allreduce.hpp>
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
constexpr int max_r = 16;

#if defined(__SANITIZE_THREAD__)
constexpr bool tsan = true;
#else
constexpr bool tsan = false;
#endif
const bool small_matrix = tsan || rcclx_test::quick();

template <class T>
std::vector<std::vector<T>> fill(rcclx::testing::emulated_peers<T, max_r>& peers, std::uint64_t salt) {
  std::vector<std::vector<T>> in(peers.num_ranks());
  for (int r = 0; r < peers.num_ranks(); ++r) {
    rcclx_test::fill_random(peers.input(r), salt * 1000003u + static_cast<std::uint64_t>(r) * 7919u + peers.count());
    in[r] = peers.input(r);
  }
  return in;
}

template <class T>
void check(const rcclx::testing::emulated_peers<T, max_r>& peers, const std::vector<std::vector<T>>& in, reduce_op op) {
  std::string first;
  const std::size_t bad = rcclx_test::count_mismatches(in, peers.output(0), op, first);
  CAPTURE(first);
  REQUIRE(bad == 0);
  for (int r = 1; r < peers.num_ranks(); ++r) {
    CAPTURE(r);
    REQUIRE(rcclx_test::bitwise_equal(peers.output(r), peers.output(0)));
  }
}

rcclx::testing::emulated_options no_ll() {
  rcclx::testing::emulated_options o;
  o.ll = {0, 0};
  return o;
}

// Did the last flat call of `peers` (its grid) take the LL one-shot?
template <class T>
bool used_ll(const rcclx::testing::emulated_peers<T, max_r>& peers, std::size_t count) {
  const int threads = rcclx::testing::emulated_launch_config().threads;
  return rcclx::dda::flat_uses_ll<T>(peers.table(0).signals, count, threads, peers.last_blocks_per_rank());
}

}  // namespace

TEMPLATE_TEST_CASE("dda flat: LL and barrier protocols agree bit for bit with a float64 reference", "[dda][ll]", float,
                   rcclx::bf16, std::int32_t) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = TestType;
  const int n = small_matrix ? GENERATE(2, 8) : GENERATE(2, 3, 5, 8, 16);
  for (const std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{4095}, std::size_t{20001}}) {
    for (const reduce_op op : {reduce_op::sum, reduce_op::max}) {
      CAPTURE(n, count, rcclx::to_string(op));
      rcclx::testing::emulated_peers<T, max_r> ll(n, count);
      rcclx::testing::emulated_peers<T, max_r> barrier(n, count, no_ll());
      const auto in = fill(ll, static_cast<std::uint64_t>(op) + 1);
      for (int r = 0; r < n; ++r) barrier.input(r) = in[r];
      ll.allreduce(algorithm::flat, op);
      barrier.allreduce(algorithm::flat, op);
      const bool via_ll = used_ll(ll, count);
      CAPTURE(via_ll);
      // Small messages always take the LL one-shot (one vector per thread: on the host backend a
      // block is one thread, so up to 4 vectors with its 4 blocks).
      const std::size_t ll_up_to = rcclx::current_backend == rcclx::backend::host ? 64 : 16 * 1024;
      if (count * sizeof(T) <= ll_up_to) REQUIRE(via_ll);
      REQUIRE_FALSE(used_ll(barrier, count));
      check(ll, in, op);
      check(barrier, in, op);
      REQUIRE(rcclx_test::bitwise_equal(ll.output(0), barrier.output(0)));
    }
  }
}

TEST_CASE("dda flat LL: in place and output in the symmetric buffer", "[dda][ll]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const int n = 4;
  const std::size_t count = 3001;
  rcclx::testing::emulated_options o;
  o.in_place = true;
  rcclx::testing::emulated_peers<float, max_r> peers(n, count, o);
  const auto in = fill(peers, 5);
  peers.allreduce(algorithm::flat);
  check(peers, in, reduce_op::sum);
  // The LL protocol does not read the symmetric buffer: the output may be it.
  auto t = peers.table(0);
  REQUIRE(rcclx::dda::flat_uses_ll<float>(t.signals, 8, rcclx::testing::emulated_launch_config().threads, 2));
  const rcclx::kernel::grid_shape shape{2, rcclx::testing::emulated_launch_config().threads};
  REQUIRE_NOTHROW(rcclx::dda::detail::check_allreduce_table("test", t, peers.device_input(0), t.data[0], 8,
                                                            algorithm::flat, shape));
  rcclx::testing::emulated_peers<float, max_r> big(n, count, no_ll());
  auto tb = big.table(0);
  REQUIRE_THROWS_AS(rcclx::dda::detail::check_allreduce_table("test", tb, big.device_input(0), tb.data[0], 8,
                                                              algorithm::flat, shape),
                    rcclx::error);
}

TEST_CASE("dda flat LL: flags wrap around 2^32 without a stale match", "[dda][ll]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const int n = 3;
  const std::size_t count = 1000;
  rcclx::testing::emulated_peers<float, max_r> peers(n, count);
  // Every LL epoch (and barrier counter) a few calls before the wrap: calls cross 0xFFFFFFFF -> 2
  // with the halves still alternating.
  peers.world().reset(0xFFFFFFFCu);
  for (int k = 0; k < 8; ++k) {
    CAPTURE(k);
    const auto in = fill(peers, 100 + static_cast<std::uint64_t>(k));
    peers.allreduce(k % 3 == 2 ? algorithm::tree : algorithm::flat);
    check(peers, in, reduce_op::sum);
  }
}

TEST_CASE("dda flat LL: back-to-back calls with changing sizes and algorithms", "[dda][ll]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const int n = 5;
  const std::size_t max_count = 9000;
  const int calls = tsan ? 60 : rcclx_test::scaled(400);
  std::mt19937_64 g(42);
  for (int k = 0; k < calls; ++k) {
    const std::size_t count = 1 + g() % max_count;
    CAPTURE(k, count);
    rcclx::testing::emulated_peers<rcclx::bf16, max_r> peers(n, count);
    const auto in = fill(peers, static_cast<std::uint64_t>(k));
    peers.allreduce(g() % 4 == 0 ? algorithm::tree : algorithm::flat);
    check(peers, in, reduce_op::sum);
  }
}

namespace {
// flat_allreduce_ll called directly with several tiles per block (its general path: the launcher
// takes it only for one tile per block).
struct ll_many_tiles {
  static constexpr int max_threads_per_block = 512;
  const rcclx::core::peer_table<float, max_r>* tables;
  rcclx::testing::rank_buffers<float, max_r> buf;
  std::size_t count;
  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rcclx::testing::launch_index ix) const {
    (void)rcclx::dda::flat_allreduce_ll<rcclx::core::op_sum>(g, tables[ix.rank], buf.in[ix.rank], buf.out[ix.rank],
                                                             count, ix.block, ix.num_blocks);
  }
};
}  // namespace

TEST_CASE("dda flat LL: several tiles per block (the general path)", "[dda][ll]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const int n = 5;
  const int threads = rcclx::current_backend == rcclx::backend::host ? 1 : 128;
  for (const std::size_t count : {std::size_t{37}, std::size_t{1000}, std::size_t{4093}}) {
    CAPTURE(count);
    rcclx::testing::emulated_peers<float, max_r> peers(n, count);
    const int blocks = 2;
    REQUIRE(rcclx::dda::ll_block_bytes_for<float>(count, threads, blocks) <= peers.table(0).signals.ll_block_bytes);
    const auto in = fill(peers, 31);
    for (int rep = 0; rep < 3; ++rep) {  // both halves, then the first again
      peers.run(blocks, threads, ll_many_tiles{peers.device_tables(), peers.device_buffers(), count});
      check(peers, in, reduce_op::sum);
    }
  }
}

namespace {
// An LL AllReduce on which rank `absent` never arrives.
struct missing_rank_ll {
  static constexpr int max_threads_per_block = 512;  // the ready-made kernels' register budget
  const rcclx::core::peer_table<float, max_r>* tables;
  rcclx::testing::rank_buffers<float, max_r> buf;
  std::size_t count;
  int absent;
  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rcclx::testing::launch_index ix) const {
    if (ix.rank == absent) return;
    (void)rcclx::dda::flat_allreduce_ll<rcclx::core::op_sum>(g, tables[ix.rank], buf.in[ix.rank], buf.out[ix.rank],
                                                             count, ix.block, ix.num_blocks);
  }
};
}  // namespace

TEST_CASE("dda flat LL: a rank that never arrives is a bounded timeout naming it", "[dda][ll]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  rcclx::testing::emulated_options o;
  o.timeout_ns = rcclx_test::absent_timeout_ns;
  rcclx::testing::emulated_peers<float, max_r> peers(4, 1000, o);
  try {
    peers.run(2, rcclx::testing::emulated_launch_config().threads,
              missing_rank_ll{peers.device_tables(), peers.device_buffers(), 1000, 1});
    FAIL("no error");
  } catch (const rcclx::error& e) {
    REQUIRE(e.code() == rcclx::errc::timeout);
    const std::string what = e.what();
    CAPTURE(what);
    REQUIRE(what.find("waiting for rank 1") != std::string::npos);
    // Checked mode: the call's fingerprint is the first thing a rank waits for.
    REQUIRE(what.find(rcclx::checks ? "call check" : "LL") != std::string::npos);
  }
  peers.world().reset();
  const auto in = fill(peers, 9);
  peers.allreduce(algorithm::flat);  // usable again after reset
  check(peers, in, reduce_op::sum);
}
