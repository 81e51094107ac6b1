// The host backend's speed per collective (docs/emulated_peers.md, "Speed"): 8 ranks, 8 x 4096
// floats per rank (128 KiB), each rank's ready-made launcher on a thread of its own, as a program
// of 8 ranks calls them; seconds per call printed, nothing asserted. Built on demand (not by CI),
// with emulated threads (rcclx_emulate_speed) and with one-thread blocks (rcclx_emulate_speed_one_thread):
//   ninja -C build/host rcclx_emulate_speed rcclx_emulate_speed_one_thread
//   taskset -c 0 build/host/tests/emulate/rcclx_emulate_speed
#include <rcclx/dda/allgather.hpp>
#include <rcclx/dda/allreduce.hpp>
#include <rcclx/dda/alltoall.hpp>
#include <rcclx/dda/reduce_scatter.hpp>
#include <rcclx/fused/add_rmsnorm.hpp>
#include <rcclx/fused/allreduce_rmsnorm.hpp>
#include <rcclx/lpc/allreduce.hpp>
#include <rcclx/testing/emulated_world.hpp>

#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace {

constexpr int n = 8, max_r = 8, barrier_blocks = 64;
constexpr std::size_t rows = 8, hidden = 4096, count = rows * hidden;

// f(r) on n threads at once, `calls` times each (every rank at its own pace); seconds per call.
double per_call(int calls, const std::function<void(int)>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> th;
  std::vector<std::exception_ptr> err(n);
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      try {
        for (int c = 0; c < calls; ++c) f(r);
      } catch (...) {
        err[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : th) t.join();
  for (auto& e : err)
    if (e) std::rethrow_exception(e);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls;
}

void report(const char* what, const std::function<void(int)>& f) {
  (void)per_call(2, f);  // warm: the pool's threads, the fiber stacks
  std::printf("%-58s %8.4f s per call\n", what, per_call(5, f));
}

}  // namespace

int main() {
  namespace fz = rcclx::fused;
  using rcclx::algorithm;
  const fz::tile_slots slots{barrier_blocks, static_cast<int>(rows)};
  rcclx::testing::emulated_world<max_r> world(n, std::size_t{16} << 20, fz::pad_blocks_for(barrier_blocks, static_cast<int>(rows)));
  std::vector<std::vector<float>> in(n), out(n), res(n), gathered(n);
  std::vector<float> weight(hidden, 1.0f);
  for (int r = 0; r < n; ++r) {
    in[r].assign(count, 0.25f * static_cast<float>(r + 1));
    out[r].assign(count, 0.0f);
    res[r].assign(count, 0.5f);
    gathered[r].assign(count * n, 0.0f);
  }
  std::printf("%s, %d ranks, %zu floats per rank\n",
              rcclx::emulate_threads ? "emulated threads (RCCLX_EMULATE_THREADS=1)" : "one-thread blocks", n, count);
  const auto t = [&](int r) { return world.table<float>(r); };
  report("dda::allreduce flat", [&](int r) {
    rcclx::dda::allreduce(t(r), in[r].data(), out[r].data(), count, rcclx::reduce_op::sum, algorithm::flat);
  });
  report("dda::allreduce tree", [&](int r) {
    rcclx::dda::allreduce(t(r), in[r].data(), out[r].data(), count, rcclx::reduce_op::sum, algorithm::tree);
  });
  report("lpc::allreduce (FP8 e4m3 on the wire)",
         [&](int r) { rcclx::lpc::allreduce(t(r), in[r].data(), out[r].data(), count); });
  report("dda::allgather", [&](int r) { rcclx::dda::allgather(t(r), in[r].data(), gathered[r].data(), count); });
  report("dda::reduce_scatter", [&](int r) { rcclx::dda::reduce_scatter(t(r), in[r].data(), out[r].data(), count); });
  report("dda::alltoall", [&](int r) { rcclx::dda::alltoall(t(r), in[r].data(), out[r].data(), count); });
  for (const algorithm a : {algorithm::flat, algorithm::tree}) {
    const std::string what = std::string("fused::allreduce_rmsnorm ") + rcclx::to_string(a) + ", 8 rows";
    report(what.c_str(), [&, a](int r) {
      const fz::rmsnorm_args<float> args{in[r].data(), res[r].data(), weight.data(), out[r].data(), rows, hidden, 1e-6f};
      fz::allreduce_rmsnorm(t(r), args, slots, a);
    });
  }
  report("fused::add_rmsnorm (one rank's, no communication)", [&](int r) {
    const fz::rmsnorm_args<float> args{in[r].data(), res[r].data(), weight.data(), out[r].data(), rows, hidden, 1e-6f};
    fz::add_rmsnorm(args);
  });
  return 0;
}
