// bench/common/timing.hpp: how the tools time one operation, the same way for a collective and for
// its baselines (like with like):
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

// The runtime's name for a call or a type: hipX or cudaX (GPU backends); RCCLX_BENCH_CHECK(X, args)
// calls X and turns a failure into rcclx::error naming the call.
#if RCCLX_BACKEND_HIP
#  define RCCLX_BENCH_RT(name) hip##name
#  define RCCLX_BENCH_RT_NAME(name) "hip" #name
#elif RCCLX_BACKEND_CUDA
#  define RCCLX_BENCH_RT(name) cuda##name
#  define RCCLX_BENCH_RT_NAME(name) "cuda" #name
#endif
#define RCCLX_BENCH_CHECK(name, ...) rcclx::gpu::check(RCCLX_BENCH_RT(name)(__VA_ARGS__), RCCLX_BENCH_RT_NAME(name))

namespace bench {
// Internal linkage: translation units of rcclx-bench built with and without RCCLX_CHECKS (each with
// its own copy of rcclx) include it too (rcclx_bench/checks_cost.hpp).
namespace {

constexpr bool on_host = rcclx::current_backend == rcclx::backend::host;

enum class timing_mode { graph, events, wall };

inline const char* to_string(timing_mode m) {
  return m == timing_mode::graph ? "graph" : m == timing_mode::events ? "events" : "wall";
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

// Elapsed milliseconds between start() and stop_ms() on a stream: GPU events, or the host's clock
// around synchronous work (host backend).
class event_timer {
 public:
#if RCCLX_BACKEND_GPU
  event_timer() {
    RCCLX_BENCH_CHECK(EventCreate, &e0_);
    RCCLX_BENCH_CHECK(EventCreate, &e1_);
  }
  ~event_timer() {
    (void)RCCLX_BENCH_RT(EventDestroy)(e0_);
    (void)RCCLX_BENCH_RT(EventDestroy)(e1_);
  }
  void start(rcclx::gpu::stream_t s) { RCCLX_BENCH_CHECK(EventRecord, e0_, s); }
  double stop_ms(rcclx::gpu::stream_t s) {
    RCCLX_BENCH_CHECK(EventRecord, e1_, s);
    RCCLX_BENCH_CHECK(EventSynchronize, e1_);
    float ms = 0;
    RCCLX_BENCH_CHECK(EventElapsedTime, &ms, e0_, e1_);
    return ms;
  }
#else
  event_timer() = default;
  void start(rcclx::gpu::stream_t) { t0_ = std::chrono::steady_clock::now(); }
  double stop_ms(rcclx::gpu::stream_t) {
    rcclx::gpu::device_synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  }
#endif
  event_timer(const event_timer&) = delete;
  event_timer& operator=(const event_timer&) = delete;

 private:
#if RCCLX_BACKEND_GPU
  RCCLX_BENCH_RT(Event_t) e0_{}, e1_{};
#else
  std::chrono::steady_clock::time_point t0_;
#endif
};

using enqueue_fn = std::function<void(rcclx::gpu::stream_t)>;

#if RCCLX_BACKEND_GPU
// K calls of enqueue captured in one graph, or null if the runtime refused something during the
// capture (the caller then falls back to events, and says so).
inline RCCLX_BENCH_RT(GraphExec_t) capture(rcclx::gpu::stream_t stream, int k, const enqueue_fn& enqueue) {
  RCCLX_BENCH_RT(Graph_t) graph = nullptr;
  RCCLX_BENCH_RT(GraphExec_t) exec = nullptr;
  bool captured = RCCLX_BENCH_RT(StreamBeginCapture)(stream, RCCLX_BENCH_RT(StreamCaptureModeRelaxed)) ==
                  RCCLX_BENCH_RT(Success);
  if (captured) {
    try {
      for (int i = 0; i < k; ++i) enqueue(stream);
    } catch (const rcclx::error&) {
      captured = false;
    }
#  if RCCLX_BACKEND_HIP
    captured = hipStreamEndCapture(stream, &graph) == hipSuccess && captured &&
               hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0) == hipSuccess;
#  else
    captured = cudaStreamEndCapture(stream, &graph) == cudaSuccess && captured &&
               cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
#  endif
  }
  (void)RCCLX_BENCH_RT(GetLastError)();
  if (graph) (void)RCCLX_BENCH_RT(GraphDestroy)(graph);
  if (!captured && exec) (void)RCCLX_BENCH_RT(GraphExecDestroy)(exec);
  return captured ? exec : nullptr;
}
#endif

// Every timed sample of one call of `enqueue(stream)`, in microseconds (warm-up calls first). In
// graph mode, *fell_back is set when the capture was refused and events were used instead.
inline std::vector<double> samples_us(timing_mode mode, const timing_options& o, rcclx::gpu::stream_t stream,
                                      const enqueue_fn& enqueue, bool* fell_back = nullptr) {
  std::vector<double> samples;
  event_timer t;
  const auto each_call = [&] {
    for (int i = 0; i < o.warmup; ++i) enqueue(stream);
    for (int i = 0; i < o.iters; ++i) {
      t.start(stream);
      enqueue(stream);
      samples.push_back(t.stop_ms(stream) * 1000.0);
    }
  };
#if RCCLX_BACKEND_GPU
  if (mode == timing_mode::graph) {
    const int k = o.calls_per_graph;
    if (const auto exec = capture(stream, k, enqueue)) {
      const auto replay = [&] { RCCLX_BENCH_CHECK(GraphLaunch, exec, stream); };
      for (int i = 0; i < std::max(1, o.warmup / 2); ++i) replay();
      for (int i = 0; i < o.iters; ++i) {
        t.start(stream);
        replay();
        samples.push_back(t.stop_ms(stream) * 1000.0 / k);
      }
      (void)RCCLX_BENCH_RT(GraphExecDestroy)(exec);
      return samples;
    }
    if (fell_back) *fell_back = true;
  }
#else
  (void)mode;
  (void)fell_back;
#endif
  each_call();
  return samples;
}

// The median time of one call, in microseconds (samples_us).
inline double time_us(timing_mode mode, const timing_options& o, rcclx::gpu::stream_t stream,
                      const enqueue_fn& enqueue, bool* fell_back = nullptr) {
  return median(samples_us(mode, o, stream, enqueue, fell_back));
}

// Name of the current device, for the reports.
inline std::string device_name() {
#if RCCLX_BACKEND_GPU
  int d = 0;
  RCCLX_BENCH_CHECK(GetDevice, &d);
#  if RCCLX_BACKEND_HIP
  hipDeviceProp_t p;
#  else
  cudaDeviceProp p;
#  endif
  RCCLX_BENCH_CHECK(GetDeviceProperties, &p, d);
  return p.name;
#else
  return "host CPU (threads as ranks)";
#endif
}

// "host", "cuda" or "hip": the reports' backend.
constexpr const char* backend_label() {
  return on_host ? "host" : rcclx::current_backend == rcclx::backend::cuda ? "cuda" : "hip";
}

}  // namespace
}  // namespace bench
