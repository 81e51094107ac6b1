// testing/bulk_tuning_sweep.hpp: the spelling of a tuning, and a sweep of candidates on both kernels:
// a row per candidate in order, the default marked, every candidate's output the default's (every
// tuning gives the same bits), each timed through the caller's timer (launches alternate the sets);
// the pick per kernel on hand-made rows.
#include <rcclx/testing/bulk_tuning_sweep.hpp>

#include <vector>

#include "../support/catch.hpp"

namespace {

namespace rt = rcclx::testing;
namespace f8 = rcclx::fp8;

TEST_CASE("tuning_cpp and tuning_label spell a bulk_tuning", "[testing][fp8]") {
  using t = f8::bulk_tuning<2, 16, f8::bulk_prefetch | f8::bulk_store_streaming, 0, 512, 2>;
  CHECK(rt::tuning_cpp<t>() == "bulk_tuning<2, 16, bulk_store_streaming | bulk_prefetch, 0, 512, 2>");
  CHECK(rt::tuning_label<t>() == "U2 E16 pf st.cs grid=tiles T512 minB2");
  CHECK(rt::tuning_cpp<f8::bulk_tuning<1>>() == "bulk_tuning<1, 0, 0, 1, 256, 0>");
  CHECK(rt::tuning_label<f8::bulk_tuning<4, 0, 0, 3>>() == "U4 waves3");
}

template <bool Quantize, class T, f8::scale_kind S>
void sweep_once() {
  const std::size_t n = 4096 + 32;
  std::vector<void*> owned;
  const auto alloc = [&](std::size_t bytes) { return owned.emplace_back(rcclx::gpu::device_malloc(bytes)); };
  rt::bulk_sweep_buffers<T, S> b{};
  b.n = n;
  std::vector<T> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = T(static_cast<float>(static_cast<int>(i * 37 % 201) - 100) * 0.37f);
  for (int k = 0; k < 2; ++k) {
    b.values[k] = static_cast<T*>(alloc(n * sizeof(T)));
    b.codes[k] = static_cast<std::uint8_t*>(alloc(n));
    b.scales[k] = static_cast<f8::scale_type_t<S>*>(alloc((n / 32 + 1) * sizeof(f8::scale_type_t<S>)));
    rcclx::gpu::copy(b.values[k], x.data(), n * sizeof(T));
    f8::quantize_blocks<f8::e4m3, 32, S>(b.values[k], n, b.codes[k], b.scales[k]);  // dequantize's input
  }
  rcclx::gpu::device_synchronize();
  using D = std::conditional_t<Quantize, f8::default_quantize_tuning<T, S>, f8::default_dequantize_tuning<T, S>>;
  using candidates = rt::tunings<f8::bulk_tuning<3>, D, f8::bulk_tuning<2, 0, f8::bulk_prefetch, 0>>;
  std::vector<rt::bulk_tuning_row> rows;
  int timed = 0, shown = 0;
  rt::sweep_bulk_tunings<Quantize>(
      "k", b, candidates{},
      [&](const std::function<void(int)>& launch) {
        for (int i = 0; i < 3; ++i) launch(i);
        return 1.0 + timed++;
      },
      [](double bytes) { return bytes * 1e-9; }, rows, [&](const rt::bulk_tuning_row&) { ++shown; });
  REQUIRE(rows.size() == 3);
  CHECK(shown == 3);
  CHECK(rows[0].label == "U3");
  CHECK_FALSE(rows[0].is_default);
  CHECK(rows[1].is_default);
  CHECK(rows[2].cpp == "bulk_tuning<2, 0, bulk_prefetch, 0, 256, 0>");
  for (int i = 0; i < 3; ++i) {
    CHECK(rows[i].same_output);
    CHECK(rows[i].ms == 1.0 + i);
    CHECK(rows[i].bytes == static_cast<double>(n) * (sizeof(T) + 1) + (n + 31) / 32 * sizeof(f8::scale_type_t<S>));
    CHECK(rows[i].copy_ms == rows[i].bytes * 1e-9);
  }
  for (void* p : owned) rcclx::gpu::device_free(p);
}

TEST_CASE("sweep_bulk_tunings: a row per candidate, the default marked, the default's output", "[testing][fp8]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  sweep_once<true, float, f8::scale_kind::fp32>();
  sweep_once<true, rcclx::bf16, f8::scale_kind::e8m0>();
  sweep_once<false, float, f8::scale_kind::e8m0>();
  sweep_once<false, rcclx::bf16, f8::scale_kind::fp32>();
}

TEST_CASE("best_bulk_tunings: per kernel the fastest against its copy among the default's outputs", "[testing][fp8]") {
  const auto row = [](const char* kernel, const char* label, bool def, double ms, double copy_ms, bool same) {
    return rt::bulk_tuning_row{kernel, label, "", def, 1e6, ms, copy_ms, same};
  };
  const std::vector<rt::bulk_tuning_row> rows{
      row("a", "a0", false, 2.0, 1.0, true), row("a", "a1", true, 1.5, 1.0, true),
      row("a", "a2", false, 1.0, 1.0, false),  // the fastest, but not the default's output
      row("a", "a3", false, 1.2, 1.0, true),   row("b", "b0", false, 1.0, 0.5, false),
      row("b", "b1", false, 3.0, 1.0, true),   row("c", "c0", false, 1.0, 0.9, false)};
  const auto picks = rt::best_bulk_tunings(rows);
  REQUIRE(picks.size() == 3);
  CHECK(picks[0].best->label == "a3");
  CHECK(picks[0].default_row->label == "a1");
  CHECK(picks[1].best->label == "b1");         // b0 is faster against its copy, but its output differs
  CHECK(picks[1].default_row->label == "b0");  // none marked: the first
  CHECK(picks[2].best->label == "c0");         // no candidate with the default's output: the first
  CHECK(rt::best_bulk_tunings({}).empty());
}

}  // namespace
