// testing/rank_inputs.hpp: splitmix64 against its published sequences (seeds 0 and 1234567), the
// inputs' range and grid, and emulated_fill on emulated ranks: every rank's elements the host's
// rank_input bit for bit, or the poison bytes, and nothing past the count; copy_rank_inputs the same.
#include <rcclx/core/types.hpp>
#include <rcclx/testing/emulated_bench.hpp>
#include <rcclx/testing/rank_inputs.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "../support/catch.hpp"

namespace {

namespace rt = rcclx::testing;
constexpr bool on_host = rcclx::current_backend == rcclx::backend::host;

TEST_CASE("splitmix64: the published sequences", "[testing]") {
  constexpr std::uint64_t step = 0x9E3779B97F4A7C15ull;
  CHECK(rt::splitmix64(0) == 0xE220A8397B1DCDAFull);
  CHECK(rt::splitmix64(step) == 0x6E789E6AA1B965F4ull);
  CHECK(rt::splitmix64(1234567) == 6457827717110365317ull);
  CHECK(rt::splitmix64(1234567 + step) == 3203168211198807973ull);
  for (std::uint64_t s : {0ull, 1ull, 99ull}) {
    const double u = rt::unit_uniform(s);
    CHECK((u >= 0.0 && u < 1.0));
    CHECK(u == static_cast<double>(rt::splitmix64(s) >> 11) * 0x1p-53);
  }
}

TEST_CASE("rank_input: in -1 <= x < 1 on a grid of 2^-23, different per rank", "[testing]") {
  int same = 0;
  double sum = 0;
  for (std::size_t i = 0; i < 4096; ++i) {
    const float x = rt::rank_input(0, i);
    REQUIRE((x >= -1.0f && x < 1.0f));
    CHECK(std::ldexp(static_cast<double>(x), 23) == std::floor(std::ldexp(static_cast<double>(x), 23)));
    same += x == rt::rank_input(1, i);
    sum += x;
  }
  CHECK(same < 4);
  CHECK(std::fabs(sum / 4096) < 0.05);
  CHECK(static_cast<float>(rt::rank_input<rcclx::bf16>(3, 7)) == static_cast<float>(rcclx::bf16(rt::rank_input(3, 7))));
}

TEMPLATE_TEST_CASE("emulated_fill: every rank's inputs or the poison, on the device", "[testing][emulated]", float,
                   rcclx::bf16) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = TestType;
  constexpr int n = 3;
  const std::size_t count = 1000, bytes = (count + 8) * sizeof(T);
  rt::emulated_bench<4> b(n, 1024, 4);
  std::vector<T*> out;
  for (int r = 0; r < n; ++r) out.push_back(b.alloc<T>(bytes));
  for (const bool poison : {false, true}) {
    const rt::emulated_fill<T, 4> f{{out[0], out[1], out[2], nullptr}, count, poison};
    const auto got = b.outputs_after([&](rcclx::gpu::stream_t s) { rt::launch_emulated(n, 2, on_host ? 1 : 64, f, s); }, out, bytes);
    for (int r = 0; r < n; ++r) {
      CAPTURE(poison, r);
      bool all = true;
      for (std::size_t i = 0; i < count; ++i) {
        const T want = rt::rank_input<T>(r, i);
        all = all && (poison ? got[r][i * sizeof(T)] == 0x5A && got[r][(i + 1) * sizeof(T) - 1] == 0x5A
                             : std::memcmp(&want, got[r].data() + i * sizeof(T), sizeof(T)) == 0);
      }
      CHECK(all);
    }
  }
  std::vector<T> h(count + 1, T(7.0f));
  rt::copy_rank_inputs(out[2], count, 2);
  rcclx::gpu::copy(h.data(), out[2], (count + 1) * sizeof(T));
  for (std::size_t i = 0; i < count; ++i) {
    const T want = rt::rank_input<T>(2, i);
    REQUIRE(std::memcmp(&want, &h[i], sizeof(T)) == 0);
  }
  const unsigned char* past = reinterpret_cast<const unsigned char*>(&h[count]);
  CHECK((past[0] == 0x5A && past[sizeof(T) - 1] == 0x5A));  // the poison fill's, untouched
}

}  // namespace
