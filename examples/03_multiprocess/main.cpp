// Example 03: one process per rank, the way an inference server runs: a socket rendezvous, a
// communicator (symmetric workspace + peer IPC handles), AllReduce on a stream through the
// workspace and zero-copy from a registered buffer, a captured graph replayed, and the
// registration cache's counters.
//
//   rcclx_example_multiprocess [N]                          forks N ranks itself (default 4)
//   scripts/launch -n 4 -- rcclx_example_multiprocess       torchrun-style: one process per rank
//
// On a GPU build every rank uses GPU RCCLX_DEVICE (scripts/launch sets it) or local_rank mod the
// GPU count; several processes may share one GPU (real IPC handles, time-sliced kernels).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <rcclx/host/communicator.hpp>
#include <rcclx/host/fork_ranks.hpp>
#include <rcclx/host/socket_bootstrap.hpp>

namespace {

float value(int rank, std::size_t i) { return static_cast<float>((i + static_cast<std::size_t>(rank) * 3) % 17) - 8.0f; }

bool check(const float* device_out, int n, std::size_t count) {
  std::vector<float> h(count);
  rcclx::gpu::copy(h.data(), device_out, count * sizeof(float));
  for (std::size_t i = 0; i < count; ++i) {
    double ref = 0;
    for (int r = 0; r < n; ++r) ref += value(r, i);
    if (h[i] != static_cast<float>(ref)) {
      std::printf("  element %zu = %g, expected %g\n", i, static_cast<double>(h[i]), ref);
      return false;
    }
  }
  return true;
}

int run_rank(const rcclx::host::launch_config& cfg) {
  if (rcclx::current_backend != rcclx::backend::host) {
    const int gpus = rcclx::gpu::device_count();
    if (gpus == 0) {
      std::printf("[rank %d] built for a GPU but none is present; rebuild with RCCLX_BACKEND=host\n", cfg.rank);
      return 0;
    }
    rcclx::gpu::set_device(cfg.device % gpus);
  }
  rcclx::host::socket_bootstrap bs(cfg);
  rcclx::host::communicator<8> comm(bs);
  const int n = comm.num_ranks(), rank = comm.rank();
  rcclx::gpu::stream_t stream = rcclx::gpu::stream_create();

  const std::size_t count = 1 << 20;  // 4 MiB of floats
  auto* x = static_cast<float*>(rcclx::host::shareable_malloc(count * sizeof(float)));
  auto* y = static_cast<float*>(rcclx::host::shareable_malloc(count * sizeof(float)));
  std::vector<float> h(count);
  for (std::size_t i = 0; i < count; ++i) h[i] = value(rank, i);
  bool ok = true;

  // 1. Through the workspace: the kernel copies x into this rank's symmetric buffer.
  rcclx::gpu::copy(x, h.data(), count * sizeof(float));
  comm.allreduce(x, y, count, rcclx::reduce_op::sum, rcclx::algorithm::automatic, stream);
  comm.synchronize(stream);
  ok = check(y, n, count) && ok;

  // 2. Zero-copy: x registered on every rank; peers read it where it is. (Zero-copy never writes
  //    the input: flat out of place, as here, or tree in place; other calls use the workspace.)
  const std::size_t small = 1 << 16;  // 256 KiB: a decode-sized message, flat
  comm.register_buffer(x, count * sizeof(float));
  const auto t0 = std::chrono::steady_clock::now();
  const int iters = 20;
  for (int k = 0; k < iters; ++k) comm.allreduce(x, y, small, rcclx::reduce_op::sum, rcclx::algorithm::flat, stream);
  comm.synchronize(stream);
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
  ok = check(y, n, small) && ok;
  comm.unregister_buffer(x);

  // 3. A captured graph: captured on an unregistered buffer, patched after capture, replayed.
  comm.begin_capture(stream);
  comm.allreduce(x, y, count / 4, rcclx::reduce_op::sum, rcclx::algorithm::flat, stream);
  rcclx::host::graph g = comm.end_capture(stream);
  for (int k = 0; k < 3; ++k) g.launch(stream);
  comm.synchronize(stream);
  ok = check(y, n, count / 4) && ok;

  const auto s = comm.cache_stats();
  std::printf("[rank %d/%d pid %d] allreduce of %zu floats: %s; %.1f us per zero-copy call of %zu floats "
              "(wall clock, launch included); IPC cache: %llu opens, %llu hits, %llu closes, %zu open\n",
              rank, n, static_cast<int>(::getpid()), count, ok ? "correct" : "WRONG", us, small,
              static_cast<unsigned long long>(s.opens), static_cast<unsigned long long>(s.hits),
              static_cast<unsigned long long>(s.closes), s.open_now);
  std::fflush(stdout);
  rcclx::gpu::stream_destroy(stream);
  rcclx::host::shareable_free(x);
  rcclx::host::shareable_free(y);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  // Under a launcher (WORLD_SIZE set) this process is one rank; otherwise fork N ranks here
  // (before any GPU call: a GPU context does not survive fork).
  const int n = argc > 1 ? std::atoi(argv[1]) : 4;
  if (!rcclx::host::launched_by_launcher()) {
    if (n < 2 || n > 8) {
      std::printf("usage: %s [N in 2..8]\n", argv[0]);
      return 2;
    }
    std::printf("rcclx multi-process example: %d processes, one rank each\n", n);
  }
  const int rc = rcclx::host::run_ranks(n, run_rank);
  if (!rcclx::host::launched_by_launcher()) std::printf("%s\n", rc ? "FAILED" : "all ranks correct");
  return rc;
}
