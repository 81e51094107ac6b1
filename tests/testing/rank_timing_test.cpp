// testing/rank_timing.hpp with three forked processes (host::run_ranks, socket bootstrap): every
// rank learns the slowest rank's time, whether every rank's check passed and whether the outputs
// are the same bits. The parent never touches the GPU; each child picks its device.
#include <rcclx/host/fork_ranks.hpp>
#include <rcclx/host/socket_bootstrap.hpp>
#include <rcclx/testing/rank_timing.hpp>

#include <chrono>
#include <thread>
#include <vector>

#include "../support/catch.hpp"

namespace {

namespace rt = rcclx::testing;
constexpr bool on_host = rcclx::current_backend == rcclx::backend::host;

// One job of 3 ranks; rank `odd` writes other bits, rank `wrong` fails its check. Every rank
// verifies what it learnt and exits 0 if it is right.
int job(int odd, int wrong) {
  return rcclx::host::run_ranks(3, [&](const rcclx::host::launch_config& cfg) {
    rcclx::host::use_device(cfg);
    rcclx::host::socket_bootstrap bs(cfg);
    const std::size_t count = 64;
    std::vector<float> mine(count, cfg.rank == odd ? 2.0f : 1.0f);
    auto* out = static_cast<float*>(rcclx::gpu::device_malloc(count * sizeof(float)));
    int calls = 0, checks = 0;
    const rt::rank_timing t = rt::time_on_ranks(
        [&](std::uint64_t v) { return bs.allgather_value(v); }, rt::timing_mode::wall, rt::timing_options{1, 3, 1},
        rcclx::gpu::stream_t{},
        [&](rcclx::gpu::stream_t) {
          ++calls;
          if (on_host) std::this_thread::sleep_for(std::chrono::milliseconds(5 + 10 * cfg.rank));
          rcclx::gpu::copy(out, mine.data(), count * sizeof(float));
        },
        [] { rcclx::gpu::device_synchronize(); }, out, count,
        [&](const std::vector<float>& h) {
          ++checks;
          return h == mine && cfg.rank != wrong;
        });
    rcclx::gpu::device_free(out);
    bool ok = calls == 1 + 1 + 3 && checks == 1 && t.identical == (odd < 0) && t.checked == (wrong < 0) && !t.fell_back;
    if (on_host) ok = ok && t.time_us >= 24000.0;  // rank 2's calls: 25 ms each
    return ok ? 0 : 1;
  });
}

TEST_CASE("time_on_ranks: the slowest rank's time, every rank's check, the same bits", "[testing][timing]") {
  REQUIRE(job(-1, -1) == 0);
  REQUIRE(job(1, -1) == 0);
  REQUIRE(job(-1, 2) == 0);
}

}  // namespace
