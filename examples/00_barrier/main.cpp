// Example 00: cross-rank barriers on emulated ranks (one GPU, or host threads).
// Runs many rounds of start/end barriers on 8 ranks, checks that every rank saw every peer's
// value each round, then shows what a rank that never arrives produces: an error naming it.
#include <rcclx/core/barrier.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

constexpr int max_r = 8;
using table_t = rcclx::core::peer_table<std::uint32_t, max_r>;

struct rounds {
  const table_t* tables;
  std::uint32_t* bad;  // one word per rank
  int count;
  int absent;          // rank that never arrives, or -1

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rcclx::testing::launch_index ix) const {
    if (ix.rank == absent) return;
    const table_t& t = tables[ix.rank];
    for (int k = 0; k < count; ++k) {
      if (g.thread_rank() == 0) t.data[ix.rank][ix.block] = static_cast<std::uint32_t>(k + 1);
      if (!rcclx::core::barrier(g, t.signals, ix.block, rcclx::core::barrier_kind::start)) return;
      for (int p = g.thread_rank(); p < ix.num_ranks; p += g.size())
        if (t.data[p][ix.block] != static_cast<std::uint32_t>(k + 1)) rcclx::gpu::fetch_add_local(&bad[ix.rank], 1u);
      if (!rcclx::core::barrier(g, t.signals, ix.block, rcclx::core::barrier_kind::end)) return;
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int n = 8, blocks = 2, threads = rcclx::current_backend == rcclx::backend::host ? 1 : 64;
  const int count = argc > 1 ? std::atoi(argv[1]) : 2000;
  if (rcclx::current_backend != rcclx::backend::host && rcclx::gpu::device_count() == 0) {
    std::printf("built for %s but no GPU is present; rebuild with RCCLX_BACKEND=host\n", rcclx::backend_name());
    return 0;
  }
  rcclx::testing::emulated_world<max_r> world(n, blocks * sizeof(std::uint32_t), blocks, 500ull * 1000 * 1000);
  auto* bad = static_cast<std::uint32_t*>(rcclx::gpu::device_malloc(n * sizeof(std::uint32_t)));
  rcclx::gpu::memset_zero(bad, n * sizeof(std::uint32_t));

  const auto t0 = std::chrono::steady_clock::now();
  rcclx::testing::launch_emulated(n, blocks, threads, rounds{world.device_tables<std::uint32_t>(), bad, count, -1});
  rcclx::gpu::device_synchronize();
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  world.throw_if_error();
  std::uint32_t host_bad[max_r];
  rcclx::gpu::copy(host_bad, bad, sizeof(host_bad));
  std::uint32_t total = 0;
  for (auto b : host_bad) total += b;
  std::printf("rcclx barrier demo on %s: %d emulated ranks x %d blocks, %d rounds of start+end barriers\n",
              rcclx::backend_name(), n, blocks, count);
  std::printf("  %.2f us per barrier (wall clock, first launch included), %u stale reads\n",
              us / (2.0 * count), total);

  // A rank that never arrives: every other rank's bounded wait expires and names it.
  world.reset();
  rcclx::testing::launch_emulated(n, blocks, threads, rounds{world.device_tables<std::uint32_t>(), bad, 1, 5});
  rcclx::gpu::device_synchronize();
  try {
    world.throw_if_error();
    std::printf("  missing rank NOT detected\n");
    total += 1;
  } catch (const rcclx::error& e) {
    std::printf("  missing rank detected: %s\n", e.what());
  }
  rcclx::gpu::device_free(bad);
  return total == 0 ? 0 : 1;
}
