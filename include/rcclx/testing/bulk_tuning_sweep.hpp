// rcclx/testing/bulk_tuning_sweep.hpp: which fp8::bulk_tuning suits this GPU: every candidate tuning
// of one bulk FP8 kernel (quantize_blocks or dequantize_blocks of T, e4m3, blocks of 32, a scale
// kind) timed on the caller's buffers, against a device copy of the same bytes timed right after it,
// its output compared with the default tuning's, bit for bit. How fp8/bulk_tuning.hpp's defaults were
// chosen (rcclx-bench-fp8 --suite gpu; docs/performance.md).
//
//   namespace rt = rcclx::testing;
//   using candidates = rt::tunings<fp8::bulk_tuning<1>, fp8::bulk_tuning<2, 0, fp8::bulk_prefetch>>;
//   rt::bulk_sweep_buffers<float, fp8::scale_kind::fp32> b{{x0, x1}, {q0, q1}, {s0, s1}, n};   // two sets
//   std::vector<rt::bulk_tuning_row> rows;
//   rt::sweep_bulk_tunings<true>("quant f32", b, candidates{}, median_ms, copy_ms, rows);
//   // median_ms(launch): the caller's timing of launch(i), i = 0, 1, ... (set i % 2);
//   // copy_ms(bytes): a device copy of that many bytes; each row: label, cpp, is_default, ms, copy_ms, same_output
//   for (const rt::bulk_tuning_pick& p : rt::best_bulk_tunings(rows)) use(p.best->cpp, p.default_row->ms);
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "../fp8/quantize_blocks.hpp"
#include "../gpu/runtime.hpp"

RCCLX_NAMESPACE_BEGIN
namespace testing {

template <class... Tunings>
struct tunings {};

// A bulk_tuning as fp8/bulk_tuning.hpp spells its defaults ("bulk_tuning<2, 0, bulk_prefetch, 1, 256, 0>").
template <class Tuning>
std::string tuning_cpp() {
  std::string f;
  for (const auto& [bit, name] : {std::pair{fp8::bulk_store_streaming, "bulk_store_streaming"},
                                  std::pair{fp8::bulk_load_streaming, "bulk_load_streaming"},
                                  std::pair{fp8::bulk_prefetch, "bulk_prefetch"},
                                  std::pair{fp8::bulk_load_no_l1, "bulk_load_no_l1"}})
    if (Tuning::flags & bit) f += (f.empty() ? "" : " | ") + std::string(name);
  return "bulk_tuning<" + std::to_string(Tuning::unroll) + ", " + std::to_string(Tuning::lane_elems) + ", " +
         (f.empty() ? "0" : f) + ", " + std::to_string(Tuning::waves) + ", " + std::to_string(Tuning::threads) + ", " +
         std::to_string(Tuning::min_blocks) + ">";
}

// The same, short: U unroll, E lane elements, pf prefetch, st.cs / ld.cs streaming stores / loads,
// ld.noL1, grid=tiles (Waves 0) or wavesW, T threads (not 256), minB min blocks ("U2 pf st.cs").
template <class Tuning>
std::string tuning_label() {
  std::string s = "U" + std::to_string(Tuning::unroll);
  if (Tuning::lane_elems) s += " E" + std::to_string(Tuning::lane_elems);
  for (const auto& [bit, name] : {std::pair{fp8::bulk_prefetch, " pf"}, std::pair{fp8::bulk_store_streaming, " st.cs"},
                                  std::pair{fp8::bulk_load_streaming, " ld.cs"}, std::pair{fp8::bulk_load_no_l1, " ld.noL1"}})
    if (Tuning::flags & bit) s += name;
  s += Tuning::waves == 0 ? " grid=tiles" : Tuning::waves == 1 ? "" : " waves" + std::to_string(Tuning::waves);
  if (Tuning::threads != 256) s += " T" + std::to_string(Tuning::threads);
  if (Tuning::min_blocks) s += " minB" + std::to_string(Tuning::min_blocks);
  return s;
}

// One kernel's buffers, two sets: set i % 2 for launch i (so consecutive launches do not hit in the
// cache each other's data). Quantize reads values and writes codes and scales; dequantize reads
// codes and scales (as they are) and writes values.
template <class T, fp8::scale_kind Scale>
struct bulk_sweep_buffers {
  T* values[2];
  std::uint8_t* codes[2];
  fp8::scale_type_t<Scale>* scales[2];
  std::size_t n;  // elements
};

struct bulk_tuning_row {
  std::string kernel, label, cpp;
  bool is_default;
  double bytes;    // moved per launch: values, codes and scales, read or written
  double ms;       // the caller's timing of one launch
  double copy_ms;  // a device copy of the same bytes
  bool same_output;  // the output (set 0) is the default tuning's, bit for bit
};

// Every candidate Tn of the kernel (Quantize: quantize_blocks, else dequantize_blocks) on `b`:
// time_ms(std::function<void(int)> launch) times it, copy_ms(bytes) its copy; a row each, appended
// to `rows` (and given to on_row, if any, as it is measured).
template <bool Quantize, class T, fp8::scale_kind Scale, class... Tn, class Time, class Copy>
void sweep_bulk_tunings(const std::string& kernel, const bulk_sweep_buffers<T, Scale>& b, tunings<Tn...>,
                        Time&& time_ms, Copy&& copy_ms, std::vector<bulk_tuning_row>& rows,
                        const std::function<void(const bulk_tuning_row&)>& on_row = {}) {
  using D = std::conditional_t<Quantize, fp8::default_quantize_tuning<T, Scale>, fp8::default_dequantize_tuning<T, Scale>>;
  const std::size_t n = b.n, scale_bytes = (n + 31) / 32 * sizeof(fp8::scale_type_t<Scale>);
  const double bytes = static_cast<double>(n) * (sizeof(T) + 1) + static_cast<double>(scale_bytes);
  const auto run = [&](auto tuning, int i) {
    using Tuning = decltype(tuning);
    if constexpr (Quantize)
      fp8::quantize_blocks<fp8::e4m3, 32, Scale, fp8::path::automatic, T, Tuning>(b.values[i], n, b.codes[i], b.scales[i]);
    else
      fp8::dequantize_blocks<fp8::e4m3, 32, Scale, fp8::path::automatic, T, Tuning>(b.codes[i], b.scales[i], n, b.values[i]);
  };
  const auto output = [&] {  // set 0's output, once the device is done
    gpu::device_synchronize();
    std::vector<unsigned char> out(Quantize ? n + scale_bytes : n * sizeof(T));
    if constexpr (Quantize) {
      gpu::copy(out.data(), b.codes[0], n);
      gpu::copy(out.data() + n, b.scales[0], scale_bytes);
    } else {
      gpu::copy(out.data(), b.values[0], n * sizeof(T));
    }
    return out;
  };
  run(D{}, 0);
  const std::vector<unsigned char> want = output();
  const auto one = [&](auto tuning) {
    using Tuning = decltype(tuning);
    const double ms = time_ms(std::function<void(int)>([&](int i) { run(Tuning{}, i % 2); }));
    const bool same = output() == want;
    rows.push_back({kernel, tuning_label<Tuning>(), tuning_cpp<Tuning>(), std::is_same<Tuning, D>::value, bytes, ms,
                    copy_ms(bytes), same});
    if (on_row) on_row(rows.back());
  };
  (one(Tn{}), ...);
}

// One kernel's outcome of a sweep: the candidate closest to its copy's time (the highest copy_ms / ms)
// among those whose output is the default's (the kernel's first row if none is), and the default.
struct bulk_tuning_pick {
  const bulk_tuning_row* best;
  const bulk_tuning_row* default_row;
};

// A pick per kernel of `rows`, in order; a kernel's rows are consecutive (as sweep_bulk_tunings
// appends them), its default the first if none is marked. The rows must outlive the picks.
inline std::vector<bulk_tuning_pick> best_bulk_tunings(const std::vector<bulk_tuning_row>& rows) {
  std::vector<bulk_tuning_pick> picks;
  const auto ratio = [](const bulk_tuning_row* r) { return r->copy_ms / r->ms; };
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const bulk_tuning_row* r = &rows[i];
    if (i == 0 || r->kernel != rows[i - 1].kernel) picks.push_back({r, r});
    bulk_tuning_pick& p = picks.back();
    if (r->same_output && (!p.best->same_output || ratio(r) > ratio(p.best))) p.best = r;
    if (r->is_default && !p.default_row->is_default) p.default_row = r;
  }
  return picks;
}

}  // namespace testing
RCCLX_NAMESPACE_END
