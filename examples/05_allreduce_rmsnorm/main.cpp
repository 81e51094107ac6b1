// Example 05: the fused AllReduce + residual add + RMSNorm of a transformer layer's end, on 8
// emulated ranks (one GPU, or threads on the host backend), for a decode step (a few tokens: flat,
// one step) and a prefill chunk (many tokens: tree, two steps), with bf16 and FP8 (e4m3) outputs.
// Every rank's output is checked against a float64 reference.
//
//   rcclx_example_allreduce_rmsnorm [tokens hidden]              8 emulated ranks in this process
//   rcclx_example_allreduce_rmsnorm --procs N [tokens hidden]    N processes, one rank each
//   scripts/launch -n N -- rcclx_example_allreduce_rmsnorm       the same, started by a launcher
//
// Per rank and row:  residual <- allreduce(x) + residual;  out <- residual / rms(residual) * weight
// (vLLM's / TRT-LLM's fused_add_rms_norm after the tensor-parallel AllReduce). In a real job each
// process calls the host launcher rcclx::fused::allreduce_rmsnorm(table, args, slots) on its stream
// (the --procs mode: a communicator per process, rank r on GPU r mod the GPU count), or calls
// allreduce_rmsnorm_block from its own kernel as the emulated mode does for 8 ranks at once.
#include <rcclx/fused/allreduce_rmsnorm.hpp>
#include <rcclx/host/communicator.hpp>
#include <rcclx/host/fork_ranks.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
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

const float scale_value = 0.05f;  // FP8 output: codes = value / 0.05 (|value| <~ 4 -> < 100)

// Device copies of rank r's arguments (x of rank r; residual and weight are the same on every rank,
// as in tensor parallelism). Allocations are appended to `owned`.
template <class Out>
fz::rmsnorm_args<T, Out> upload_rank(const host_data& h, int r, std::size_t tokens, std::size_t hidden,
                                     std::vector<void*>& owned) {
  using out_t = fz::output_t<T, Out>;
  const std::size_t count = tokens * hidden;
  auto alloc = [&](const void* src, std::size_t bytes) {
    void* p = rcclx::gpu::device_malloc(bytes);
    if (src) rcclx::gpu::copy(p, src, bytes);
    owned.push_back(p);
    return p;
  };
  return fz::rmsnorm_args<T, Out>{static_cast<const T*>(alloc(h.x[r].data(), count * sizeof(T))),
                                  static_cast<T*>(alloc(h.residual.data(), count * sizeof(T))),
                                  static_cast<const T*>(alloc(h.weight.data(), hidden * sizeof(T))),
                                  static_cast<out_t*>(alloc(nullptr, count * sizeof(out_t))),
                                  tokens,
                                  hidden,
                                  1e-6f,
                                  static_cast<const float*>(alloc(&scale_value, sizeof(float)))};
}

// One rank's results against the float64 reference: the number of elements out of tolerance.
template <class Out>
int check_rank(const std::vector<double>& ref_out, const std::vector<double>& ref_res, const std::vector<double>& mag,
               const std::vector<double>& out_mag, const std::vector<fz::output_t<T, Out>>& out,
               const std::vector<T>& res, double& max_err) {
  int bad = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
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
  return bad;
}

// The inputs of every rank, the same in every process (one seed).
host_data make_data(int n, std::size_t tokens, std::size_t hidden, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  host_data h;
  h.x.assign(n, std::vector<T>(tokens * hidden));
  for (auto& v : h.x)
    for (auto& e : v) e = T(dist(gen));
  h.residual.resize(tokens * hidden);
  for (auto& e : h.residual) e = T(dist(gen));
  h.weight.resize(hidden);
  for (auto& e : h.weight) e = T(1.0f + 0.25f * dist(gen));
  return h;
}

template <class Out>
int run(rcclx::testing::emulated_world<max_ranks>& world, const host_data& h, std::size_t tokens, std::size_t hidden,
        rcclx::algorithm algo, const char* label) {
  const int n = world.num_ranks();
  using out_t = fz::output_t<T, Out>;
  const std::size_t count = tokens * hidden;
  std::vector<void*> owned;
  std::vector<fz::rmsnorm_args<T, Out>> args(n);
  for (int r = 0; r < n; ++r) args[r] = upload_rank<Out>(h, r, tokens, hidden, owned);
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
    bad += check_rank<Out>(ref_out, ref_res, mag, out_mag, out, res, max_err);
  }
  std::printf("  %-7s %5zu tokens x %5zu  %-4s %3.0f ms  max |err| %.3g  %s\n", label, tokens, hidden,
              rcclx::to_string(algo), ms, max_err, bad ? "FAILED" : "ok (ranks bit-identical)");
  for (void* p : owned) rcclx::gpu::device_free(p);
  return bad;
}

// ---- one process per rank ------------------------------------------------------------------

std::uint64_t fnv1a(const void* p, std::size_t bytes, std::uint64_t h = 1469598103934665603ull) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

// This process's rank of one call: the host launcher on its communicator, then the float64 check of
// its own outputs and a comparison of every rank's output bits (hashes gathered over the bootstrap).
template <class Out>
int run_process_rank(rcclx::host::communicator<max_ranks>& comm, fz::tile_slots slots, rcclx::gpu::stream_t stream,
                     const host_data& h, std::size_t tokens, std::size_t hidden, rcclx::algorithm algo,
                     const char* label) {
  using out_t = fz::output_t<T, Out>;
  const std::size_t count = tokens * hidden;
  const int rank = comm.rank();
  std::vector<void*> owned;
  const fz::rmsnorm_args<T, Out> a = upload_rank<Out>(h, rank, tokens, hidden, owned);
  rcclx::gpu::device_synchronize();  // the uploads have landed before the kernel's stream reads them
  const auto t0 = std::chrono::steady_clock::now();
  fz::allreduce_rmsnorm(comm.device_handle<T>(), a, slots, algo, stream);
  comm.synchronize(stream);  // throws if a peer never arrived
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  std::vector<double> ref_out, ref_res, mag, out_mag;
  reference(h, tokens, hidden, ref_out, ref_res, mag, out_mag);
  std::vector<out_t> out(count);
  std::vector<T> res(count);
  rcclx::gpu::copy(out.data(), a.output, count * sizeof(out_t));
  rcclx::gpu::copy(res.data(), a.residual, count * sizeof(T));
  double max_err = 0;
  int bad = check_rank<Out>(ref_out, ref_res, mag, out_mag, out, res, max_err);
  const std::uint64_t mine = fnv1a(res.data(), count * sizeof(T), fnv1a(out.data(), count * sizeof(out_t)));
  const auto all = comm.get_bootstrap().allgather_value(mine);
  int differ = 0;
  for (const std::uint64_t x : all) differ += x != all[0];
  if (rank == 0)
    std::printf("  %-7s %5zu tokens x %5zu  %-4s %3.0f ms  max |err| %.3g (rank 0)  %s\n", label, tokens, hidden,
                rcclx::to_string(algo), ms, max_err,
                bad || differ ? "FAILED" : "ok (every rank within tolerance, bit-identical)");
  if (bad) std::printf("  [rank %d] %d elements out of tolerance\n", rank, bad);
  for (void* p : owned) rcclx::gpu::device_free(p);
  return bad + differ;
}

int run_processes(int procs, std::size_t decode_tokens, std::size_t prefill_tokens, std::size_t hidden) {
  return rcclx::host::run_ranks(procs, [&](const rcclx::host::launch_config& cfg) {
    rcclx::host::use_device(cfg);
    const std::size_t max_tokens = std::max(decode_tokens, prefill_tokens);
    // [fusion-procs]
    rcclx::host::socket_bootstrap bs(cfg);  // cfg: rank, rank count, job id (run_ranks or a launcher)
    // The tile flags get their own pad slots after those of the communicator's collectives, and the
    // symmetric buffer holds the largest call of either algorithm.
    rcclx::host::communicator_options opts;
    const fz::tile_slots slots{opts.max_blocks, static_cast<int>(max_tokens)};
    opts.max_blocks = slots.end();
    opts.buffer_bytes =
        std::max(opts.buffer_bytes, fz::allreduce_rmsnorm_workspace_bytes<T>(max_tokens, hidden, rcclx::algorithm::tree));
    rcclx::host::communicator<max_ranks> comm(bs, opts);
    // ... per call (run_process_rank): this rank's arguments, the host launcher, errors checked
    //   fz::allreduce_rmsnorm(comm.device_handle<T>(), args, slots, algo, stream);
    //   comm.synchronize(stream);
    // [fusion-procs]
    if (comm.rank() == 0)
      std::printf("rcclx fused AllReduce + residual + RMSNorm on %s: %d processes, one rank each\n", rcclx::backend_name(),
                  comm.num_ranks());
    rcclx::gpu::stream_t stream = rcclx::gpu::stream_create();
    int bad = 0;
    for (const std::size_t tokens : {decode_tokens, prefill_tokens}) {
      const host_data h = make_data(comm.num_ranks(), tokens, hidden, static_cast<unsigned>(11 + tokens));
      const auto algo = tokens == decode_tokens ? rcclx::algorithm::flat : rcclx::algorithm::tree;
      bad += run_process_rank<T>(comm, slots, stream, h, tokens, hidden, algo, "bf16");
      bad += run_process_rank<rcclx::fp8::e4m3>(comm, slots, stream, h, tokens, hidden, algo, "e4m3");
    }
    rcclx::gpu::stream_destroy(stream);
    return bad ? 1 : 0;
  });
}

}  // namespace

int main(int argc, char** argv) {
  int procs = 0;  // 0: emulated ranks in this process; -1: one rank of a launcher's job
  if (!rcclx::host::procs_argument(argc, argv, max_ranks, procs)) return 2;
  // (Processes: each rank checks for itself, after the fork: no GPU call may precede it.)
  if (on_gpu && procs == 0 && rcclx::gpu::device_count() == 0) {
    std::printf("built for %s but no GPU is present; rebuild with RCCLX_BACKEND=host\n", rcclx::backend_name());
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
  if (procs != 0) {
    const int rc = run_processes(procs, decode_tokens, prefill_tokens, hidden);
    if (procs > 0) std::printf(rc ? "FAILED\n" : "all outputs within tolerance\n");
    return rc;
  }
  std::printf("rcclx fused AllReduce + residual + RMSNorm on %s: %d emulated ranks\n", rcclx::backend_name(), n);
  const std::size_t max_tokens = std::max(decode_tokens, prefill_tokens);
  // One symmetric buffer per rank large enough for the largest call of either algorithm (FP8 out
  // needs less), and signal pads with 1 + max_tokens slots for the row flags.
  rcclx::testing::emulated_world<max_ranks> world(
      n, fz::allreduce_rmsnorm_workspace_bytes<T>(max_tokens, hidden, rcclx::algorithm::tree),
      fz::tile_slots{0, static_cast<int>(max_tokens)}.end());
  int bad = 0;
  for (const std::size_t tokens : {decode_tokens, prefill_tokens}) {
    const host_data h = make_data(n, tokens, hidden, static_cast<unsigned>(11 + tokens));
    const auto algo = tokens == decode_tokens ? rcclx::algorithm::flat : rcclx::algorithm::tree;
    bad += run<T>(world, h, tokens, hidden, algo, "bf16");
    bad += run<rcclx::fp8::e4m3>(world, h, tokens, hidden, algo, "e4m3");
  }
  std::printf(bad ? "FAILED\n" : "all outputs within tolerance\n");
  return bad ? 1 : 0;
}
