// The checked mode's stage checks (fused/stage_check.hpp), called directly on the host: every
// library stage's check() on good arguments gives no fault, and each bad argument gives its misuse
// with both values; fused::epilogue::check names the first bad stage (index | stage_id << 8).
#include <rcclx/fused/fp8_per_token.hpp>
#include <rcclx/fused/rmsnorm_epilogue.hpp>
#include <rcclx/fused/stages.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "../support/catch.hpp"

namespace {

namespace fz = rcclx::fused;
using rcclx::core::misuse;

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// 256-byte aligned arena, so offsets give known low address bits.
struct arena {
  std::vector<unsigned char> bytes = std::vector<unsigned char>(1 << 16);
  unsigned char* base() {
    auto p = reinterpret_cast<std::uintptr_t>(bytes.data());
    return bytes.data() + ((256 - p % 256) % 256);
  }
  template <class T>
  T* at(std::size_t byte_offset) {
    return reinterpret_cast<T*>(base() + byte_offset);
  }
};

fz::stage_context ctx(std::size_t rows, std::size_t cols, int vec_elems = 8, bool vector_path = true) {
  fz::stage_context c;
  c.rows = rows;
  c.cols = cols;
  c.vector_path = vector_path;
  c.vec_elems = vec_elems;
  return c;
}

void expect(const fz::stage_fault& f, misuse what, std::uint32_t a, std::uint32_t b) {
  CAPTURE(static_cast<int>(f.what), f.a, f.b);
  REQUIRE(static_cast<bool>(f));
  REQUIRE(f.what == what);
  REQUIRE(f.a == a);
  REQUIRE(f.b == b);
}

}  // namespace

namespace rows_test {
struct user_stage {
  template <int E>
  RCCLX_HOST_DEVICE void operator()(const rcclx::fused::position&, float (&)[E]) const {}
};
struct user_checked {
  RCCLX_HOST_DEVICE rcclx::fused::stage_fault check(const rcclx::fused::stage_context&) const {
    return {rcclx::core::misuse::stage_ld_short, 0, 1, 2};
  }
  template <int E>
  RCCLX_HOST_DEVICE void operator()(const rcclx::fused::position&, float (&)[E]) const {}
};
}  // namespace rows_test

TEST_CASE("stage checks: good stages pass", "[rows][stage_check]") {
  arena m;
  using bf = rcclx::bf16;
  const auto c = ctx(4, 64);
  float scale = 0.5f;
  REQUIRE_FALSE(fz::residual_add<bf>{m.at<bf>(0), m.at<bf>(0), 64}.check(c));
  REQUIRE_FALSE(fz::residual_add<bf>{m.at<bf>(0), nullptr, 72}.check(c));
  REQUIRE_FALSE((fz::rms_norm<bf, 512>{m.at<bf>(4096), 1e-6f, 64, nullptr}.check(c)));
  REQUIRE_FALSE((fz::rms_norm<bf, 512>{nullptr, 0.0f, 64, nullptr}.check(c)));
  REQUIRE_FALSE((fz::rms_norm<bf, 512>{nullptr, 1e-5f, 64, nullptr}.check(ctx(0, 0))));  // user map
  REQUIRE_FALSE(fz::fp8_out<rcclx::fp8::e4m3>{m.at<std::uint8_t>(8192), 64, &scale}.check(c));
  // bf16 tile (E = 8): FP8 rows of 8 codes need 8-byte alignment only.
  REQUIRE_FALSE(fz::fp8_out<rcclx::fp8::e4m3>{m.at<std::uint8_t>(8192 + 8), 72, &scale}.check(c));
  REQUIRE_FALSE(fz::bias<bf>{m.at<bf>(16)}.check(c));
  REQUIRE_FALSE(fz::swiglu_store<bf>{m.at<bf>(0), 32}.check(c));
  REQUIRE_FALSE(fz::store<bf>{m.at<bf>(0), 64}.check(c));
  REQUIRE_FALSE(fz::store<float>{m.at<float>(4), 64}.check(c));  // float on a bf16 tile: element-wise
  // The element path (ragged rows) needs element alignment only and any ld >= cols.
  const auto e = ctx(3, 7, 1, false);
  REQUIRE_FALSE(fz::store<bf>{m.at<bf>(2), 7}.check(e));
  REQUIRE_FALSE(fz::fp8_out<rcclx::fp8::e5m2>{m.at<std::uint8_t>(3), 10, &scale}.check(e));
}

TEST_CASE("stage checks: each misuse with both values", "[rows][stage_check]") {
  arena m;
  using bf = rcclx::bf16;
  const auto c = ctx(4, 64);
  float scale = 1.0f;

  SECTION("stage_misaligned: pointer, null, row stride") {
    expect(fz::store<bf>{m.at<bf>(2), 64}.check(c), misuse::stage_misaligned, 2, 16);
    expect(fz::residual_add<bf>{m.at<bf>(0), m.at<bf>(6), 64}.check(c), misuse::stage_misaligned, 6, 16);
    expect(fz::residual_add<bf>{nullptr, nullptr, 64}.check(c), misuse::stage_misaligned, 0, 16);
    expect(fz::store<bf>{m.at<bf>(0), 68}.check(c), misuse::stage_misaligned, 8, 16);  // 136-byte rows
    expect(fz::bias<float>{m.at<float>(8)}.check(ctx(1, 64, 4)), misuse::stage_misaligned, 8, 16);
    expect((fz::rms_norm<bf, 512>{m.at<bf>(4), 1e-6f, 64, nullptr}.check(c)), misuse::stage_misaligned, 4, 16);
    expect(fz::fp8_out<rcclx::fp8::e4m3>{m.at<std::uint8_t>(4), 64, &scale}.check(c), misuse::stage_misaligned, 4, 8);
    expect(fz::fp8_out<rcclx::fp8::e4m3>{m.at<std::uint8_t>(0), 64, nullptr}.check(c), misuse::stage_misaligned, 0, 4);
    expect(fz::swiglu_store<float>{m.at<float>(8), 32}.check(ctx(2, 64, 8)), misuse::stage_misaligned, 8, 16);
    expect(fz::store<float>{m.at<float>(1), 7}.check(ctx(1, 7, 1, false)), misuse::stage_misaligned, 1, 4);
  }
  SECTION("stage_ld_short") {
    expect(fz::store<bf>{m.at<bf>(0), 56}.check(c), misuse::stage_ld_short, 56, 64);
    expect(fz::residual_add<bf>{m.at<bf>(0), nullptr, 8}.check(c), misuse::stage_ld_short, 8, 64);
    expect(fz::fp8_out<rcclx::fp8::e4m3>{m.at<std::uint8_t>(0), 32, &scale}.check(c), misuse::stage_ld_short, 32, 64);
    expect(fz::swiglu_store<bf>{m.at<bf>(0), 24}.check(c), misuse::stage_ld_short, 24, 64);  // 2 * 24 < 64
    expect(fz::store<float>{m.at<float>(0), 6}.check(ctx(1, 7, 1, false)), misuse::stage_ld_short, 6, 7);
  }
  SECTION("stage_scale: 0, -1, NaN, inf, -0") {
    for (float s : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -0.0f}) {
      CAPTURE(s);
      scale = s;
      expect(fz::fp8_out<rcclx::fp8::e4m3>{m.at<std::uint8_t>(0), 64, &scale}.check(c), misuse::stage_scale, bits(s), 0);
    }
  }
  SECTION("stage_cols: rms_norm's cols against the map's, swiglu on odd rows") {
    expect((fz::rms_norm<bf, 512>{nullptr, 1e-6f, 72, nullptr}.check(ctx(2, 65, 1, false))), misuse::stage_cols, 72, 65);
    expect((fz::rms_norm<bf, 512>{nullptr, 1e-6f, 0, nullptr}.check(c)), misuse::stage_cols, 0, 64);
    expect(fz::swiglu_store<bf>{m.at<bf>(0), 8}.check(ctx(1, 7, 1, false)), misuse::stage_cols, 7, 8);
  }
  SECTION("stage_eps: negative, NaN, inf") {
    for (float e : {-1e-6f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      CAPTURE(e);
      expect((fz::rms_norm<bf, 512>{nullptr, e, 64, nullptr}.check(c)), misuse::stage_eps, bits(e), 0);
    }
  }
  SECTION("stage_writes_symmetric: an output over the bytes peers read") {
    auto s = c;  // forbidden: [base + 8192, base + 12288) and [base + 16384, base + 20480)
    s.forbidden[0][0] = m.at<unsigned char>(8192);
    s.forbidden[0][1] = m.at<unsigned char>(12288);
    s.forbidden[1][0] = m.at<unsigned char>(16384);
    s.forbidden[1][1] = m.at<unsigned char>(20480);
    // 4 rows of 64 bf16 = 512 bytes: ending exactly at the range is fine, one byte in is not.
    REQUIRE_FALSE(fz::store<bf>{m.at<bf>(8192 - 512), 64}.check(s));
    REQUIRE_FALSE(fz::store<bf>{m.at<bf>(12288), 64}.check(s));
    expect(fz::store<bf>{m.at<bf>(8192 - 496), 64}.check(s), misuse::stage_writes_symmetric, 0, 0);
    expect(fz::store<bf>{m.at<bf>(9216), 64}.check(s), misuse::stage_writes_symmetric, 1024, 0);
    expect(fz::store<bf>{m.at<bf>(16384 + 256), 64}.check(s), misuse::stage_writes_symmetric, 8448, 0);
    expect(fz::residual_add<bf>{m.at<bf>(0), m.at<bf>(9216), 64}.check(s), misuse::stage_writes_symmetric, 1024, 0);
    // Reading the symmetric bytes (the residual) is fine.
    REQUIRE_FALSE(fz::residual_add<bf>{m.at<bf>(9216), nullptr, 64}.check(s));
    expect(fz::fp8_out<rcclx::fp8::e4m3>{m.at<std::uint8_t>(9216), 64, &scale}.check(s),
           misuse::stage_writes_symmetric, 1024, 0);
    expect(fz::swiglu_store<bf>{m.at<bf>(9216), 32}.check(s), misuse::stage_writes_symmetric, 1024, 0);
  }
}

TEST_CASE("stage checks: epilogue::check names the first bad stage", "[rows][stage_check]") {
  arena m;
  using bf = rcclx::bf16;
  float scale = 2.0f, zero = 0.0f;
  using norm_t = fz::rms_norm<bf, 512>;
  using epi_t = fz::epilogue<fz::residual_add<bf>, norm_t, fz::silu, fz::fp8_out<rcclx::fp8::e4m3>>;
  const auto c = ctx(2, 64);
  const epi_t good{{m.at<bf>(0), m.at<bf>(0), 64}, {m.at<bf>(4096), 1e-6f, 64, nullptr}, {},
                   {m.at<std::uint8_t>(8192), 64, &scale}};
  REQUIRE_FALSE(good.check(c));
  const epi_t bad_scale{{m.at<bf>(0), m.at<bf>(0), 64}, {m.at<bf>(4096), 1e-6f, 64, nullptr}, {},
                        {m.at<std::uint8_t>(8192), 64, &zero}};
  auto f = bad_scale.check(c);
  expect(f, misuse::stage_scale, 0, 0);
  REQUIRE(f.stage == (3u | 3u << 8));
  const epi_t two_bad{{m.at<bf>(0), m.at<bf>(0), 64}, {m.at<bf>(4096), -1.0f, 64, nullptr}, {},
                      {m.at<std::uint8_t>(8192), 64, &zero}};
  f = two_bad.check(c);
  expect(f, misuse::stage_eps, bits(-1.0f), 0);
  REQUIRE(f.stage == (1u | 2u << 8));
  // A user stage without check() is taken as fine; its stage_id is 0.
  const fz::epilogue<rows_test::user_stage, fz::store<bf>, rows_test::user_checked> u{{}, {m.at<bf>(0), 64}, {}};
  f = u.check(c);
  expect(f, misuse::stage_ld_short, 1, 2);
  REQUIRE(f.stage == 2u);
  // The ready-made kernels' epilogue: residual_add, rms_norm, the output (indices 0, 1, 2).
  rcclx::fused::rmsnorm_args<bf, rcclx::fp8::e4m3> a{};
  a.input = m.at<bf>(0);
  a.residual = m.at<bf>(0);
  a.weight = m.at<bf>(4096);
  a.eps = 1e-6f;
  a.hidden = 64;
  a.scale = &zero;
  auto re = fz::detail::make_rmsnorm_epilogue<1>(a, a.residual, m.at<std::uint8_t>(8192));
  f = re.check(c);
  expect(f, misuse::stage_scale, 0, 0);
  REQUIRE(f.stage == (2u | 3u << 8));
  a.scale = &scale;
  a.hidden = 72;  // padded columns
  re = fz::detail::make_rmsnorm_epilogue<1>(a, a.residual, m.at<std::uint8_t>(8192));
  f = re.check(c);
  expect(f, misuse::stage_cols, 72, 64);
  REQUIRE(f.stage == (1u | 2u << 8));
}

TEST_CASE("stage checks: fp8_out_per_token", "[rows][stage_check]") {
  arena m;
  using pt = fz::fp8_out_per_token<rcclx::fp8::e4m3, 256>;
  auto c = ctx(4, 64);
  REQUIRE(pt::stage_id == 7u);
  REQUIRE_FALSE(pt{m.at<std::uint8_t>(0), 64, m.at<float>(4096)}.check(c));
  REQUIRE(pt{m.at<std::uint8_t>(0), 64, m.at<float>(4096)}.qmax == 448.0f);
  expect(pt{m.at<std::uint8_t>(0), 64, nullptr}.check(c), misuse::stage_misaligned, 0, 4);
  expect(pt{m.at<std::uint8_t>(0), 64, m.at<float>(4098)}.check(c), misuse::stage_misaligned, 2, 4);
  expect(pt{m.at<std::uint8_t>(4), 64, m.at<float>(4096)}.check(c), misuse::stage_misaligned, 4, 8);
  expect(pt{m.at<std::uint8_t>(0), 62, m.at<float>(4096)}.check(ctx(4, 63, 1, false)), misuse::stage_ld_short, 62, 63);
  for (float q : {0.0f, -448.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    CAPTURE(q);
    expect(pt{m.at<std::uint8_t>(0), 64, m.at<float>(4096), q}.check(c), misuse::stage_scale, bits(q), 0);
  }
  c.forbidden[0][0] = m.at<unsigned char>(8192);
  c.forbidden[0][1] = m.at<unsigned char>(12288);
  expect(pt{m.at<std::uint8_t>(0), 64, m.at<float>(8192 + 64)}.check(c), misuse::stage_writes_symmetric, 64, 0);
  expect(pt{m.at<std::uint8_t>(8192 - 128), 64, m.at<float>(0)}.check(c), misuse::stage_writes_symmetric, 0, 0);
}

TEST_CASE("stage checks: make_stage_context from the maps", "[rows][stage_check]") {
  const auto a = fz::make_stage_context<rcclx::bf16>(fz::tile_map{5, 64, 2, 32});
  REQUIRE((a.rows == 5 && a.cols == 64 && a.vector_path && a.vec_elems == 8));
  const auto b = fz::make_stage_context<float>(fz::ragged_row_tiles{3, 7});
  REQUIRE((b.rows == 3 && b.cols == 7 && !b.vector_path && b.vec_elems == 4));
  const auto c = fz::make_stage_context<float>(fz::ragged_tile_map{3, 4097, 2, 256});
  REQUIRE((c.rows == 3 && c.cols == 4097 && !c.vector_path));
  // allreduce_rmsnorm's region need: padded rows (the same bytes for rows of whole vectors).
}

TEST_CASE("stage checks: epilogue_fault of a plain callable and of an epilogue", "[rows][stage_check]") {
  arena m;
  const auto plain = [](int) {};
  REQUIRE_FALSE(fz::detail::epilogue_fault(plain, ctx(1, 8)));
  const fz::epilogue<fz::silu, fz::store<float>> e{{}, {m.at<float>(4), 8}};
  const auto f = fz::detail::epilogue_fault(e, ctx(1, 8, 4));
  expect(f, misuse::stage_misaligned, 4, 16);
  REQUIRE(f.stage == (1u | 6u << 8));
}
