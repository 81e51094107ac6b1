// tests/support/rank_runner.hpp: call a per-rank host launcher once per rank "at once", as separate
// processes would: on the host backend from one std::thread per rank (each launcher runs its rank's
// blocks as threads), on a GPU from one stream per rank (the ranks' kernels run concurrently).
#pragma once

#include <rcclx/gpu/runtime.hpp>

#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "catch.hpp"

namespace rcclx_test {

struct rank_runner {
  int n;
  std::vector<rcclx::gpu::stream_t> streams;
  explicit rank_runner(int num_ranks) : n(num_ranks) {
    for (int r = 0; r < n; ++r)
      streams.push_back(rcclx::current_backend == rcclx::backend::host ? nullptr : rcclx::gpu::stream_create());
  }
  rank_runner(const rank_runner&) = delete;
  rank_runner& operator=(const rank_runner&) = delete;
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

// Blocks per rank: the launcher's default on the host; on a GPU, few enough that every rank's
// kernel fits on the device at once (ranks share one GPU here; each would have its own in a job).
inline int launcher_blocks_per_rank() { return rcclx::current_backend == rcclx::backend::host ? 0 : 4; }

// Kernels of different ranks must run concurrently on one GPU; compute-sanitizer serialises
// kernels (RCCLX_TEST_QUICK=1 marks those runs), so there they would only time out.
inline bool concurrent_kernels_possible() {
  const char* q = std::getenv("RCCLX_TEST_QUICK");
  return rcclx::current_backend == rcclx::backend::host || !(q && q[0] == '1');
}

}  // namespace rcclx_test
