// Example 05: the fused AllReduce + residual add + RMSNorm of a transformer layer's end, on 8
// emulated ranks (one GPU, or threads on the host backend), for a decode step (a few tokens: flat,
// one step) and a prefill chunk (many tokens: tree, two steps), with bf16 and FP8 (e4m3) outputs.
// Every rank's output is checked against a float64 reference.
//
//   rcclx_example_allreduce_rmsnorm [tokens hidden]
//
// Per rank and row:  residual <- allreduce(x) + residual;  out <- residual / rms(residual) * weight
// (vLLM's / TRT-LLM's fused_add_rms_norm after the tensor-parallel AllReduce). In a real job each
// process calls the host launcher rcclx::fused::allreduce_rmsnorm(table, args, slots) on its stream,
// or calls allreduce_rmsnorm_block from its own kernel as this example does for 8 ranks at once.
#include <rcclx/fused/allreduce_rmsnorm.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

using T = rcclx::bf16;
namespace fz = rcclx::fused;
constexpr int max_ranks = 8;
constexpr bool on_gpu = rcclx::current_backend != rcclx::backend::host;
// The ready-made kernels' shape: blocks of 512 threads holding a row (one thread on the host).
constexpr int threads = on_gpu ? fz::default_rmsnorm_launch_config().threads : 1;
constexpr std::size_t hidden_max = 8192;
constexpr int vecs_per_thread = static_cast<int>(hidden_max / 8 / threads);  // bf16: 8 per 16-byte vector

// [fusion-rmsnorm-block]
// Every emulated rank in one launch: block ix.block of rank ix.rank. In your own kernel, call
// allreduce_rmsnorm_block with your rank's table and blockIdx.x / gridDim.x.
template <rcclx::algorithm Algo, class Out>
struct fused_layer_end {
  static constexpr int max_threads_per_block = threads;
  const rcclx::core::peer_table<T, max_ranks>* tables;
  fz::rmsnorm_args<T, Out> args[max_ranks];
  fz::tile_slots slots;

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, rcclx::testing::launch_index ix) const {
    (void)fz::allreduce_rmsnorm_block<Algo, vecs_per_thread, threads>(g, tables[ix.rank], args[ix.rank], slots,
                                                                      ix.block, ix.num_blocks);
  }
};
// [fusion-rmsnorm-block]

const char* backend_name() {
  switch (rcclx::current_backend) {
    case rcclx::backend::hip: return "HIP";
    case rcclx::backend::cuda: return "CUDA";
    default: return "host (threads)";
  }
}

struct host_data {
  std::vector<std::vector<T>> x;  // per rank
  std::vector<T> residual, weight;
};

// float64 reference of every element: the normalised value, the new residual, and the size of the
// bf16 rounding errors upstream (|sum of x| + |old residual|: the sum and the new residual are
// each rounded to bf16, relative to those magnitudes).
void reference(const host_data& h, std::size_t tokens, std::size_t hidden, std::vector<double>& out,
               std::vector<double>& res, std::vector<double>& mag, std::vector<double>& out_mag) {
  out.assign(tokens * hidden, 0.0);
  res.assign(tokens * hidden, 0.0);
  mag.assign(tokens * hidden, 0.0);
  out_mag.assign(tokens * hidden, 0.0);
  for (std::size_t i = 0; i < tokens; ++i) {
    double ss = 0;
    for (std::size_t j = 0; j < hidden; ++j) {
      double s = 0;
      for (const auto& x : h.x) s += static_cast<float>(x[i * hidden + j]);
      const double old = static_cast<float>(h.residual[i * hidden + j]);
      res[i * hidden + j] = s + old;
      mag[i * hidden + j] = std::fabs(s) + std::fabs(old);
      ss += (s + old) * (s + old);
    }
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(hidden) + 1e-6);
    for (std::size_t j = 0; j < hidden; ++j) {
      out[i * hidden + j] = res[i * hidden + j] * inv * static_cast<float>(h.weight[j]);
      out_mag[i * hidden + j] = mag[i * hidden + j] * inv * std::fabs(static_cast<float>(h.weight[j]));
    }
  }
}

template <class Out>
int run(rcclx::testing::emulated_world<max_ranks>& world, const host_data& h, std::size_t tokens, std::size_t hidden,
        rcclx::algorithm algo, const char* label) {
  const int n = world.num_ranks();
  using out_t = fz::output_t<T, Out>;
  const std::size_t count = tokens * hidden;
  const float scale_value = 0.05f;  // FP8 output: codes = value / 0.05 (|value| <~ 4 -> < 100)
  std::vector<void*> owned;
  auto alloc = [&](const void* src, std::size_t bytes) {
    void* p = rcclx::gpu::device_malloc(bytes);
    if (src) rcclx::gpu::copy(p, src, bytes);
    owned.push_back(p);
    return p;
  };
  const auto* weight = static_cast<const T*>(alloc(h.weight.data(), hidden * sizeof(T)));
  const auto* scale = static_cast<const float*>(alloc(&scale_value, sizeof(float)));
  std::vector<fz::rmsnorm_args<T, Out>> args(n);
  for (int r = 0; r < n; ++r) {
    args[r] = fz::rmsnorm_args<T, Out>{static_cast<const T*>(alloc(h.x[r].data(), count * sizeof(T))),
                                       static_cast<T*>(alloc(h.residual.data(), count * sizeof(T))),
                                       weight,
                                       static_cast<out_t*>(alloc(nullptr, count * sizeof(out_t))),
                                       tokens,
                                       hidden,
                                       1e-6f,
                                       scale};
  }
  const fz::tile_slots slots{0, static_cast<int>(tokens)};  // the pads' first slots: no barriers here
  const auto go = [&](auto kernel) {
    kernel.tables = world.device_tables<T>();
    for (int r = 0; r < n; ++r) kernel.args[r] = args[r];
    kernel.slots = slots;
    const int blocks = std::max(1, std::min(fz::rmsnorm_blocks_for(tokens),
                                            rcclx::testing::max_blocks_per_rank<decltype(kernel)>(n, threads)));
    const auto t0 = std::chrono::steady_clock::now();
    rcclx::testing::launch_emulated(n, blocks, threads, kernel);
    rcclx::gpu::device_synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  const double ms = algo == rcclx::algorithm::flat ? go(fused_layer_end<rcclx::algorithm::flat, Out>{})
                                                   : go(fused_layer_end<rcclx::algorithm::tree, Out>{});
  world.throw_if_error();

  std::vector<double> ref_out, ref_res, mag, out_mag;
  reference(h, tokens, hidden, ref_out, ref_res, mag, out_mag);
  std::vector<out_t> out(count), out0(count);
  std::vector<T> res(count);
  int bad = 0;
  double max_err = 0;
  for (int r = 0; r < n; ++r) {
    rcclx::gpu::copy(out.data(), args[r].output, count * sizeof(out_t));
    rcclx::gpu::copy(res.data(), args[r].residual, count * sizeof(T));
    if (r == 0) out0 = out;
    bad += std::memcmp(out.data(), out0.data(), count * sizeof(out_t)) != 0;  // ranks agree bit for bit
    for (std::size_t i = 0; i < count; ++i) {
      double got;
      double u;  // relative precision of the output
      if constexpr (fz::rmsnorm_args<T, Out>::fp8_output) {
        got = rcclx::fp8::decode<Out>(out[i]) * scale_value;
        u = 0x1p-4;
      } else {
        got = static_cast<float>(out[i]);
        u = 0x1p-8;
      }
      // Upstream, the sum and the new residual are each rounded to bf16 (half an ulp: 2^-8
      // relative); the norm carries that into the output (out_mag), which is rounded once more
      // (u), plus FP8's subnormal spacing. Tight enough to catch a wrong row or a missing rank.
      const double tol = u * std::fabs(ref_out[i]) + 0x1p-7 * out_mag[i] + 0x1p-10 * std::fabs(ref_out[i]) +
                         (fz::rmsnorm_args<T, Out>::fp8_output ? scale_value * 0x1p-10 : 0.0);
      max_err = std::max(max_err, std::fabs(got - ref_out[i]));
      if (!(std::fabs(got - ref_out[i]) <= tol)) ++bad;
      if (!(std::fabs(static_cast<float>(res[i]) - ref_res[i]) <= 0x1p-8 * (mag[i] + std::fabs(ref_res[i])) + 1e-7)) ++bad;
    }
  }
  std::printf("  %-7s %5zu tokens x %5zu  %-4s %3.0f ms  max |err| %.3g  %s\n", label, tokens, hidden,
              rcclx::to_string(algo), ms, max_err, bad ? "FAILED" : "ok (ranks bit-identical)");
  for (void* p : owned) rcclx::gpu::device_free(p);
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  if (on_gpu && rcclx::gpu::device_count() == 0) {
    std::printf("built for %s but no GPU is present; rebuild with RCCLX_BACKEND=host\n", backend_name());
    return 0;
  }
  const int n = 8;
  std::size_t decode_tokens = 4, prefill_tokens = on_gpu ? 1024 : 40, hidden = on_gpu ? 4096 : 1032;
  if (argc == 3) {
    decode_tokens = prefill_tokens = std::strtoull(argv[1], nullptr, 10);
    hidden = std::strtoull(argv[2], nullptr, 10);
  }
  if (hidden % 8 != 0 || hidden > hidden_max || decode_tokens == 0) {
    std::printf("hidden must be a multiple of 8, at most %zu, and tokens positive\n", hidden_max);
    return 2;
  }
  std::printf("rcclx fused AllReduce + residual + RMSNorm on %s: %d emulated ranks\n", backend_name(), n);
  const std::size_t max_tokens = std::max(decode_tokens, prefill_tokens);
  // One symmetric buffer per rank large enough for the largest call of either algorithm (FP8 out
  // needs less), and signal pads with 1 + max_tokens slots for the row flags.
  rcclx::testing::emulated_world<max_ranks> world(
      n, fz::allreduce_rmsnorm_workspace_bytes<T>(max_tokens, hidden, rcclx::algorithm::tree),
      fz::tile_slots{0, static_cast<int>(max_tokens)}.end());
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  int bad = 0;
  for (const std::size_t tokens : {decode_tokens, prefill_tokens}) {
    host_data h;
    h.x.assign(n, std::vector<T>(tokens * hidden));
    for (auto& v : h.x)
      for (auto& e : v) e = T(dist(gen));
    h.residual.resize(tokens * hidden);
    for (auto& e : h.residual) e = T(dist(gen));
    h.weight.resize(hidden);
    for (auto& e : h.weight) e = T(1.0f + 0.25f * dist(gen));
    const auto algo = tokens == decode_tokens ? rcclx::algorithm::flat : rcclx::algorithm::tree;
    bad += run<T>(world, h, tokens, hidden, algo, "bf16");
    bad += run<rcclx::fp8::e4m3>(world, h, tokens, hidden, algo, "e4m3");
  }
  std::printf(bad ? "FAILED\n" : "all outputs within tolerance\n");
  return bad ? 1 : 0;
}
