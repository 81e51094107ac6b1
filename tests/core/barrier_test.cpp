// Barrier protocol tests: N emulated ranks x several blocks x many rounds. Each round every
// (rank, block) publishes a value, crosses a barrier, and checks that it sees every peer's value
// of this round; without a working barrier the reads see stale values and the test fails.
// The same source runs on the host backend (one std::thread per rank and block) and on a GPU
// (one launch, all blocks resident).
#include <rcclx/core/barrier.hpp>
#include <rcclx/core/peer_table.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <cstdint>
#include <vector>

#include "../support/catch.hpp"

namespace {

using rcclx::core::barrier_kind;
constexpr int max_r = 16;
using table_t = rcclx::core::peer_table<std::uint32_t, max_r>;

RCCLX_HOST_DEVICE inline std::uint32_t value_of(int rank, int block, std::uint32_t round, int phase) {
  return (round * 2654435761u) ^ (static_cast<std::uint32_t>(rank) << 20) ^
         (static_cast<std::uint32_t>(block) << 8) ^ static_cast<std::uint32_t>(phase);
}

// Buffer of each rank: [block][2] words (phase 0 written before start, phase 1 before mid).
struct rounds_kernel {
  const table_t* tables;
  std::uint32_t* mismatches;  // [num_ranks * num_blocks]
  std::uint32_t* failures;    // barriers that returned false, per (rank, block)
  int rounds;
  int skip_rank;              // a rank that never arrives (-1: none)

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, rcclx::testing::launch_index ix) const {
    if (ix.rank == skip_rank) return;
    const table_t& t = tables[ix.rank];
    const int slot = ix.rank * ix.num_blocks + ix.block;
    std::uint32_t bad = 0;
    for (int k = 0; k < rounds; ++k) {
      const auto round = static_cast<std::uint32_t>(k);
      for (int phase = 0; phase < 2; ++phase) {
        if (g.thread_rank() == 0) t.data[ix.rank][ix.block * 2 + phase] = value_of(ix.rank, ix.block, round, phase);
        const barrier_kind kind = phase == 0 ? barrier_kind::start : barrier_kind::mid;
        if (!rcclx::core::barrier(g, t.signals, ix.block, kind)) {
          if (g.thread_rank() == 0) failures[slot] += 1;
          return;
        }
        for (int p = g.thread_rank(); p < ix.num_ranks; p += g.size()) {
          if (t.data[p][ix.block * 2 + phase] != value_of(p, ix.block, round, phase)) ++bad;
        }
      }
      if (!rcclx::core::barrier(g, t.signals, ix.block, barrier_kind::end)) {
        if (g.thread_rank() == 0) failures[slot] += 1;
        return;
      }
    }
    if (bad != 0) rcclx::gpu::fetch_add_local(&mismatches[slot], bad);
  }
};

struct run_result {
  std::vector<std::uint32_t> mismatches, failures;
};

run_result run_rounds(rcclx::testing::emulated_world<max_r>& world, int blocks, int threads, int rounds,
                      int skip_rank = -1) {
  const int n = world.num_ranks();
  const std::size_t slots = static_cast<std::size_t>(n) * blocks;
  auto* counters = static_cast<std::uint32_t*>(rcclx::gpu::device_malloc(2 * slots * sizeof(std::uint32_t)));
  rcclx::gpu::memset_zero(counters, 2 * slots * sizeof(std::uint32_t));
  rounds_kernel k{world.device_tables<std::uint32_t>(), counters, counters + slots, rounds, skip_rank};
  rcclx::testing::launch_emulated(n, blocks, threads, k);
  rcclx::gpu::device_synchronize();
  run_result r{std::vector<std::uint32_t>(slots), std::vector<std::uint32_t>(slots)};
  rcclx::gpu::copy(r.mismatches.data(), counters, slots * sizeof(std::uint32_t));
  rcclx::gpu::copy(r.failures.data(), counters + slots, slots * sizeof(std::uint32_t));
  rcclx::gpu::device_free(counters);
  return r;
}

std::uint64_t sum(const std::vector<std::uint32_t>& v) {
  std::uint64_t s = 0;
  for (auto x : v) s += x;
  return s;
}

#if RCCLX_BACKEND_HOST
constexpr int test_threads = 1;
constexpr int test_blocks = 2;
#  if defined(__SANITIZE_THREAD__)
constexpr int test_rounds = 300;  // ThreadSanitizer: fewer rounds, same interleavings of interest
#  else
constexpr int test_rounds = 10000;
#  endif
#else
constexpr int test_threads = 128;
constexpr int test_blocks = 4;
constexpr int test_rounds = 10000;
#endif

}  // namespace

TEST_CASE("barrier: every rank sees every peer's round value", "[barrier]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const int n = GENERATE(2, 3, 4, 5, 6, 7, 8, 16);
  CAPTURE(n);
  rcclx::testing::emulated_world<max_r> world(n, 2 * test_blocks * sizeof(std::uint32_t), test_blocks);
  const auto r = run_rounds(world, test_blocks, test_threads, rcclx_test::scaled(test_rounds));
  REQUIRE(sum(r.failures) == 0);
  REQUIRE(sum(r.mismatches) == 0);
  REQUIRE_NOTHROW(world.throw_if_error());
  // Counters are device state: a second launch (as a replayed graph would) continues correctly.
  const auto again = run_rounds(world, test_blocks, test_threads, 100);
  REQUIRE(sum(again.failures) == 0);
  REQUIRE(sum(again.mismatches) == 0);
}

TEST_CASE("barrier: counters wrap around 2^32", "[barrier]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const int n = GENERATE(2, 8);
  CAPTURE(n);
  rcclx::testing::emulated_world<max_r> world(n, 2 * test_blocks * sizeof(std::uint32_t), test_blocks);
  world.reset(0xFFFFFFFFu - 500u);  // 3 barriers a round: crosses 2^32 after ~167 rounds
  const auto r = run_rounds(world, test_blocks, test_threads, 1000);  // not scaled: must cross 2^32
  REQUIRE(sum(r.failures) == 0);
  REQUIRE(sum(r.mismatches) == 0);
  REQUIRE_NOTHROW(world.throw_if_error());
}

TEST_CASE("barrier: a rank that never arrives gives a timeout error naming it", "[barrier]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const int n = GENERATE(2, 4, 8);
  const int missing = n - 1 - (n / 3);
  CAPTURE(n, missing);
  const std::uint64_t timeout_ns = 200ull * 1000 * 1000;  // 0.2 s
  rcclx::testing::emulated_world<max_r> world(n, 2 * test_blocks * sizeof(std::uint32_t), test_blocks,
                                              timeout_ns);
  const auto r = run_rounds(world, test_blocks, test_threads, 10, missing);
  const auto errors = world.errors();
  for (int rank = 0; rank < n; ++rank) {
    CAPTURE(rank);
    if (rank == missing) {
      REQUIRE(errors[rank].code == 0);
      continue;
    }
    REQUIRE(errors[rank].code == static_cast<std::uint32_t>(rcclx::errc::timeout));
    REQUIRE(errors[rank].waiting_rank == static_cast<std::uint32_t>(rank));
    REQUIRE(errors[rank].missing_rank == static_cast<std::uint32_t>(missing));
    REQUIRE(errors[rank].kind == static_cast<std::uint32_t>(barrier_kind::start));
    REQUIRE(errors[rank].call == 1u);
  }
  REQUIRE(sum(r.failures) == static_cast<std::uint64_t>((n - 1) * test_blocks));
  bool threw = false;
  try {
    world.throw_if_error();
  } catch (const rcclx::error& e) {
    threw = true;
    REQUIRE(e.code() == rcclx::errc::timeout);
    const std::string msg = e.what();
    CAPTURE(msg);
    REQUIRE(msg.find("waiting for rank " + std::to_string(missing)) != std::string::npos);
    REQUIRE(msg.find("start barrier") != std::string::npos);
  }
  REQUIRE(threw);
  // After reset the same world works again.
  world.reset();
  const auto ok = run_rounds(world, test_blocks, test_threads, 50);
  REQUIRE(sum(ok.failures) == 0);
  REQUIRE(sum(ok.mismatches) == 0);
}

TEST_CASE("signal_pads: invalid rank counts are clear errors", "[barrier]") {
  REQUIRE_THROWS_AS(rcclx::testing::emulated_world<8>(1, 64, 1), rcclx::error);
  REQUIRE_THROWS_AS(rcclx::testing::emulated_world<8>(9, 64, 1), rcclx::error);
  void* bases[8] = {};
  REQUIRE_THROWS_AS(rcclx::core::signal_pads<8>::from_bases(bases, 3, 2, 1), rcclx::error);
}
