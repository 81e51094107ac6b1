// Packed FP8 codecs: every packed width (2, 4, 8, 16) from float and bf16, and decode to float and
// bf16, equal the scalar software codec element by element, computed where the packed code runs
// (a GPU kernel on GPU backends, host threads on the host backend). GPU only: the hardware path
// equals the software path over all 2^32 float32 inputs (saturating e4m3/e5m2 use sm_89+ cvt on
// NVIDIA; FNUZ formats use v_cvt_pk_* on gfx94x), all 65536 bf16 inputs and all 256 codes.
#include <rcclx/fp8/packed.hpp>
#include <rcclx/gpu/atomic.hpp>
#include <rcclx/testing/launch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "../support/catch.hpp"
#include "reference.hpp"

namespace {
namespace f8 = rcclx::fp8;
using f8::overflow;
using f8::path;
using fp8_ref::bits;
using fp8_ref::from_bits;
using formats = std::tuple<f8::e4m3, f8::e5m2, f8::e4m3_fnuz, f8::e5m2_fnuz>;

struct device_buffer {
  void* p;
  std::size_t bytes;
  explicit device_buffer(std::size_t b) : p(rcclx::gpu::device_malloc(b)), bytes(b) { rcclx::gpu::memset_zero(p, b); }
  ~device_buffer() { rcclx::gpu::device_free(p); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  template <class U> U* as() const { return static_cast<U*>(p); }
};

template <class U>
std::vector<U> to_host(const device_buffer& b, std::size_t n) {
  std::vector<U> v(n);
  rcclx::gpu::copy(v.data(), b.p, n * sizeof(U));
  return v;
}

// Inputs: every boundary of the format, then random bit patterns; a multiple of 16.
template <class F>
std::vector<float> sample_inputs() {
  auto v = fp8_ref::boundary_inputs(fp8_ref::table_of<F>());
  std::mt19937 rng(77);
  while (v.size() % 16 != 0 || v.size() < 40000) v.push_back(from_bits(static_cast<std::uint32_t>(rng())));
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

// Encodes `in` with every packed width and both element types; out[w][i] is the code of element i
// with width index w (0: x2, 1: x4, 2: x8, 3: x16; 4..7: the same from bf16 inputs).
template <class F, overflow M>
struct encode_kernel {
  const float* in;
  std::uint8_t* out;
  std::size_t n;  // multiple of 16
  template <int N, class T>
  RCCLX_HOST_DEVICE void run(std::size_t g, std::uint8_t* dst) const {
    T x[N];
    for (int i = 0; i < N; ++i) {
      if constexpr (std::is_same<T, float>::value) x[i] = in[g * N + i];
      else x[i] = rcclx::bf16::from_bits(static_cast<std::uint16_t>(rcclx::gpu::bit_cast<std::uint32_t>(in[g * N + i]) >> 16));
    }
    const auto q = f8::encode_packed<F, M>(x);
    for (int i = 0; i < N; ++i) dst[g * N + i] = q[i];
  }
  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rcclx::testing::launch_index ix) const {
    const std::size_t t = static_cast<std::size_t>(ix.block) * g.size() + g.thread_rank();
    const std::size_t total = static_cast<std::size_t>(ix.num_blocks) * g.size();
    for (std::size_t k = t; k < n / 16; k += total) {
      for (int r = 0; r < 8; ++r) run<2, float>(k * 8 + r, out + 0 * n);
      for (int r = 0; r < 4; ++r) run<4, float>(k * 4 + r, out + 1 * n);
      for (int r = 0; r < 2; ++r) run<8, float>(k * 2 + r, out + 2 * n);
      run<16, float>(k, out + 3 * n);
      for (int r = 0; r < 8; ++r) run<2, rcclx::bf16>(k * 8 + r, out + 4 * n);
      for (int r = 0; r < 4; ++r) run<4, rcclx::bf16>(k * 4 + r, out + 5 * n);
      for (int r = 0; r < 2; ++r) run<8, rcclx::bf16>(k * 2 + r, out + 6 * n);
      run<16, rcclx::bf16>(k, out + 7 * n);
    }
  }
};

// Decodes all 256 codes through every width: f[w][c], b[w][c] (float and bf16 outputs).
template <class F>
struct decode_kernel {
  float* f;
  rcclx::bf16* b;
  template <int N>
  RCCLX_HOST_DEVICE void run(int w) const {
    for (int g = 0; g < 256 / N; ++g) {
      f8::packed<N> q;
      for (int i = 0; i < f8::packed<N>::num_words; ++i) q.w[i] = 0;
      for (int i = 0; i < N; ++i) q.set(i, static_cast<std::uint8_t>(g * N + i));
      float y[N];
      rcclx::bf16 z[N];
      f8::decode_packed<F>(q, y);
      f8::decode_packed<F>(q, z);
      for (int i = 0; i < N; ++i) {
        f[w * 256 + g * N + i] = y[i];
        b[w * 256 + g * N + i] = z[i];
      }
    }
  }
  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rcclx::testing::launch_index) const {
    if (g.thread_rank() != 0) return;
    run<2>(0);
    run<4>(1);
    run<8>(2);
    run<16>(3);
  }
};

template <class F, overflow M>
void check_packed_encode() {
  const auto in = sample_inputs<F>();
  const std::size_t n = in.size();
  device_buffer d_in(n * 4), d_out(8 * n);
  rcclx::gpu::copy(d_in.p, in.data(), n * 4);
  rcclx::testing::launch_emulated(1, 4, 64, encode_kernel<F, M>{d_in.as<float>(), d_out.as<std::uint8_t>(), n});
  rcclx::gpu::device_synchronize();
  const auto out = to_host<std::uint8_t>(d_out, 8 * n);
  std::uint64_t bad = 0;
  std::ostringstream first;
  for (int w = 0; w < 8; ++w) {
    for (std::size_t i = 0; i < n; ++i) {
      const float x = w < 4 ? in[i] : from_bits(bits(in[i]) & 0xFFFF0000u);
      const std::uint8_t want = f8::encode<F, M, path::software>(x);
      if (out[w * n + i] != want && bad++ < 8)
        first << "width#" << w << " x=" << x << " got " << int(out[w * n + i]) << " want " << int(want) << "\n";
    }
  }
  INFO(first.str());
  REQUIRE(bad == 0);
}

template <class F>
void check_packed_decode() {
  device_buffer d_f(4 * 256 * 4), d_b(4 * 256 * 2);
  rcclx::testing::launch_emulated(1, 1, 32, decode_kernel<F>{d_f.as<float>(), d_b.as<rcclx::bf16>()});
  rcclx::gpu::device_synchronize();
  const auto f = to_host<float>(d_f, 4 * 256);
  const auto b = to_host<rcclx::bf16>(d_b, 4 * 256);
  for (int w = 0; w < 4; ++w) {
    for (int c = 0; c < 256; ++c) {
      const float want = f8::decode<F, path::software>(static_cast<std::uint8_t>(c));
      const float gf = f[w * 256 + c];
      const float gb = static_cast<float>(b[w * 256 + c]);
      CAPTURE(w, c, want, gf, gb);
      if (std::isnan(want)) {
        REQUIRE(std::isnan(gf));
        REQUIRE(std::isnan(gb));
      } else {
        REQUIRE(bits(gf) == bits(want));
        REQUIRE(bits(gb) == bits(want));
      }
    }
  }
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("packed encode (x2, x4, x8, x16; float and bf16) equals the scalar codec", "[fp8][packed]",
                        formats) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  check_packed_encode<TestType, overflow::saturate>();
  check_packed_encode<TestType, overflow::propagate>();
}

TEMPLATE_LIST_TEST_CASE("packed decode (all widths, float and bf16 out) equals the scalar codec", "[fp8][packed]",
                        formats) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  check_packed_decode<TestType>();
}

TEMPLATE_LIST_TEST_CASE("packed stochastic rounding equals scalar encode_sr", "[fp8][packed]", formats) {
  const auto in = sample_inputs<TestType>();
  std::mt19937 rng(5);
  for (std::size_t g = 0; g + 16 <= in.size(); g += 16) {
    float x[16];
    std::uint32_t r[16];
    for (int i = 0; i < 16; ++i) x[i] = in[g + i], r[i] = static_cast<std::uint32_t>(rng());
    const auto q = f8::encode_packed_sr<TestType>(x, r);
    const auto p = f8::encode_packed_sr<TestType, overflow::propagate>(x, r);
    for (int i = 0; i < 16; ++i) {
      REQUIRE(q[i] == f8::encode_sr<TestType>(x[i], r[i]));
      REQUIRE(p[i] == f8::encode_sr<TestType, overflow::propagate>(x[i], r[i]));
    }
  }
}

TEST_CASE("packed: byte i is element i; load/store round trip", "[fp8][packed]") {
  alignas(16) std::uint8_t bytes[16];
  for (int i = 0; i < 16; ++i) bytes[i] = static_cast<std::uint8_t>(i + 1);
  const auto p4 = f8::packed<4>::load(bytes);
  REQUIRE(p4.w[0] == 0x04030201u);
  const auto p16 = f8::packed<16>::load(bytes);
  for (int i = 0; i < 16; ++i) REQUIRE(p16[i] == i + 1);
  const auto p2 = f8::packed<2>::load(bytes + 2);
  REQUIRE(p2[0] == 3);
  REQUIRE(p2[1] == 4);
  alignas(16) std::uint8_t back[16] = {};
  p16.store(back);
  REQUIRE(std::memcmp(back, bytes, 16) == 0);
  f8::packed<8> p8 = f8::packed<8>::load(bytes + 8);
  p8.set(3, 0xEE);
  REQUIRE(p8[3] == 0xEE);
  REQUIRE(p8[2] == 11);
  REQUIRE(p8[4] == 13);
  const float x[4] = {1.0f, -2.0f, 448.0f, 0.0f};
  REQUIRE(f8::encode_packed<f8::e4m3>(x).w[0] == 0x007EC038u);
  static_assert(sizeof(f8::packed<2>) == 2 && sizeof(f8::packed<16>) == 16 && alignof(f8::packed<16>) == 16, "");
}

// ---- hardware == software, exhaustively (GPU only) ----------------------------------------------
#if RCCLX_BACKEND_GPU
namespace {
struct mismatch_log {
  std::uint32_t count;
  std::uint32_t hardware;  // which path the device used (detail::hw_encode_kind)
  std::uint32_t slots;
  std::uint32_t record[16][3];  // input bits, hardware byte, software byte
};

RCCLX_DEVICE void log_mismatch(mismatch_log* log, std::uint32_t in, std::uint32_t hw, std::uint32_t sw) {
  rcclx::gpu::fetch_add_local(&log->count, 1u);
  const std::uint32_t slot = rcclx::gpu::fetch_add_local(&log->slots, 1u);
  if (slot < 16) {
    log->record[slot][0] = in;
    log->record[slot][1] = hw;
    log->record[slot][2] = sw;
  }
}

// Groups of four consecutive float32 patterns: packed x4 (hardware) and the scalar automatic path
// against the packed software path. `step` > 1 samples the groups (sanitizer runs).
template <class F, overflow M>
struct exhaustive_kernel {
  mismatch_log* log;
  std::uint64_t step;
  template <class G>
  RCCLX_DEVICE void operator()(const G& g, rcclx::testing::launch_index ix) const {
    const std::uint64_t t = static_cast<std::uint64_t>(ix.block) * g.size() + g.thread_rank();
    const std::uint64_t total = static_cast<std::uint64_t>(ix.num_blocks) * g.size();
    if (t == 0) log->hardware = static_cast<std::uint32_t>(f8::detail::hw_encode_kind<F, M>());
    for (std::uint64_t k = t * step; k < (std::uint64_t(1) << 30); k += total * step) {
      const std::uint32_t u0 = static_cast<std::uint32_t>(k << 2);
      float x[4];
      for (int i = 0; i < 4; ++i) x[i] = rcclx::gpu::bit_cast<float>(u0 + i);
      const auto hw = f8::encode_packed<F, M, path::automatic>(x);
      const auto sw = f8::encode_packed<F, M, path::software>(x);
      if (hw.w[0] != sw.w[0]) {
        for (int i = 0; i < 4; ++i)
          if (hw[i] != sw[i]) log_mismatch(log, u0 + i, hw[i], sw[i]);
      }
      for (int i = 0; i < 4; ++i) {
        const std::uint8_t s = f8::encode<F, M, path::automatic>(x[i]);
        if (s != sw[i]) log_mismatch(log, u0 + i, 0x100u | s, sw[i]);
      }
    }
  }
};

// All bf16 patterns through the packed bf16 path, and all 256 codes through both decoders.
template <class F, overflow M>
struct small_exhaustive_kernel {
  mismatch_log* log;
  template <class G>
  RCCLX_DEVICE void operator()(const G& g, rcclx::testing::launch_index ix) const {
    const std::uint32_t t = static_cast<std::uint32_t>(ix.block * g.size() + g.thread_rank());
    const std::uint32_t total = static_cast<std::uint32_t>(ix.num_blocks * g.size());
    for (std::uint32_t k = t; k < 65536 / 8; k += total) {
      rcclx::bf16 x[8];
      for (int i = 0; i < 8; ++i) x[i] = rcclx::bf16::from_bits(static_cast<std::uint16_t>(k * 8 + i));
      const auto hw = f8::encode_packed<F, M, path::automatic>(x);
      const auto sw = f8::encode_packed<F, M, path::software>(x);
      for (int i = 0; i < 8; ++i)
        if (hw[i] != sw[i]) log_mismatch(log, (k * 8 + i) << 16, hw[i], sw[i]);
    }
    if (t < 64) {
      f8::packed<4> q;
      q.w[0] = 0x03020100u + 0x04040404u * t;  // codes 4t .. 4t+3
      float hw[4], sw[4];
      f8::decode_packed<F, path::automatic>(q, hw);
      f8::decode_packed<F, path::software>(q, sw);
      for (int i = 0; i < 4; ++i) {
        const bool same = rcclx::gpu::bit_cast<std::uint32_t>(hw[i]) == rcclx::gpu::bit_cast<std::uint32_t>(sw[i]) ||
                          (hw[i] != hw[i] && sw[i] != sw[i]);
        if (!same) log_mismatch(log, 0xDEC00000u | q[i], rcclx::gpu::bit_cast<std::uint32_t>(hw[i]), 0);
      }
    }
  }
};

const char* path_name(std::uint32_t k) {
  switch (k) {
    case 1: return "NVIDIA cvt.rn.satfinite (sm_89+)";
    case 2: return "gfx94x v_cvt_pk_*";
    case 3: return "gfx950 v_cvt_pk_*";
    default: return "software (no hardware conversion for this format/mode here)";
  }
}

template <class F, overflow M>
void run_exhaustive() {
  const bool quick = rcclx_test::scaled(100) < 100;  // RCCLX_TEST_QUICK=1 (compute-sanitizer)
  device_buffer d_log(sizeof(mismatch_log));
  auto* log = d_log.as<mismatch_log>();
  const int threads = 256;
  const int blocks = rcclx::testing::max_blocks_per_rank<exhaustive_kernel<F, M>>(1, threads);
  rcclx::testing::launch_emulated(1, blocks, threads, exhaustive_kernel<F, M>{log, quick ? 4099u : 1u});
  rcclx::testing::launch_emulated(1, 32, threads, small_exhaustive_kernel<F, M>{log});
  rcclx::gpu::device_synchronize();
  mismatch_log h;
  rcclx::gpu::copy(&h, log, sizeof h);
  std::ostringstream first;
  for (std::uint32_t i = 0; i < h.slots && i < 16; ++i)
    first << "  input 0x" << std::hex << h.record[i][0] << ": automatic 0x" << h.record[i][1] << " software 0x"
          << h.record[i][2] << std::dec << "\n";
  INFO(f8::format_traits<F>::name << (M == overflow::saturate ? " saturate" : " propagate") << ", device path: "
                                  << path_name(h.hardware) << (quick ? " (sampled: RCCLX_TEST_QUICK)" : " (all 2^32)")
                                  << "\nfirst mismatches:\n"
                                  << first.str());
  if (h.hardware == 0) WARN(f8::format_traits<F>::name << ": no hardware path on this device; software compared with itself");
  REQUIRE(h.count == 0);
}
}  // namespace

TEMPLATE_LIST_TEST_CASE("hardware path == software path over all 2^32 float32 inputs", "[fp8][packed][gpu]", formats) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  run_exhaustive<TestType, overflow::saturate>();
  run_exhaustive<TestType, overflow::propagate>();
}
#else
TEST_CASE("hardware path == software path over all 2^32 float32 inputs", "[fp8][packed][gpu]") {
  WARN("host backend: there is no hardware FP8 conversion to compare; this test runs on GPU builds");
}
#endif
