// rcclx/gpu/event_timer.hpp: the elapsed time of the work a stream runs between two points, for
// timing on the device's own clock: two GPU events recorded on the stream. The host backend, whose
// work runs synchronously on the calling thread, reads the host's steady clock instead.
//
//   rcclx::gpu::event_timer t;
//   t.start(stream);
//   my_kernel<<<grid, block, 0, stream>>>(...);
//   const double ms = t.stop_ms(stream);   // waits until the stream has reached the stop event
//
// testing/timing.hpp builds the benchmarks' timing method (graph replays, medians) on it.
#pragma once

#include <chrono>

#include "runtime.hpp"

RCCLX_NAMESPACE_BEGIN
namespace gpu {

class event_timer {
 public:
#if RCCLX_BACKEND_HIP
  event_timer() {
    check(hipEventCreate(&e0_), "hipEventCreate");
    check(hipEventCreate(&e1_), "hipEventCreate");
  }
  ~event_timer() {
    (void)hipEventDestroy(e0_);
    (void)hipEventDestroy(e1_);
  }
  void start(stream_t s) { check(hipEventRecord(e0_, s), "hipEventRecord"); }
  double stop_ms(stream_t s) {
    check(hipEventRecord(e1_, s), "hipEventRecord");
    check(hipEventSynchronize(e1_), "hipEventSynchronize");
    float ms = 0;
    check(hipEventElapsedTime(&ms, e0_, e1_), "hipEventElapsedTime");
    return ms;
  }
#elif RCCLX_BACKEND_CUDA
  event_timer() {
    check(cudaEventCreate(&e0_), "cudaEventCreate");
    check(cudaEventCreate(&e1_), "cudaEventCreate");
  }
  ~event_timer() {
    (void)cudaEventDestroy(e0_);
    (void)cudaEventDestroy(e1_);
  }
  void start(stream_t s) { check(cudaEventRecord(e0_, s), "cudaEventRecord"); }
  double stop_ms(stream_t s) {
    check(cudaEventRecord(e1_, s), "cudaEventRecord");
    check(cudaEventSynchronize(e1_), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, e0_, e1_), "cudaEventElapsedTime");
    return ms;
  }
#else
  event_timer() = default;
  void start(stream_t) { t0_ = std::chrono::steady_clock::now(); }
  double stop_ms(stream_t) {
    device_synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  }
#endif
  event_timer(const event_timer&) = delete;
  event_timer& operator=(const event_timer&) = delete;

 private:
#if RCCLX_BACKEND_HIP
  hipEvent_t e0_{}, e1_{};
#elif RCCLX_BACKEND_CUDA
  cudaEvent_t e0_{}, e1_{};
#else
  std::chrono::steady_clock::time_point t0_;
#endif
};

}  // namespace gpu
RCCLX_NAMESPACE_END
