// rcclx-bench-fp8: bandwidth of the bulk block-scaled FP8 kernels (rcclx::fp8::quantize_blocks /
// dequantize_blocks) against a device copy of the same bytes measured in the same run, and
// PyTorch's own FP8 conversions (bench/fp8/torch_baseline.py, run with python3 when available).
//
//   rcclx-bench-fp8 --suite gpu --out DIR [--mib 256] [--iters 50] [--no-torch] [--python python3]
//   rcclx-bench-fp8 --suite smoke [--tune] (host backend: a tiny run that checks the results; --tune
//                                          adds the tuning sweep, to check its plumbing)
//
// Bytes moved count reads + writes (elements, codes and scales). Each figure is the median of
// --iters timed launches (CUDA/HIP events around each launch) alternating between two buffer
// sets, each far beyond the L2 (256 MiB of float32 input by default). Targets: every
// kernel >= 90% of the copy bandwidth; dequantize e4m3 -> float >= 2x PyTorch's x.float().
// Writes DIR/fp8_bench.json and DIR/fp8_bench.csv, and (GPU suite) DIR/fp8_tune.csv: the tuning
// sweep, every candidate fp8::bulk_tuning of the 8 target kernels against a copy of the same bytes,
// its output checked against the default's (--no-tune skips it).
#include <rcclx/fp8/quantize_blocks.hpp>
#include <rcclx/gpu/arch.hpp>
#include <rcclx/gpu/event_timer.hpp>
#include <rcclx/gpu/runtime.hpp>
#include <rcclx/testing/bulk_tuning_sweep.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "../common/report.hpp"

namespace {
namespace f8 = rcclx::fp8;
namespace gpu = rcclx::gpu;
namespace rt = rcclx::testing;
using f8::scale_kind;
using rcclx::bf16;

#ifndef RCCLX_FP8_TORCH_BASELINE
#  define RCCLX_FP8_TORCH_BASELINE "bench/fp8/torch_baseline.py"
#endif

// ---- timing ------------------------------------------------------------------------------------
void device_copy(void* dst, const void* src, std::size_t bytes) { gpu::copy_async(dst, src, bytes, gpu::stream_t{}); }
std::string device_name() { return rcclx::current_backend == rcclx::backend::host ? "host backend (CPU)" : gpu::device_name(); }

// Median of `iters` timed runs of fn(i) (after a few untimed ones), in milliseconds: GPU events on
// the default stream, or the host's clock.
double median_ms(int iters, const std::function<void(int)>& fn) {
  for (int i = 0; i < 3; ++i) fn(i);
  gpu::device_synchronize();
  std::vector<double> t;
  gpu::event_timer e;
  for (int i = 0; i < iters; ++i) {
    e.start(gpu::stream_t{});
    fn(i);
    t.push_back(e.stop_ms(gpu::stream_t{}));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// ---- kernels of the baseline and the input ---------------------------------------------------------
RCCLX_HOST_DEVICE inline std::uint32_t mix(std::uint64_t i) {
  std::uint64_t z = i * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
  return static_cast<std::uint32_t>(z ^ (z >> 29));
}
// Values with a different magnitude per 32-element block (2^-20 .. 2^20), random mantissas and signs.
RCCLX_HOST_DEVICE inline float input_value(std::size_t i) {
  const std::uint32_t r = mix(i), e = mix(i / 32 + 0x12345) % 41;
  const std::uint32_t bits = (r & 0x807FFFFFu) | ((107u + e) << 23);
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

#if RCCLX_BACKEND_GPU
RCCLX_GLOBAL void fill_kernel(float* x, bf16* y, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    x[i] = input_value(i);
    y[i] = bf16(x[i]);
  }
}
// The roofline: a 16-byte-vector grid-stride copy with 4 loads in flight per thread (the same
// access pattern as the FP8 kernels).
RCCLX_GLOBAL void copy_kernel(const gpu::vec16* in, gpu::vec16* out, std::size_t n_vec) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n_vec; i += 4 * stride) {
    gpu::vec16 v[4];
    for (int u = 0; u < 4; ++u)
      if (i + u * stride < n_vec) v[u] = gpu::load16(in + i + u * stride);
    for (int u = 0; u < 4; ++u)
      if (i + u * stride < n_vec) gpu::store16(out + i + u * stride, v[u]);
  }
}
#endif

void fill(float* x, bf16* y, std::size_t n) {
#if RCCLX_BACKEND_GPU
  fill_kernel<<<1024, 256>>>(x, y, n);
  gpu::check_launch("fill_kernel");
#else
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = input_value(i);
    y[i] = bf16(x[i]);
  }
#endif
}

void copy_kernel_launch(const void* in, void* out, std::size_t bytes) {
#if RCCLX_BACKEND_GPU
  static const int grid = gpu::max_resident_blocks(copy_kernel, 256);
  copy_kernel<<<grid, 256>>>(static_cast<const gpu::vec16*>(in), static_cast<gpu::vec16*>(out), bytes / 16);
  gpu::check_launch("copy_kernel");
#else
  std::memcpy(out, in, bytes);
#endif
}

// ---- the benchmark ---------------------------------------------------------------------------------
// One set of every buffer the rows use; two sets alternate between iterations (each far beyond the L2).
struct buffers {
  float* f32;
  bf16* b16;
  std::uint8_t* q;
  float* s32;
  f8::e8m0* s8;
  float* y32;
  bf16* y16;
  explicit buffers(std::size_t n) {
    const std::size_t nb = (n + 31) / 32;
    const auto alloc = [](std::size_t bytes) { return gpu::device_malloc(bytes); };
    f32 = static_cast<float*>(alloc(n * 4)), b16 = static_cast<bf16*>(alloc(n * 2));
    q = static_cast<std::uint8_t*>(alloc(n)), s32 = static_cast<float*>(alloc(nb * 4));
    s8 = static_cast<f8::e8m0*>(alloc(nb)), y32 = static_cast<float*>(alloc(n * 4)), y16 = static_cast<bf16*>(alloc(n * 2));
    fill(f32, b16, n);
  }
  ~buffers() {
    for (void* p : std::initializer_list<void*>{f32, b16, q, s32, s8, y32, y16}) gpu::device_free(p);
  }
  buffers(const buffers&) = delete;
  buffers& operator=(const buffers&) = delete;
};

struct row {
  std::string name;
  double bytes;   // moved per launch (reads + writes)
  double ms;      // median
  bool target;    // counts towards the >= 90% of copy target
  double copy_same_ms = 0;  // a device copy moving the same bytes (bytes/2 read + bytes/2 written)
  double gbps() const { return bytes / (ms * 1e-3) / 1e9; }
};

std::string arg(int argc, char** argv, const std::string& key, const std::string& def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == key) return argv[i + 1];
  return def;
}
bool flag(int argc, char** argv, const std::string& key) {
  for (int i = 1; i < argc; ++i)
    if (argv[i] == key) return true;
  return false;
}

// Runs torch_baseline.py and returns its numbers (empty with "error" set on failure).
std::map<std::string, double> run_torch(const std::string& python, std::size_t n, int iters, std::string& error,
                                        std::string& raw) {
  std::map<std::string, double> out;
  const std::string cmd = python + " " + RCCLX_FP8_TORCH_BASELINE + " --n " + std::to_string(n) + " --iters " +
                          std::to_string(iters) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    error = "cannot run: " + cmd;
    return out;
  }
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) raw += buf;
  const int rc = pclose(p);
  const auto brace = raw.rfind('{');
  if (rc != 0 || brace == std::string::npos) {
    error = "`" + cmd + "` failed (exit " + std::to_string(rc) + "): " + raw.substr(0, 400);
    return out;
  }
  const std::string json = raw.substr(brace);
  if (json.find("\"error\"") != std::string::npos) {
    error = json;
    return out;
  }
  // Flat JSON of numbers and strings: pick every "key": number.
  std::size_t pos = 0;
  while ((pos = json.find('"', pos)) != std::string::npos) {
    const auto end = json.find('"', pos + 1);
    if (end == std::string::npos) break;
    const std::string key = json.substr(pos + 1, end - pos - 1);
    auto colon = json.find(':', end);
    if (colon == std::string::npos) break;
    const char* v = json.c_str() + colon + 1;
    char* stop = nullptr;
    const double d = std::strtod(v, &stop);
    if (stop != v) out[key] = d;
    pos = end + 1;
  }
  return out;
}

// Host check of a sample: the device bytes equal the host functor's (software path).
template <class T, scale_kind S>
bool check_sample(const T* d_in, const std::uint8_t* d_q, const f8::scale_type_t<S>* d_s, std::size_t n) {
  const std::size_t blocks = std::min<std::size_t>(4096, n / 32);
  std::vector<T> in(blocks * 32);
  std::vector<std::uint8_t> q(blocks * 32);
  std::vector<f8::scale_type_t<S>> s(blocks);
  const std::size_t first = (n / 32 - blocks) / 2 * 32;  // from the middle of the buffer
  gpu::copy(in.data(), d_in + first, in.size() * sizeof(T));
  gpu::copy(q.data(), d_q + first, q.size());
  gpu::copy(s.data(), d_s + first / 32, s.size() * sizeof(s[0]));
  for (std::size_t b = 0; b < blocks; ++b) {
    std::uint8_t want[32];
    const auto ws = f8::block_quantize<f8::e4m3, 32, S, f8::path::software>{}(in.data() + b * 32, want);
    if (std::memcmp(&ws, &s[b], sizeof ws) != 0 || std::memcmp(want, q.data() + b * 32, 32) != 0) return false;
  }
  return true;
}

// ---- tuning sweep (testing/bulk_tuning_sweep.hpp) --------------------------------------------------
using f8::bulk_tuning;
constexpr int PF = f8::bulk_prefetch, SS = f8::bulk_store_streaming, LS = f8::bulk_load_streaming,
              NL = f8::bulk_load_no_l1;
// Candidates. The first of each list is the tuning of the previous defaults; registers per thread
// (nvcc 13, sm_90) decide the occupancy: <= 32 gives 2048 threads per SM, 40 gives 1536; MinBlocks 8
// (the sixth argument) asks for 32.
using quantize_f32_candidates =
    rt::tunings<bulk_tuning<2>, bulk_tuning<2, 0, PF>, bulk_tuning<1, 0, PF>, bulk_tuning<1>, bulk_tuning<2, 0, SS>,
            bulk_tuning<2, 0, PF | SS>, bulk_tuning<2, 0, PF | LS>, bulk_tuning<2, 0, PF, 0>, bulk_tuning<4>,
            bulk_tuning<2, 0, 0, 1, 256, 8>, bulk_tuning<2, 0, SS, 1, 256, 8>, bulk_tuning<1, 0, PF, 1, 256, 8>>;
using quantize_bf16_candidates =
    rt::tunings<bulk_tuning<1>, bulk_tuning<1, 0, PF, 1, 256, 8>, bulk_tuning<1, 0, PF>, bulk_tuning<2>,
            bulk_tuning<2, 0, PF>, bulk_tuning<1, 0, PF | SS, 1, 256, 8>, bulk_tuning<1, 0, PF | LS, 1, 256, 8>,
            bulk_tuning<1, 0, PF | LS | SS, 1, 256, 8>, bulk_tuning<1, 0, PF | NL, 1, 256, 8>, bulk_tuning<1, 0, SS>,
            bulk_tuning<1, 16>, bulk_tuning<1, 16, PF>, bulk_tuning<1, 0, PF, 2, 256, 8>,
            bulk_tuning<1, 0, PF, 0, 256, 8>, bulk_tuning<1, 0, 0, 0>, bulk_tuning<2, 0, 0, 0>,
            bulk_tuning<1, 0, PF, 1, 512, 4>, bulk_tuning<1, 0, PF, 1, 128, 16>, bulk_tuning<4>>;
using dequantize_f32_candidates =
    rt::tunings<bulk_tuning<2, 0, SS>, bulk_tuning<2, 0, SS | PF>, bulk_tuning<1, 0, SS | PF>, bulk_tuning<1, 0, SS>,
            bulk_tuning<4, 0, SS>, bulk_tuning<2, 0, PF>, bulk_tuning<2, 0, SS | PF | LS>, bulk_tuning<2, 0, SS | PF | NL>,
            bulk_tuning<2, 0, SS, 0>, bulk_tuning<1, 0, SS, 0>, bulk_tuning<2, 0, SS | PF, 2>,
            bulk_tuning<2, 0, SS | PF, 1, 512>>;
using dequantize_bf16_candidates =
    rt::tunings<bulk_tuning<2, 0, SS>, bulk_tuning<2, 0, SS | PF>, bulk_tuning<1, 0, SS>, bulk_tuning<1, 0, SS | PF>,
            bulk_tuning<4, 0, SS>, bulk_tuning<4, 0, SS | PF>, bulk_tuning<4, 0, SS | PF, 1, 256, 8>, bulk_tuning<2>,
            bulk_tuning<2, 0, PF>, bulk_tuning<2, 0, SS | PF | LS>, bulk_tuning<2, 0, SS | PF | NL>,
            bulk_tuning<2, 0, SS, 0>, bulk_tuning<1, 0, SS, 0>, bulk_tuning<2, 0, SS | PF, 2>,
            bulk_tuning<2, 0, SS | PF, 1, 512>>;

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string suite = arg(argc, argv, "--suite", rcclx::current_backend == rcclx::backend::host ? "smoke" : "gpu");
    const std::string out_dir = arg(argc, argv, "--out", "");
    const bool gpu_suite = suite == "gpu" && rcclx::current_backend != rcclx::backend::host;
    if (rcclx::current_backend != rcclx::backend::host && gpu::device_count() == 0) {
      std::printf("rcclx-bench-fp8: no GPU present; nothing measured\n");
      return 0;
    }
    const double mib = std::atof(arg(argc, argv, "--mib", gpu_suite ? "256" : "1").c_str());
    const int iters = std::atoi(arg(argc, argv, "--iters", gpu_suite ? "50" : "3").c_str());
    const std::size_t n = static_cast<std::size_t>(mib * 1024 * 1024 / 4) / 1024 * 1024;  // float32 elements
    const std::size_t nb = n / 32;
    std::printf("rcclx-bench-fp8: %s, suite %s, n = %zu elements (%.0f MiB of float32 input), median of %d\n",
                device_name().c_str(), suite.c_str(), n, mib, iters);

    buffers set0(n), set1(n);
    buffers* sets[2] = {&set0, &set1};
    gpu::device_synchronize();
    auto S = [&](int i) -> buffers& { return *sets[i % 2]; };
    std::vector<row> rows;
    // Copy of the same bytes as a row (bytes/2 read + bytes/2 written), the faster of memcpy and the
    // 16-byte copy kernel: the like-for-like roofline for a kernel that moves fewer bytes than the
    // 256 MiB float copy (smaller transfers reach a little less of the peak).
    auto copy_same = [&](double bytes) {
      const std::size_t half = static_cast<std::size_t>(bytes / 2) / 16 * 16;
      const double a = median_ms(iters, [&](int i) { device_copy(S(i).y32, S(i).f32, half); });
      const double b = median_ms(iters, [&](int i) { copy_kernel_launch(S(i).f32, S(i).y32, half); });
      return std::min(a, b);
    };
    auto add = [&](const std::string& name, double bytes, bool target, const std::function<void(int)>& fn) {
      rows.push_back({name, bytes, median_ms(iters, fn), target});
      row& r = rows.back();
      if (gpu_suite) r.copy_same_ms = copy_same(bytes);
      std::printf("  %-48s %9.1f us  %8.1f GB/s\n", r.name.c_str(), r.ms * 1e3, r.gbps());
      std::fflush(stdout);
    };
    const double N = static_cast<double>(n), NB = static_cast<double>(nb);

    add("copy kernel (16-byte vectors), float32", 8 * N, false,
        [&](int i) { copy_kernel_launch(S(i).f32, S(i).y32, n * 4); });
    add("device memcpy, float32", 8 * N, false, [&](int i) { device_copy(S(i).y32, S(i).f32, n * 4); });
    const double copy_gbps = std::max(rows[0].gbps(), rows[1].gbps());

    using E = f8::e4m3;
    add("quantize f32 -> e4m3, fp32 scale/32", 4 * N + N + 4 * NB, true,
        [&](int i) { f8::quantize_blocks<E>(S(i).f32, n, S(i).q, S(i).s32); });
    const bool ok_q32 = check_sample<float, scale_kind::fp32>(S(0).f32, S(0).q, S(0).s32, n);
    add("quantize f32 -> e4m3, e8m0 scale/32", 4 * N + N + NB, true,
        [&](int i) { f8::quantize_blocks<E, 32, scale_kind::e8m0>(S(i).f32, n, S(i).q, S(i).s8); });
    const bool ok_q8 = check_sample<float, scale_kind::e8m0>(S(0).f32, S(0).q, S(0).s8, n);
    add("quantize bf16 -> e4m3, fp32 scale/32", 2 * N + N + 4 * NB, true,
        [&](int i) { f8::quantize_blocks<E>(S(i).b16, n, S(i).q, S(i).s32); });
    const bool ok_qb = check_sample<bf16, scale_kind::fp32>(S(0).b16, S(0).q, S(0).s32, n);
    add("quantize bf16 -> e4m3, e8m0 scale/32", 2 * N + N + NB, true,
        [&](int i) { f8::quantize_blocks<E, 32, scale_kind::e8m0>(S(i).b16, n, S(i).q, S(i).s8); });
    // Restore fp32-scaled payloads for the dequantize runs.
    for (int k = 0; k < 2; ++k) f8::quantize_blocks<E>(S(k).f32, n, S(k).q, S(k).s32);
    add("dequantize e4m3 -> f32, fp32 scale/32", N + 4 * NB + 4 * N, true,
        [&](int i) { f8::dequantize_blocks<E>(S(i).q, S(i).s32, n, S(i).y32); });
    const std::size_t dequant_row = rows.size() - 1;
    add("dequantize e4m3 -> f32, e8m0 scale/32", N + NB + 4 * N, true,
        [&](int i) { f8::dequantize_blocks<E, 32, scale_kind::e8m0>(S(i).q, S(i).s8, n, S(i).y32); });
    add("dequantize e4m3 -> bf16, fp32 scale/32", N + 4 * NB + 2 * N, true,
        [&](int i) { f8::dequantize_blocks<E>(S(i).q, S(i).s32, n, S(i).y16); });
    add("dequantize e4m3 -> bf16, e8m0 scale/32", N + NB + 2 * N, true,
        [&](int i) { f8::dequantize_blocks<E, 32, scale_kind::e8m0>(S(i).q, S(i).s8, n, S(i).y16); });
    // For information: the portable software path, and FNUZ (software on NVIDIA, hardware on gfx94x).
    add("(info) quantize f32 -> e4m3, software path", 4 * N + N + 4 * NB, false, [&](int i) {
      f8::quantize_blocks<E, 32, scale_kind::fp32, f8::path::software>(S(i).f32, n, S(i).q, S(i).s32);
    });
    add("(info) dequantize e4m3 -> f32, software path", N + 4 * NB + 4 * N, false, [&](int i) {
      f8::dequantize_blocks<E, 32, scale_kind::fp32, f8::path::software>(S(i).q, S(i).s32, n, S(i).y32);
    });
    add("(info) quantize f32 -> e4m3_fnuz, fp32 scale/32", 4 * N + N + 4 * NB, false,
        [&](int i) { f8::quantize_blocks<f8::e4m3_fnuz>(S(i).f32, n, S(i).q, S(i).s32); });
    gpu::device_synchronize();
    const bool samples_ok = ok_q32 && ok_q8 && ok_qb;

    // PyTorch, same element count, same machine.
    std::map<std::string, double> torch;
    std::string torch_error, torch_raw;
    if (gpu_suite && !flag(argc, argv, "--no-torch")) {
      torch = run_torch(arg(argc, argv, "--python", "python3"), n, iters, torch_error, torch_raw);
    } else {
      torch_error = gpu_suite ? "disabled (--no-torch)" : "not run (host backend or smoke suite)";
    }

    // Tuning sweep (GPU suite): every candidate tuning of the 8 target kernels, each against a copy
    // of the same bytes measured right after it; `*` marks the current default
    // (fp8::default_quantize_tuning / default_dequantize_tuning). Rows whose output differs from the
    // default's are flagged.
    std::vector<rt::bulk_tuning_row> tune_rows;
    if ((gpu_suite || flag(argc, argv, "--tune")) && !flag(argc, argv, "--no-tune")) {
      std::printf("\ntuning sweep (U = fragments in flight per lane, E = elements per lane, pf = software prefetch,\n"
                  "st.cs / ld.cs = streaming stores / loads, ld.noL1 = loads without L1 allocation, grid=tiles = a\n"
                  "block per tile instead of a resident grid-stride grid, T = threads per block; * = default):\n");
      const auto sweep = [&](auto quantize, auto type, auto scale, const char* kernel, auto candidates) {
        using T = decltype(type);
        constexpr scale_kind Sk = decltype(scale)::value;
        constexpr bool f32 = std::is_same<T, float>::value;
        rt::bulk_sweep_buffers<T, Sk> b{};
        for (int k = 0; k < 2; ++k) {
          buffers& s = S(k);
          if constexpr (f32) b.values[k] = decltype(quantize)::value ? s.f32 : s.y32;  // inputs, or outputs
          else b.values[k] = decltype(quantize)::value ? s.b16 : s.y16;
          b.codes[k] = s.q;
          if constexpr (Sk == scale_kind::fp32) b.scales[k] = s.s32;
          else b.scales[k] = s.s8;
        }
        b.n = n;
        rt::sweep_bulk_tunings<decltype(quantize)::value>(
            kernel, b, candidates, [&](const std::function<void(int)>& fn) { return median_ms(iters, fn); }, copy_same,
            tune_rows, [](const rt::bulk_tuning_row& r) {
              std::printf("  tune %-26s %-26s%s %8.1f us %8.1f GB/s  vs same-bytes copy %6.1f%%%s\n", r.kernel.c_str(),
                          r.label.c_str(), r.is_default ? "*" : " ", r.ms * 1e3, r.bytes / (r.ms * 1e-3) / 1e9,
                          100 * r.copy_ms / r.ms, r.same_output ? "" : "  OUTPUT DIFFERS FROM THE DEFAULT");
              std::fflush(stdout);
            });
      };
      using q = std::true_type;
      using dq = std::false_type;
      using fp32 = std::integral_constant<scale_kind, scale_kind::fp32>;
      using e8m0 = std::integral_constant<scale_kind, scale_kind::e8m0>;
      // Every (element type, scale) pair keeps its payload in the same buffers: quantize rows first.
      sweep(q{}, bf16{}, fp32{}, "quant bf16, fp32 scale", quantize_bf16_candidates{});
      sweep(q{}, bf16{}, e8m0{}, "quant bf16, e8m0 scale", quantize_bf16_candidates{});
      sweep(q{}, float{}, fp32{}, "quant f32, fp32 scale", quantize_f32_candidates{});
      sweep(q{}, float{}, e8m0{}, "quant f32, e8m0 scale", quantize_f32_candidates{});
      // Codes + both scale arrays for the dequantize rows, identical in both sets.
      for (int k = 0; k < 2; ++k) {
        f8::quantize_blocks<E, 32, scale_kind::e8m0>(S(k).f32, n, S(k).q, S(k).s8);
        f8::quantize_blocks<E>(S(k).f32, n, S(k).q, S(k).s32);
      }
      gpu::device_synchronize();
      sweep(dq{}, bf16{}, fp32{}, "dequant bf16, fp32 scale", dequantize_bf16_candidates{});
      sweep(dq{}, bf16{}, e8m0{}, "dequant bf16, e8m0 scale", dequantize_bf16_candidates{});
      sweep(dq{}, float{}, fp32{}, "dequant f32, fp32 scale", dequantize_f32_candidates{});
      sweep(dq{}, float{}, e8m0{}, "dequant f32, e8m0 scale", dequantize_f32_candidates{});
      gpu::device_synchronize();
      // The best candidate per kernel, spelled as fp8/bulk_tuning.hpp spells its defaults.
      std::printf("\nbest tuning per kernel (vs same-bytes copy; only candidates whose output equals the default's):\n");
      for (const auto& [best, def] : rt::best_bulk_tunings(tune_rows))
        std::printf("  %-26s best %6.1f%% %-24s default %6.1f%%   %s\n", best->kernel.c_str(), 100 * best->copy_ms / best->ms,
                    best->label.c_str(), 100 * def->copy_ms / def->ms, best->cpp.c_str());
    }

    std::printf("\n%-48s %10s %10s %9s %11s %8s\n", "kernel", "time (us)", "GB/s", "vs copy", "vs same-B", "target");
    bool all_pass = true;
    for (const row& r : rows) {
      const double ratio = r.gbps() / copy_gbps;
      // The target compares with a copy of the same bytes, measured in this run (like for like);
      // "vs copy" is against the 256 MiB float32 copy, for reference.
      const double same = r.copy_same_ms > 0 ? r.copy_same_ms / r.ms : ratio;
      const bool pass = same >= 0.90;
      if (r.target) all_pass = all_pass && pass;
      const char* verdict = !r.target ? "-" : !gpu_suite ? "n/a" : pass ? "ok" : "MISSED";
      std::printf("%-48s %10.1f %10.1f %8.1f%% %10.1f%% %8s\n", r.name.c_str(), r.ms * 1e3, r.gbps(), 100 * ratio,
                  100 * same, verdict);
    }
    std::printf("copy bandwidth (best of kernel and memcpy, 256 MiB float32): %.1f GB/s; every FP8 kernel >= 90%% of a "
                "copy of the same bytes: %s\n", copy_gbps,
                !gpu_suite ? "n/a (targets apply to --suite gpu)" : all_pass ? "yes" : "NO");
    std::printf("device results equal the host reference on a sample: %s\n", samples_ok ? "yes" : "NO");
    double torch_ratio = 0;
    if (!torch.empty()) {
      const double t_deq = torch["fp8_e4m3fn_to_float_ms"];
      torch_ratio = t_deq / rows[dequant_row].ms;
      std::printf("\nPyTorch baseline (same n, same GPU; bench/fp8/torch_baseline.py), median ms:\n");
      std::printf("  x.float() on float8_e4m3fn      %8.3f ms   rcclx dequantize (with scales) %8.3f ms   -> %.2fx %s\n",
                  t_deq, rows[dequant_row].ms, torch_ratio, torch_ratio >= 2.0 ? "(target 2x: ok)" : "(target 2x: MISSED)");
      std::printf("  x.to(float8_e4m3fn) from float32 %8.3f ms   rcclx quantize (with scales)   %8.3f ms   -> %.2fx\n",
                  torch["float_to_fp8_e4m3fn_ms"], rows[2].ms, torch["float_to_fp8_e4m3fn_ms"] / rows[2].ms);
      std::printf("  x.to(float8_e4m3fn) from bf16    %8.3f ms   rcclx quantize (with scales)   %8.3f ms   -> %.2fx\n",
                  torch["bf16_to_fp8_e4m3fn_ms"], rows[4].ms, torch["bf16_to_fp8_e4m3fn_ms"] / rows[4].ms);
      std::printf("  x.to(bfloat16) from float8_e4m3fn %7.3f ms   rcclx dequantize to bf16       %8.3f ms   -> %.2fx\n",
                  torch["fp8_e4m3fn_to_bf16_ms"], rows[dequant_row + 2].ms,
                  torch["fp8_e4m3fn_to_bf16_ms"] / rows[dequant_row + 2].ms);
      std::printf("  torch copy_ of n float32         %8.3f ms (%.1f GB/s)\n", torch["copy_float_ms"],
                  8 * N / (torch["copy_float_ms"] * 1e-3) / 1e9);
    } else {
      std::printf("\nPyTorch baseline not measured: %s\n", torch_error.c_str());
    }

    if (!out_dir.empty()) {
      std::filesystem::create_directories(out_dir);
      const std::string base = out_dir + "/fp8_bench";
      const auto row_fields = [&](const row& r) {
        return bench::fields{{"kernel", r.name}, {"bytes", static_cast<unsigned long long>(r.bytes)}, {"median_us", r.ms * 1e3}, {"gbps", r.gbps()},
                             {"ratio_to_copy", r.gbps() / copy_gbps}};
      };
      bench::write_csv(base + ".csv", "\"kernel\",bytes,median_us,gbps,ratio_to_copy,target", rows,
                       [&](const row& r) { return row_fields(r) + bench::fields{{"target", r.target ? 1 : 0}}; });
      std::ofstream f = bench::open_output(base + ".json");
      f << "{\n";
      bench::write_json_members(f, {{"device", device_name()}, {"suite", suite}, {"n", static_cast<unsigned long>(n)},
                                    {"iters", iters}, {"copy_gbps", copy_gbps}, {"all_kernels_ge_90pct_copy", all_pass},
                                    {"sample_check", samples_ok}});
      f << "  \"rows\": [\n";
      bench::write_json_rows(f, rows, row_fields);
      f << "  ],\n";
      bench::fields t;
      for (const auto& kv : torch) t.push_back({kv.first, kv.second});
      if (!torch.empty()) f << "  \"torch\": " << bench::json_object(t) << ",\n  \"dequantize_vs_torch_float\": " << bench::json_number(torch_ratio) << "\n}\n";
      else f << "  \"torch_error\": \"" << bench::json_escape(torch_error) << "\"\n}\n";
      f.close();
      if (!tune_rows.empty())
        bench::write_csv(out_dir + "/fp8_tune.csv", "\"kernel\",\"label\",\"tuning\",default,bytes,median_us,gbps,same_bytes_copy_us,ratio_to_same_bytes_copy,same_output",
                         tune_rows, [](const rt::bulk_tuning_row& r) {
                           return bench::fields{{"kernel", r.kernel}, {"label", r.label}, {"tuning", r.cpp},
                                                {"default", r.is_default ? 1 : 0}, {"bytes", static_cast<unsigned long long>(r.bytes)}, {"median_us", r.ms * 1e3},
                                                {"gbps", r.bytes / (r.ms * 1e-3) / 1e9}, {"same_bytes_copy_us", r.copy_ms * 1e3},
                                                {"ratio_to_same_bytes_copy", r.copy_ms / r.ms}, {"same_output", r.same_output ? 1 : 0}};
                         });
      const bool wrote = std::filesystem::exists(base + ".json") && std::filesystem::exists(base + ".csv");
      std::printf("%s %s.json and %s.csv\n", wrote ? "wrote" : "FAILED to write", base.c_str(), base.c_str());
    }
    bool tune_same = true;
    for (const rt::bulk_tuning_row& r : tune_rows) tune_same = tune_same && r.same_output;
    if (!tune_same) std::printf("SOME TUNING CANDIDATES' OUTPUT DIFFERS FROM THE DEFAULT'S (see the sweep)\n");
    return samples_ok && tune_same ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rcclx-bench-fp8: %s\n", e.what());
    return 2;
  }
}
