// The usage snippets at the top of the public FP8 headers, compiled and run (host code of every
// backend; the block_scale.hpp fragment snippet runs with one lane per block on the host).
#include <rcclx/fp8/block_layout.hpp>
#include <rcclx/fp8/block_scale.hpp>
#include <rcclx/fp8/fp8.hpp>
#include <rcclx/fp8/packed.hpp>
#include <rcclx/fp8/quantize_blocks.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "../support/catch.hpp"

TEST_CASE("fp8 header snippets", "[fp8][snippets]") {
  namespace f8 = rcclx::fp8;
  // fp8.hpp
  const std::uint32_t random_bits = 0x12345678u;
  std::uint8_t q = f8::encode<f8::e4m3>(500.0f);
  std::uint8_t p = f8::encode<f8::e4m3, f8::overflow::propagate>(500.0f);
  float x = f8::decode<f8::e4m3_fnuz>(0x80);
  std::uint8_t s = f8::encode_sr<f8::e5m2>(0.3f, random_bits);
  REQUIRE(q == 0x7E);
  REQUIRE(p == 0x7F);
  REQUIRE(std::isnan(x));
  REQUIRE((s == f8::encode<f8::e5m2>(0.28125f) || s == f8::encode<f8::e5m2>(0.3125f)));
  // format.hpp
  using F = f8::e4m3;
  static_assert(f8::format_traits<F>::max_code == 0x7E, "");
  REQUIRE(f8::format_traits<f8::e4m3_fnuz>::max_finite == 240.0f);
  // packed.hpp
  float v[16];
  for (int i = 0; i < 16; ++i) v[i] = 0.37f * float(i - 8);
  f8::packed<16> pq = f8::encode_packed<f8::e4m3>(v);
  float y[16];
  f8::decode_packed<f8::e4m3>(pq, y);
  auto sw = f8::encode_packed<f8::e4m3, f8::overflow::saturate, f8::path::software>(v);
  for (int i = 0; i < 4; ++i) REQUIRE(sw.w[i] == pq.w[i]);
  for (int i = 0; i < 16; ++i) REQUIRE(std::fabs(y[i] - v[i]) <= std::fabs(v[i]) / 16);
  // block_layout.hpp + quantize_blocks.hpp (device memory: needs a GPU on GPU backends)
  if (rcclx::current_backend == rcclx::backend::host || rcclx::gpu::device_count() > 0) {
    using L = f8::block_layout<32, f8::scale_kind::fp32>;
    const std::size_t n = 1000;
    void* buf = rcclx::gpu::device_malloc(L::total_bytes(n));
    auto* payload = static_cast<std::uint8_t*>(buf);
    auto* scales = L::scales(buf, n);
    REQUIRE(reinterpret_cast<unsigned char*>(scales) - payload == 1008);
    std::vector<float> hx(n);
    for (std::size_t i = 0; i < n; ++i) hx[i] = std::sin(float(i)) * 100.0f;
    auto* dx = static_cast<float*>(rcclx::gpu::device_malloc(n * 4));
    auto* dy = static_cast<float*>(rcclx::gpu::device_malloc(n * 4));
    rcclx::gpu::copy(dx, hx.data(), n * 4);
    f8::quantize_blocks<f8::e4m3>(dx, n, payload, scales);
    f8::dequantize_blocks<f8::e4m3>(payload, scales, n, dy);
    rcclx::gpu::device_synchronize();
    std::vector<float> hy(n);
    rcclx::gpu::copy(hy.data(), dy, n * 4);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(std::fabs(hy[i] - hx[i]) <= 100.0f / 28 * 1.0001f);
    rcclx::gpu::device_free(dx);
    rcclx::gpu::device_free(dy);
    rcclx::gpu::device_free(buf);
  } else {
    WARN("no GPU present: the quantize_blocks snippet is skipped");
  }
  // block_scale.hpp, one lane per block (N == BlockSize)
  using quant = f8::block_quantize<f8::e4m3>;
  using dequant = f8::block_dequantize<f8::e4m3>;
  float b[32];
  for (int i = 0; i < 32; ++i) b[i] = float(i) - 10.0f;
  f8::packed<32> bq;
  const float bs = quant{}(b, bq);
  float by[32];
  dequant{}(bq, bs, by);
  REQUIRE(bs == 21.0f / 448.0f);
  for (int i = 0; i < 32; ++i) REQUIRE(std::fabs(by[i] - b[i]) <= 21.0f / 28);
}
