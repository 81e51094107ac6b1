// rcclx/testing/rank_timing.hpp: one measurement of a call made by every rank of a multi-process
// job (a process per rank, or per GPU): the ranks run the call once together and each checks its
// output, every rank's output bits are compared, then all ranks time the call alike (testing/
// timing.hpp), starting together; the time is the slowest rank's median.
//
//   rcclx::host::socket_bootstrap bs(cfg);
//   auto gather = [&](std::uint64_t v) { return bs.allgather_value(v); };   // every rank's value, in rank order
//   const rt::rank_timing t = rt::time_on_ranks(gather, rt::timing_mode::graph, rt::timing_options{}, stream,
//       [&](rcclx::gpu::stream_t s) { comm.allreduce(x, y, n, rcclx::reduce_op::sum, rcclx::algorithm::flat, s); },
//       [&] { comm.synchronize(stream); }, y, n, [&](const std::vector<float>& out) { return right(out); });
//   // t.time_us (slowest rank), t.checked (every rank's check true), t.identical (the same bits), t.fell_back
// Every rank must make the same calls (gather is collective); an exception from the call, done or
// check leaves on the rank that threw, whose peers then fail in their next gather.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../gpu/runtime.hpp"
#include "timing.hpp"

RCCLX_NAMESPACE_BEGIN
namespace testing {

struct rank_timing {
  double time_us = 0;     // the slowest rank's median time of one call
  bool checked = true;    // every rank's check of its output after the first call returned true
  bool identical = true;  // every rank's output after the first call the same bits
  bool fell_back = false;  // graph mode: this rank's capture was refused, events were used
};

// FNV-1a over `bytes` bytes: the output's fingerprint the ranks compare.
inline std::uint64_t fingerprint(const void* p, std::size_t bytes) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* c = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

// gather(v): every rank's std::uint64_t v, in rank order (collective). call(stream) enqueues one
// call; done() waits for it (and reports the rank's errors); out holds `count` elements of T after
// it, which check(const std::vector<T>&) -> bool reads once, after the first call.
template <class T, class Gather, class Call, class Done, class Check>
rank_timing time_on_ranks(Gather&& gather, timing_mode mode, const timing_options& o, gpu::stream_t stream,
                          Call&& call, Done&& done, const T* out, std::size_t count, Check&& check) {
  rank_timing r;
  (void)gather(std::uint64_t{0});  // every rank ready
  call(stream);
  done();
  std::vector<T> h(count);
  gpu::copy(h.data(), out, count * sizeof(T));
  const std::vector<std::uint64_t> oks = gather(std::uint64_t{check(h) ? 1u : 0u});
  r.checked = std::all_of(oks.begin(), oks.end(), [](std::uint64_t x) { return x == 1; });
  const std::vector<std::uint64_t> prints = gather(fingerprint(h.data(), count * sizeof(T)));
  r.identical = std::all_of(prints.begin(), prints.end(), [&](std::uint64_t x) { return x == prints[0]; });
  (void)gather(std::uint64_t{0});  // the timing starts together
  const double us = time_us(mode, o, stream, call, &r.fell_back);
  done();
  std::uint64_t bits;
  std::memcpy(&bits, &us, sizeof(bits));
  for (const std::uint64_t x : gather(bits)) {
    double t;
    std::memcpy(&t, &x, sizeof(t));
    r.time_us = std::max(r.time_us, t);
  }
  return r;
}

}  // namespace testing
RCCLX_NAMESPACE_END
