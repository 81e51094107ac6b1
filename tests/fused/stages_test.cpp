// The activation and bias stages (fused/stages.hpp) against float64 references: bias, SiLU, GELU
// (erf and tanh forms), SwiGLU on interleaved gate/up columns (half-width output). Host code (the
// stages are host/device functors; examples/02_linear_silu runs bias and SiLU in a GPU kernel).
#include <rcclx/fused/stages.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "../support/catch.hpp"

namespace {

namespace fz = rcclx::fused;

double silu(double x) { return x / (1.0 + std::exp(-x)); }
double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

// FP32 evaluation: a few ulps of the value (expf / erff / tanhf and 2-3 roundings), plus an
// absolute floor near zero.
bool close(double got, double want) { return std::fabs(got - want) <= 4e-7 * std::fabs(want) + 1e-7; }

std::vector<float> inputs() {
  std::vector<float> v{0.0f, -0.0f, 1.0f, -1.0f, 20.0f, -20.0f, 88.0f, -88.0f, 1e-6f, -3.5f, 0.5f, 7.25f};
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> d(-8.0f, 8.0f);
  while (v.size() < 4096) v.push_back(d(gen));
  return v;
}

}  // namespace

TEST_CASE("fused stages: bias, SiLU and GELU against float64", "[fused][stages]") {
  const std::vector<float> x = inputs();
  constexpr int E = 4;
  std::vector<float> b(E);
  for (int i = 0; i < E; ++i) b[i] = 0.25f * static_cast<float>(i) - 0.5f;
  for (std::size_t i = 0; i + E <= x.size(); i += E) {
    const fz::position p{0, 0};
    float v[E], s[E], ge[E], gt[E];
    for (int j = 0; j < E; ++j) v[j] = s[j] = ge[j] = gt[j] = x[i + j];
    fz::bias<float>{b.data()}(p, v);
    fz::silu{}(p, s);
    fz::gelu<>{}(p, ge);
    fz::gelu<fz::gelu_approximation::tanh>{}(p, gt);
    for (int j = 0; j < E; ++j) {
      const double in = x[i + j];
      CAPTURE(in);
      REQUIRE(v[j] == static_cast<float>(in + b[j]));  // one FP32 addition
      REQUIRE(close(s[j], silu(in)));
      REQUIRE(close(ge[j], gelu_erf(in)));
      REQUIRE(close(gt[j], gelu_tanh(in)));
    }
  }
  // NaN stays NaN.
  float n[E] = {NAN, NAN, NAN, NAN};
  fz::silu{}(fz::position{0, 0}, n);
  REQUIRE(std::isnan(n[0]));
}

TEST_CASE("fused stages: SwiGLU on interleaved gate/up writes the half-width row", "[fused][stages]") {
  const std::vector<float> x = inputs();
  constexpr int E = 8;  // bf16 tiles: 8 values = 4 gate/up pairs per vector
  const std::size_t cols = 64, rows = x.size() / cols;
  std::vector<rcclx::bf16> out(rows * cols / 2, rcclx::bf16(123.0f));
  const fz::swiglu_store<rcclx::bf16> stage{out.data(), cols / 2};
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; c += E) {
      float v[E];
      for (int j = 0; j < E; ++j) v[j] = x[r * cols + c + j];
      stage(fz::position{r, c}, v);
      for (int j = 0; j < E; ++j) REQUIRE(v[j] == x[r * cols + c + j]);  // v unchanged
    }
  }
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = 0; j < cols / 2; ++j) {
      const double gate = x[r * cols + 2 * j], up = x[r * cols + 2 * j + 1];
      const double want = silu(gate) * up, got = static_cast<float>(out[r * cols / 2 + j]);
      CAPTURE(r, j, gate, up);
      REQUIRE(std::fabs(got - want) <= 0x1p-8 * std::fabs(want) + 1e-6);  // one bf16 rounding
    }
  }
}
