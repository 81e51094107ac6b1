// bench/rcclx_bench/timing.hpp: how rcclx-bench times one operation, the same way for the
// collective and for its baselines (like with like):
//   graph : K back-to-back calls captured in one CUDA/HIP graph; each replay timed with GPU events;
//           time = replay / K; the median over replays. Launch cost is paid per kernel as in an
//           application's captured decode step, and measured the same way for the empty kernel.
//   events: one call between two GPU events on the stream; the median over iterations.
//   wall  : host backend: std::chrono around one synchronous call; the median.
#pragma once

#include <rcclx/gpu/runtime.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace bench {
// Internal linkage: translation units of rcclx-bench built with and without RCCLX_CHECKS (each with
// its own copy of rcclx) include it too (checks_cost.hpp).
namespace {

enum class timing_mode { graph, events, wall };

inline const char* to_string(timing_mode m) {
  switch (m) {
    case timing_mode::graph: return "graph";
    case timing_mode::events: return "events";
    case timing_mode::wall: return "wall";
  }
  return "?";
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

struct timing_options {
  int warmup = 5;
  int iters = 20;
  int calls_per_graph = 32;
};

// Median time of one call of `enqueue(stream)` in microseconds. In graph mode, *fell_back is set
// when the capture was refused and events were used instead.
inline double time_us(timing_mode mode, const timing_options& o, rcclx::gpu::stream_t stream,
                      const std::function<void(rcclx::gpu::stream_t)>& enqueue, bool* fell_back = nullptr) {
  using rcclx::gpu::check;
  std::vector<double> samples;
  if (mode == timing_mode::wall) {
    (void)fell_back;
    for (int i = 0; i < o.warmup; ++i) enqueue(stream);
    for (int i = 0; i < o.iters; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      enqueue(stream);
      rcclx::gpu::device_synchronize();
      samples.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    return median(samples);
  }
#if RCCLX_BACKEND_HIP
  hipEvent_t e0, e1;
  check(hipEventCreate(&e0), "hipEventCreate");
  check(hipEventCreate(&e1), "hipEventCreate");
  auto record = [&](hipEvent_t e) { check(hipEventRecord(e, stream), "hipEventRecord"); };
  auto elapsed_ms = [&] {
    check(hipEventSynchronize(e1), "hipEventSynchronize");
    float ms = 0;
    check(hipEventElapsedTime(&ms, e0, e1), "hipEventElapsedTime");
    return static_cast<double>(ms);
  };
#elif RCCLX_BACKEND_CUDA
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  auto record = [&](cudaEvent_t e) { check(cudaEventRecord(e, stream), "cudaEventRecord"); };
  auto elapsed_ms = [&] {
    check(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    return static_cast<double>(ms);
  };
#endif
#if RCCLX_BACKEND_GPU
  if (mode == timing_mode::events) {
    for (int i = 0; i < o.warmup; ++i) enqueue(stream);
    for (int i = 0; i < o.iters; ++i) {
      record(e0);
      enqueue(stream);
      record(e1);
      samples.push_back(elapsed_ms() * 1000.0);
    }
  } else {
    const int k = o.calls_per_graph;
    // Captures K calls; false if the runtime refused something during capture (then the caller
    // falls back to event timing, and says so).
#  if RCCLX_BACKEND_HIP
    hipGraph_t graph = nullptr;
    hipGraphExec_t exec = nullptr;
    bool captured = hipStreamBeginCapture(stream, hipStreamCaptureModeRelaxed) == hipSuccess;
    if (captured) {
      try {
        for (int i = 0; i < k; ++i) enqueue(stream);
      } catch (const rcclx::error&) {
        captured = false;
      }
      captured = hipStreamEndCapture(stream, &graph) == hipSuccess && captured &&
                 hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0) == hipSuccess;
    }
    (void)hipGetLastError();
    auto replay = [&] { check(hipGraphLaunch(exec, stream), "hipGraphLaunch"); };
#  else
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    bool captured = cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) == cudaSuccess;
    if (captured) {
      try {
        for (int i = 0; i < k; ++i) enqueue(stream);
      } catch (const rcclx::error&) {
        captured = false;
      }
      captured = cudaStreamEndCapture(stream, &graph) == cudaSuccess && captured &&
                 cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    }
    (void)cudaGetLastError();
    auto replay = [&] { check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch"); };
#  endif
    if (captured) {
      for (int i = 0; i < std::max(1, o.warmup / 2); ++i) replay();
      for (int i = 0; i < o.iters; ++i) {
        record(e0);
        replay();
        record(e1);
        samples.push_back(elapsed_ms() * 1000.0 / k);
      }
    } else {
      if (fell_back) *fell_back = true;
      for (int i = 0; i < o.warmup; ++i) enqueue(stream);
      for (int i = 0; i < o.iters; ++i) {
        record(e0);
        enqueue(stream);
        record(e1);
        samples.push_back(elapsed_ms() * 1000.0);
      }
    }
#  if RCCLX_BACKEND_HIP
    if (exec) (void)hipGraphExecDestroy(exec);
    if (graph) (void)hipGraphDestroy(graph);
#  else
    if (exec) (void)cudaGraphExecDestroy(exec);
    if (graph) (void)cudaGraphDestroy(graph);
#  endif
  }
#  if RCCLX_BACKEND_HIP
  (void)hipEventDestroy(e0);
  (void)hipEventDestroy(e1);
#  else
  (void)cudaEventDestroy(e0);
  (void)cudaEventDestroy(e1);
#  endif
#endif
  return median(samples);
}

// Name of the current device, for the report.
inline std::string device_name() {
#if RCCLX_BACKEND_HIP
  int d = 0;
  rcclx::gpu::check(hipGetDevice(&d), "hipGetDevice");
  hipDeviceProp_t p;
  rcclx::gpu::check(hipGetDeviceProperties(&p, d), "hipGetDeviceProperties");
  return p.name;
#elif RCCLX_BACKEND_CUDA
  int d = 0;
  rcclx::gpu::check(cudaGetDevice(&d), "cudaGetDevice");
  cudaDeviceProp p;
  rcclx::gpu::check(cudaGetDeviceProperties(&p, d), "cudaGetDeviceProperties");
  return p.name;
#else
  return "host CPU (threads as ranks)";
#endif
}

}  // namespace
}  // namespace bench
