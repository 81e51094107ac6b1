// testing/emulated_bench.hpp: outputs are poisoned before the call and read back per rank; the
// device-side comparison finds a rank whose output differs in one element; a failed measurement
// becomes its row's error and leaves the world usable; timings come back with the device drained.
// The exchange-floor baselines of testing/emulated_kernels.hpp complete on every rank, call after
// call, and a rank that never publishes is a timeout error.
#include <rcclx/testing/emulated_bench.hpp>
#include <rcclx/testing/emulated_kernels.hpp>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "../support/catch.hpp"

namespace {

namespace rt = rcclx::testing;
constexpr bool on_host = rcclx::current_backend == rcclx::backend::host;
constexpr int threads = on_host ? 1 : 64;

// Every rank writes i * 3 to out[i] for i < count (rank `odd`, if any, writes 7 at element `at`).
struct writer {
  float* out[4];
  std::size_t count, at;
  int odd;
  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    const std::size_t stride = static_cast<std::size_t>(ix.num_blocks) * static_cast<std::size_t>(g.size());
    for (std::size_t i = static_cast<std::size_t>(ix.block) * g.size() + g.thread_rank(); i < count; i += stride)
      out[ix.rank][i] = ix.rank == odd && i == at ? 7.0f : static_cast<float>(i * 3);
  }
};

struct row {
  std::string error;
};

}  // namespace

TEST_CASE("emulated_bench: outputs, the ranks' comparison, a failed row, a timing", "[testing][emulated]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  rt::emulated_bench<4> b(3, 1024, 4);
  const std::size_t count = 300;
  std::vector<float*> out;
  for (int r = 0; r < 3; ++r) out.push_back(b.alloc<float>((count + 8) * sizeof(float)));
  writer w{{out[0], out[1], out[2], nullptr}, count, 5, -1};
  const auto launch = [&](rcclx::gpu::stream_t s) { rt::launch_emulated(3, 2, threads, w, s); };
  const auto got = b.outputs_after(launch, out, (count + 8) * sizeof(float));
  REQUIRE(got.size() == 3);
  for (const auto& g : got) {
    float v;
    std::memcpy(&v, g.data() + 10 * sizeof(float), sizeof(float));
    CHECK(v == 30.0f);
    CHECK(g[count * sizeof(float)] == 0x5A);  // past the call's output: the poison
  }
  CHECK(b.ranks_identical(out, count, 2, threads));
  w.odd = 2;
  launch(b.stream());
  CHECK_FALSE(b.ranks_identical(out, count, 2, threads));
  CHECK(b.ranks_identical(out, 5, 2, threads));  // the differing element is not compared

  row r;
  b.guard(r, [] { throw std::runtime_error("no such shape"); });
  CHECK(r.error == "no such shape");
  bool fell_back = false;
  const double us = b.time(rt::timing_mode::events, rt::timing_options{1, 2, 1}, launch, fell_back);
  CHECK(us >= 0.0);
  CHECK_FALSE(fell_back);
}

// A baseline on every rank but `absent`.
TEST_CASE("emulated_ll_probe and emulated_ll_exchange: every rank's packets land, a missing rank times out",
          "[testing][emulated]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  rt::emulated_bench<4> b(3, 4096, 4, rcclx::core::ll_layout{4, 4096}, rcclx_test::absent_timeout_ns);
  const rt::emulated_ll_probe<4> probe{b.world().device_tables<unsigned char>()};
  const rt::emulated_ll_exchange<float, 4> exchange{b.world().device_tables<float>(), 1000};
  for (int call = 0; call < 3; ++call) {  // the flags' epochs advance
    rt::launch_emulated(3, 1, threads, probe, b.stream());
    rt::launch_emulated(3, 2, threads, exchange, b.stream());
    rcclx::gpu::device_synchronize();
    REQUIRE_NOTHROW(b.world().throw_if_error());
  }
  row r;
  b.guard(r, [&] {
    rt::launch_emulated(3, 1, threads, rt::without_rank(probe, 1), b.stream());
    rcclx::gpu::device_synchronize();
    b.world().throw_if_error();
  });
  CHECK_FALSE(r.error.empty());
}

