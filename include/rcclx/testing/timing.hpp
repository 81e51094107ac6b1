// rcclx/testing/timing.hpp: time one call of some GPU work the way rcclx's benchmarks do, so that a
// collective, a fused kernel and their baselines are measured alike:
//   graph : K back-to-back calls captured in one CUDA/HIP graph, each replay between GPU events;
//           time = replay / K, the median over replays. Launch cost is paid per kernel as in an
//           application's captured decode step.
//   events: one call between two GPU events on the stream; the median over iterations.
//   wall  : host backend: the host's clock around one synchronous call; the median.
// Warm-up calls (graph: replays) come first and are not timed.
//
//   namespace rt = rcclx::testing;
//   bool fell_back = false;   // graph: the runtime refused the capture, events were used
//   const double us = rt::time_us(rt::timing_mode::graph, rt::timing_options{}, stream,
//                                 [&](rcclx::gpu::stream_t s) { my_kernel<<<g, b, 0, s>>>(args); }, &fell_back);
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include "../gpu/event_timer.hpp"
#include "../gpu/runtime.hpp"

RCCLX_NAMESPACE_BEGIN
namespace testing {

enum class timing_mode { graph, events, wall };

inline const char* to_string(timing_mode m) {
  return m == timing_mode::graph ? "graph" : m == timing_mode::events ? "events" : "wall";
}

struct timing_options {
  int warmup = 5;            // untimed calls first (graph: replays, half as many, at least one)
  int iters = 20;            // timed calls (graph: replays)
  int calls_per_graph = 32;  // K
};

// The median (the mean of the middle two of an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// One call of the work, enqueued on the stream it is given.
using enqueue_fn = std::function<void(gpu::stream_t)>;

namespace detail {
#if RCCLX_BACKEND_GPU
// K calls of enqueue captured in one graph, or null if the runtime refused the capture or a call
// threw rcclx::error during it.
inline gpu::graph_exec_t try_capture(gpu::stream_t stream, int k, const enqueue_fn& enqueue) {
  gpu::graph_exec_t exec{};
  bool captured = true;
  try {
    gpu::stream_begin_capture(stream);
  } catch (const error&) {
    captured = false;
  }
  if (captured) {
    try {
      for (int i = 0; i < k; ++i) enqueue(stream);
    } catch (const error&) {
      captured = false;
    }
    try {  // ended even after a refused call: the stream leaves capture mode
      exec = gpu::stream_end_capture(stream);
    } catch (const error&) {
      captured = false;
    }
  }
  try {  // a refusal is also the runtime's last error, which the next launch check would report
    gpu::check_launch("capture");
  } catch (const error&) {
  }
  if (!captured) {
    gpu::graph_destroy(exec);
    exec = {};
  }
  return exec;
}
#endif
}  // namespace detail

// Every timed sample of one call of `enqueue(stream)`, in microseconds. In graph mode *fell_back is
// set when the capture was refused and events were used instead; the host backend always times
// the wall clock.
inline std::vector<double> samples_us(timing_mode mode, const timing_options& o, gpu::stream_t stream,
                                      const enqueue_fn& enqueue, bool* fell_back = nullptr) {
  std::vector<double> samples;
  gpu::event_timer t;
#if RCCLX_BACKEND_GPU
  if (mode == timing_mode::graph) {
    const int k = o.calls_per_graph;
    if (const gpu::graph_exec_t exec = detail::try_capture(stream, k, enqueue)) {
      for (int i = 0; i < std::max(1, o.warmup / 2); ++i) gpu::graph_launch(exec, stream);
      for (int i = 0; i < o.iters; ++i) {
        t.start(stream);
        gpu::graph_launch(exec, stream);
        samples.push_back(t.stop_ms(stream) * 1000.0 / k);
      }
      gpu::graph_destroy(exec);
      return samples;
    }
    if (fell_back) *fell_back = true;
  }
#else
  (void)mode;
  (void)fell_back;
#endif
  for (int i = 0; i < o.warmup; ++i) enqueue(stream);
  for (int i = 0; i < o.iters; ++i) {
    t.start(stream);
    enqueue(stream);
    samples.push_back(t.stop_ms(stream) * 1000.0);
  }
  return samples;
}

// The median time of one call, in microseconds (samples_us).
inline double time_us(timing_mode mode, const timing_options& o, gpu::stream_t stream, const enqueue_fn& enqueue,
                      bool* fell_back = nullptr) {
  return median(samples_us(mode, o, stream, enqueue, fell_back));
}

}  // namespace testing
RCCLX_NAMESPACE_END
