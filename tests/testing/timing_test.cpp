// testing/timing.hpp: the benchmarks' timing method. The median; how many calls each mode makes
// (warm-up first, then one per sample; graph: K calls captured once, replays timed); a capture the
// runtime refuses (a call throws while the stream is captured) falls back to events and says so;
// gpu::event_timer measures what runs between its two points.
#include <rcclx/gpu/event_timer.hpp>
#include <rcclx/testing/emulated_kernels.hpp>
#include <rcclx/testing/launch.hpp>
#include <rcclx/testing/timing.hpp>

#include <chrono>
#include <thread>
#include <vector>

#include "../support/catch.hpp"

namespace {

namespace rt = rcclx::testing;
using rcclx::gpu::stream_t;
constexpr bool on_host = rcclx::current_backend == rcclx::backend::host;

TEST_CASE("median: middle element, mean of the middle two, 0 for none", "[testing][timing]") {
  CHECK(rt::median({}) == 0.0);
  CHECK(rt::median({7.0}) == 7.0);
  CHECK(rt::median({3.0, 1.0, 2.0}) == 2.0);
  CHECK(rt::median({4.0, 1.0, 3.0, 2.0}) == 2.5);
  CHECK(std::string(rt::to_string(rt::timing_mode::graph)) == "graph");
  CHECK(std::string(rt::to_string(rt::timing_mode::events)) == "events");
  CHECK(std::string(rt::to_string(rt::timing_mode::wall)) == "wall");
}

TEST_CASE("samples_us: warm-up calls, then one timed call per sample", "[testing][timing]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const stream_t s = on_host ? stream_t{} : rcclx::gpu::stream_create();
  const rt::timing_options o{3, 5, 4};
  for (const rt::timing_mode m : {rt::timing_mode::events, rt::timing_mode::wall}) {
    int calls = 0;
    const auto v = rt::samples_us(m, o, s, [&](stream_t st) {
      ++calls;
      rt::launch_emulated(2, 1, on_host ? 1 : 64, rt::emulated_empty{}, st);
    });
    CHECK(calls == o.warmup + o.iters);
    REQUIRE(v.size() == static_cast<std::size_t>(o.iters));
    for (const double x : v) CHECK(x >= 0.0);
  }
  if (!on_host) rcclx::gpu::stream_destroy(s);
}

TEST_CASE("samples_us graph: K calls captured once, replays timed; a refused capture falls back to events",
          "[testing][timing]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const stream_t s = on_host ? stream_t{} : rcclx::gpu::stream_create();
  const rt::timing_options o{2, 6, 4};
  int calls = 0;
  bool fell_back = false;
  auto empty = [&](stream_t st) {
    ++calls;
    rt::launch_emulated(2, 1, on_host ? 1 : 64, rt::emulated_empty{}, st);
  };
  const auto v = rt::samples_us(rt::timing_mode::graph, o, s, empty, &fell_back);
  REQUIRE(v.size() == static_cast<std::size_t>(o.iters));
  CHECK_FALSE(fell_back);
  // GPU: only the captured calls; the host backend has no graphs and makes every call.
  CHECK(calls == (on_host ? o.warmup + o.iters : o.calls_per_graph));

  // A call that throws while the stream is captured: no graph, events instead, and the stream
  // usable afterwards.
  calls = 0;
  const auto w = rt::samples_us(rt::timing_mode::graph, o, s, [&](stream_t st) {
    if (rcclx::gpu::stream_is_capturing(st)) throw rcclx::error(rcclx::errc::unsupported, "not in a graph");
    empty(st);
  }, &fell_back);
  CHECK(w.size() == static_cast<std::size_t>(o.iters));
  CHECK(fell_back == !on_host);
  CHECK(calls == o.warmup + o.iters);
  rt::launch_emulated(2, 1, on_host ? 1 : 64, rt::emulated_empty{}, s);
  rcclx::gpu::device_synchronize();
  if (!on_host) rcclx::gpu::stream_destroy(s);
}

TEST_CASE("event_timer: the time of what runs between start and stop", "[testing][timing]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  rcclx::gpu::event_timer t;
  t.start(stream_t{});
  if (on_host) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double ms = t.stop_ms(stream_t{});
  CHECK(ms >= (on_host ? 19.0 : 0.0));
  CHECK(ms < 10000.0);
}

TEST_CASE("time_us is the median of samples_us", "[testing][timing]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const rt::timing_options o{0, 3, 1};
  int calls = 0;
  const double us = rt::time_us(rt::timing_mode::wall, o, stream_t{}, [&](stream_t) {
    if (on_host) std::this_thread::sleep_for(std::chrono::milliseconds(++calls == 2 ? 30 : 10));
  });
  if (on_host) CHECK((us >= 9000.0 && us < 29000.0));
}

}  // namespace
