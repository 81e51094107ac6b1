// rcclx-bench: an rccl-tests-style table for the DDA AllReduce on N emulated ranks (one GPU, or
// threads on the host backend), with two baselines measured in the same run, the same way:
//   empty : an empty kernel with the row's grid (N ranks x blocks x threads): the launch floor
//   copy  : the best of a runtime device-to-device copy and a 16-byte copy kernel moving every
//           rank's S bytes (2*N*S bytes of traffic): the bandwidth roofline
// Every row is checked against a float64 reference (max error, all ranks bit-identical).
//
//   rcclx-bench --emulated 8 --type bf16 --algo all --min-bytes 8 --max-bytes 256M
//   rcclx-bench --suite gpu --out DIR      # the full GPU suite: DIR/rcclx-bench.{json,csv,png}
//   rcclx-bench --suite host               # a tiny sweep for CI on the host backend
//   rcclx-bench --procs 8 --type bf16      # one process per rank (procs.hpp), then the same sizes emulated
// Exit status: 0 when every row is correct (performance targets are reported, not enforced).
#include <rcclx/dda/allreduce.hpp>
#include <rcclx/gpu/arch.hpp>
#include <rcclx/testing/detail/emulated_collectives.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "timing.hpp"

namespace {

using rcclx::algorithm;
using rcclx::reduce_op;
namespace rt = rcclx::testing;

constexpr bool on_host = rcclx::current_backend == rcclx::backend::host;

// ---- options -------------------------------------------------------------------------------------

struct options {
  int num_ranks = on_host ? 4 : 8;
  std::size_t min_bytes = 8;
  std::size_t max_bytes = on_host ? 64 * 1024 : 256u * 1024 * 1024;
  std::vector<std::string> types{"float"};
  reduce_op op = reduce_op::sum;
  std::vector<algorithm> algos{algorithm::flat, algorithm::tree, algorithm::automatic};
  bench::timing_options timing{on_host ? 1 : 5, on_host ? 3 : 20, 32};
  bool graph_all = false;                        // --graph: graph replays at every size
  std::size_t graph_max_bytes = 4 * 1024 * 1024;  // graph replays up to this size, events above
  bool registered = false;                       // --input-in-symmetric: inputs live in the symmetric buffers
  // Emulated launch shape. All N ranks share one GPU, so blocks of 256 threads pack better than the
  // ready-made kernels' 512 (3 blocks of ~72 registers per SM instead of 1): more warps per SM.
  int threads = on_host ? 1 : 256;               // --threads
  int max_blocks = on_host ? 4 : 48;             // --max-blocks: per rank, also capped by residency
  std::size_t registered_flat_max = 0;           // suite: also flat with registered input up to this size
  int procs = 0;                                 // --procs N: one process per rank (procs.hpp)
  bool procs_child = false;                      // --procs-child: this process is one rank (launcher)
  bool procs_compare = true;                     // --no-compare: skip the emulated sweep after --procs
  std::string json, csv, png, suite;
  std::string command;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "rcclx-bench: %s\n"
               "usage: rcclx-bench [--emulated N] [--min-bytes B] [--max-bytes B] [--type float|bf16|fp16[,..]]\n"
               "                   [--op sum|min|max] [--algo flat|tree|automatic|all] [--iters I] [--warmup W]\n"
               "                   [--graph] [--graph-max-bytes B] [--calls-per-graph K] [--input-in-symmetric]\n"
               "                   [--threads T] [--max-blocks B]\n"
               "                   [--procs N [--no-compare] | --procs-child]   one process per rank (see procs.hpp)\n"
               "                   [--json FILE] [--csv FILE] [--png FILE] [--suite gpu|host --out DIR]\n"
               "sizes accept K, M and G suffixes (KiB, MiB, GiB)\n",
               why.c_str());
  std::exit(2);
}

std::size_t parse_size(const std::string& s) {
  try {
    return rcclx::dda::detail::parse_bytes("size", s.c_str());
  } catch (const rcclx::error& e) {
    usage(e.what());
  }
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 0; i < argc; ++i) o.command += (i ? " " : "") + std::string(argv[i]);
  std::string out_dir;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) usage(std::string("missing value after ") + argv[i]);
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--emulated") o.num_ranks = std::atoi(value(i).c_str());
    else if (a == "--min-bytes") o.min_bytes = parse_size(value(i));
    else if (a == "--max-bytes") o.max_bytes = parse_size(value(i));
    else if (a == "--type") o.types = split(value(i));
    else if (a == "--op") {
      const std::string v = value(i);
      o.op = v == "sum" ? reduce_op::sum : v == "min" ? reduce_op::min : v == "max" ? reduce_op::max : (usage("bad --op " + v), reduce_op::sum);
    } else if (a == "--algo") {
      o.algos.clear();
      for (const auto& v : split(value(i))) {
        if (v == "all") o.algos = {algorithm::flat, algorithm::tree, algorithm::automatic};
        else if (v == "flat") o.algos.push_back(algorithm::flat);
        else if (v == "tree") o.algos.push_back(algorithm::tree);
        else if (v == "automatic" || v == "auto") o.algos.push_back(algorithm::automatic);
        else usage("bad --algo " + v);
      }
    } else if (a == "--iters") o.timing.iters = std::max(1, std::atoi(value(i).c_str()));
    else if (a == "--warmup") o.timing.warmup = std::max(0, std::atoi(value(i).c_str()));
    else if (a == "--calls-per-graph") o.timing.calls_per_graph = std::max(1, std::atoi(value(i).c_str()));
    else if (a == "--graph") o.graph_all = true;
    else if (a == "--graph-max-bytes") o.graph_max_bytes = parse_size(value(i));
    else if (a == "--input-in-symmetric") o.registered = true;
    else if (a == "--threads") o.threads = std::atoi(value(i).c_str());
    else if (a == "--max-blocks") o.max_blocks = std::atoi(value(i).c_str());
    else if (a == "--procs") o.procs = std::atoi(value(i).c_str());
    else if (a == "--procs-child") o.procs_child = true;
    else if (a == "--no-compare") o.procs_compare = false;
    else if (a == "--json") o.json = value(i);
    else if (a == "--csv") o.csv = value(i);
    else if (a == "--png") o.png = value(i);
    else if (a == "--suite") o.suite = value(i);
    else if (a == "--out") out_dir = value(i);
    else if (a == "-h" || a == "--help") usage("help");
    else usage("unknown argument " + a);
  }
  if (o.suite == "gpu") {
    // The lead's GPU suite: 8 emulated ranks, 8 B .. 256 MiB, bf16 and float, every algorithm,
    // plus flat with the input already in the symmetric buffer (no copy) up to 1 MiB.
    o.num_ranks = 8;
    o.min_bytes = 8;
    o.max_bytes = 256u * 1024 * 1024;
    o.types = {"bf16", "float"};
    o.algos = {algorithm::flat, algorithm::tree, algorithm::automatic};
    o.registered_flat_max = 1024 * 1024;
  } else if (o.suite == "host") {
    o.num_ranks = 4;
    o.max_bytes = 64 * 1024;
    o.types = {"bf16", "float"};
    o.timing.iters = 2;
    o.timing.warmup = 1;
    o.registered_flat_max = 16 * 1024;
  } else if (!o.suite.empty()) {
    usage("unknown suite " + o.suite);
  }
  if (!out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    if (o.json.empty()) o.json = out_dir + "/rcclx-bench.json";
    if (o.csv.empty()) o.csv = out_dir + "/rcclx-bench.csv";
    if (o.png.empty()) o.png = out_dir + "/rcclx-bench.png";
  }
  if (o.procs != 0) {
    if (o.procs < 2 || o.procs > rcclx::max_ranks) usage("--procs must be in [2, 16]");
    o.num_ranks = o.procs;
  }
  if (o.num_ranks < 2 || o.num_ranks > rcclx::max_ranks) usage("--emulated must be in [2, 16]");
  if (o.threads < 1 || o.threads > 1024 || (on_host && o.threads != 1)) usage("--threads must be in [1, 1024] (1 on the host)");
  if (o.max_blocks < 1 || o.max_blocks > 1024) usage("--max-blocks must be in [1, 1024]");
  if (o.min_bytes < 1 || o.min_bytes > o.max_bytes) usage("need 1 <= --min-bytes <= --max-bytes");
  for (const auto& t : o.types)
    if (t != "float" && t != "bf16" && t != "fp16") usage("bad --type " + t);
  return o;
}

// ---- inputs, poison, comparison: emulated functors ---------------------------------------------

RCCLX_HOST_DEVICE inline std::uint64_t mix(std::uint64_t x) {  // splitmix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// Input element i of rank r: uniform in [-1, 1), the same on host (reference) and device (fill).
RCCLX_HOST_DEVICE inline float input_value(int rank, std::size_t i) {
  const std::uint64_t h = mix(static_cast<std::uint64_t>(i) * 64 + static_cast<std::uint64_t>(rank));
  return static_cast<float>(h >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

template <class T>
RCCLX_HOST_DEVICE inline T make(float x) {
  return T(x);
}

template <class T>
RCCLX_HOST_DEVICE inline std::uint32_t bits_of(T x) {
  if constexpr (sizeof(T) == 4) {
    std::uint32_t u;
    __builtin_memcpy(&u, &x, 4);
    return u;
  } else {
    std::uint16_t u;
    __builtin_memcpy(&u, &x, 2);
    return u;
  }
}

template <class T>
RCCLX_HOST_DEVICE inline T poison_value() {
  T x;
  const std::uint32_t p = 0x5A5A5A5Au;
  __builtin_memcpy(&x, &p, sizeof(T));
  return x;
}

// Element loops over (rank, block, thread): what each emulated block writes does not matter here.
template <class T, int MaxR>
struct fill_kernel {
  T* dst[MaxR];
  std::size_t count;
  bool poison;  // write the poison pattern instead of the inputs
  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    const std::size_t stride = static_cast<std::size_t>(ix.num_blocks) * static_cast<std::size_t>(g.size());
    for (std::size_t i = static_cast<std::size_t>(ix.block) * g.size() + g.thread_rank(); i < count; i += stride)
      dst[ix.rank][i] = poison ? poison_value<T>() : make<T>(input_value(ix.rank, i));
  }
};

template <class T, int MaxR>
struct compare_kernel {  // counts elements of each rank's output that differ (bitwise) from rank 0's
  const T* out[MaxR];
  std::size_t count;
  std::uint32_t* mismatches;
  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    if (ix.rank == 0) return;
    const std::size_t stride = static_cast<std::size_t>(ix.num_blocks) * static_cast<std::size_t>(g.size());
    std::uint32_t bad = 0;
    for (std::size_t i = static_cast<std::size_t>(ix.block) * g.size() + g.thread_rank(); i < count; i += stride)
      bad += bits_of(out[ix.rank][i]) != bits_of(out[0][i]) ? 1u : 0u;
    if (bad) rcclx::gpu::fetch_add_local(mismatches, bad);
  }
};

// ---- results -------------------------------------------------------------------------------------

struct row {
  std::size_t bytes = 0, count = 0;
  std::string type, op, algo, resolved, input;
  int blocks = 0;
  std::string timing;
  double time_us = 0, empty_us = 0, copy_us = 0, copy_memcpy_us = 0, copy_kernel_us = 0;
  double algbw = 0, busbw = 0, ratio_empty = 0, ratio_copy = 0;
  double required_bytes = 0, hbm_gbps = 0, hbm_eff = 0;
  double max_err = 0;
  bool tol_ok = true, identical = true;
  std::string error;
};

// Bytes the algorithm must move through HBM for S bytes per rank on N emulated ranks (see the
// header printed by print_definitions).
double required_bytes(algorithm a, bool registered, int n, double s) {
  if (a == algorithm::flat) return n * s * (n + (registered ? 1 : 3));
  return n * s * (registered ? 3 : 5);
}

void print_definitions(const options& o) {
  std::printf(
      "# required HBM traffic, S = bytes per rank, N = %d ranks emulated on one device:\n"
      "#   flat: per rank read input S + write symmetric copy S + read N symmetric buffers N*S + write output S\n"
      "#         = N*(N+3)*S in all (N*(N+1)*S with the input already in the symmetric buffer: no copy)\n"
      "#   tree: per rank read input S + write copy S + reduce-scatter reads N chunks of S/N (S) and writes the\n"
      "#         reduced chunk twice (2S/N: symmetric buffer, output) + all-gather reads and writes N-1 chunks\n"
      "#         (2(N-1)S/N) = 5*N*S in all (3*N*S with the input already in the symmetric buffer)\n"
      "#   copy baseline moves 2*N*S (read + write of every rank's S bytes); hbm%% = (required/time) / (2*N*S/copy time)\n"
      "#   (repeated reads of one buffer by N ranks may hit in L2: below a few MiB hbm%% can exceed 100%%)\n"
      "# time: %s; x_empty = time / empty kernel with the same grid, x_copy = time / copy baseline, both timed\n"
      "#   the same way as the row; algbw = S/time, busbw = algbw*2(N-1)/N\n",
      o.num_ranks,
      on_host ? "wall clock around one synchronous call (host backend), median"
              : (o.graph_all ? "graph: K back-to-back calls in one CUDA/HIP graph, replay time / K, median over replays"
                             : "graph replays (K back-to-back calls per graph, median of replay/K) up to --graph-max-bytes, "
                               "then GPU events around single calls (median)"));
}

void print_header() {
  std::printf("%12s %11s %5s %3s %-15s %5s %3s %6s %11s %10s %10s %8s %7s %6s %10s %s\n", "size(B)", "count", "type",
              "op", "algorithm", "input", "blk", "timing", "time(us)", "algbw", "busbw", "x_empty", "x_copy", "hbm%",
              "max_err", "ok");
}

void print_row(const row& r) {
  if (!r.error.empty()) {
    std::printf("%12zu %11zu %5s %3s %-15s %5s ERROR: %s\n", r.bytes, r.count, r.type.c_str(), r.op.c_str(),
                r.algo.c_str(), r.input.c_str(), r.error.c_str());
    return;
  }
  const std::string alg = r.algo == r.resolved ? r.algo : r.algo.substr(0, 4) + "->" + r.resolved;
  std::printf("%12zu %11zu %5s %3s %-15s %5s %3d %6s %11.2f %10.2f %10.2f %8.2f %7.2f %6.1f %10.3g %s\n", r.bytes,
              r.count, r.type.c_str(), r.op.c_str(), alg.c_str(), r.input.c_str(), r.blocks, r.timing.c_str(),
              r.time_us, r.algbw, r.busbw, r.ratio_empty, r.ratio_copy, 100.0 * r.hbm_eff, r.max_err,
              r.tol_ok && r.identical ? "ok" : (r.identical ? "TOL" : "DIFF"));
  std::fflush(stdout);
}

// ---- one element type ----------------------------------------------------------------------------

template <class T, int MaxR>
class runner {
 public:
  runner(const options& o, const std::string& type)
      : o_(o), type_(type), n_(o.num_ranks),
        world_(o.num_ranks, o.max_bytes < 16 ? 16 : o.max_bytes, o.max_blocks, 30ull * 1000 * 1000 * 1000),
        cfg_{o.threads, o.max_blocks, o.max_blocks} {
    const std::size_t bytes = o.max_bytes < 16 ? 16 : o.max_bytes;
    for (int r = 0; r < n_; ++r) {
      in_.push_back(static_cast<T*>(rcclx::gpu::device_malloc(bytes)));
      out_.push_back(static_cast<T*>(rcclx::gpu::device_malloc(bytes)));
    }
    big_src_ = rcclx::gpu::device_malloc(bytes * n_);
    big_dst_ = rcclx::gpu::device_malloc(bytes * n_);
    counter_ = static_cast<std::uint32_t*>(rcclx::gpu::device_malloc(sizeof(std::uint32_t)));
    stream_ = on_host ? rcclx::gpu::stream_t{} : rcclx::gpu::stream_create();
  }
  ~runner() {
    for (auto p : in_) rcclx::gpu::device_free(p);
    for (auto p : out_) rcclx::gpu::device_free(p);
    rcclx::gpu::device_free(big_src_);
    rcclx::gpu::device_free(big_dst_);
    rcclx::gpu::device_free(counter_);
    rcclx::gpu::stream_destroy(stream_);
  }

  void run(std::vector<row>& rows) {
    for (std::size_t bytes = o_.min_bytes; bytes <= o_.max_bytes; bytes *= 2) {
      const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(T));
      run_size(count, false, o_.algos, rows);
      if (o_.registered || (o_.registered_flat_max && count * sizeof(T) <= o_.registered_flat_max))
        run_size(count, true, o_.registered ? o_.algos : std::vector<algorithm>{algorithm::flat}, rows);
      if (bytes > o_.max_bytes / 2) break;  // no overflow at the top
    }
  }

 private:
  rt::detail::rank_buffers<T, MaxR> buffers(bool registered) const {
    rt::detail::rank_buffers<T, MaxR> b{};
    for (int r = 0; r < n_; ++r) {
      b.in[r] = registered ? static_cast<const T*>(world_.buffer(r)) : in_[r];
      b.out[r] = out_[r];
    }
    return b;
  }

  template <class F>
  int blocks_for(algorithm a, std::size_t count) const {
    int nb = rcclx::dda::num_blocks_for<T>(count, a, n_, cfg_);
    nb = std::min(nb, world_.max_blocks());
    nb = std::min(nb, rt::max_blocks_per_rank<F>(n_, cfg_.threads));
    if (nb < 1) throw rcclx::error(rcclx::errc::unsupported, "the emulated grid does not fit on this device");
    return nb;
  }

  template <class F>
  void launch(int blocks, const F& f, rcclx::gpu::stream_t s) {
    rt::launch_emulated(n_, blocks, cfg_.threads, f, s);
  }

  void fill(bool registered, std::size_t count, bool poison) {
    fill_kernel<T, MaxR> f{};
    for (int r = 0; r < n_; ++r)
      f.dst[r] = poison ? out_[r] : (registered ? static_cast<T*>(world_.buffer(r)) : in_[r]);
    f.count = count;
    f.poison = poison;
    launch(blocks_for<fill_kernel<T, MaxR>>(algorithm::flat, count), f, stream_);
    rcclx::gpu::stream_synchronize(stream_);
  }

  // Max |error| of rank 0's output against the float64 reference, all elements within the
  // type's tolerance, and all ranks bit-identical.
  void check(row& r, std::size_t count) {
    rcclx::gpu::device_synchronize();
    world_.throw_if_error();
    std::vector<T> out(count);
    rcclx::gpu::copy(out.data(), out_[0], count * sizeof(T));
    const unsigned workers = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    std::vector<double> err(workers, 0.0);
    std::vector<char> ok(workers, 1);
    std::vector<std::thread> th;
    const double u = sizeof(T) == 4 ? 0x1p-24 : (type_ == "bf16" ? 0x1p-8 : 0x1p-11);
    const double tiny = type_ == "fp16" ? 0x1p-25 : 0.0;
    for (unsigned w = 0; w < workers; ++w) {
      th.emplace_back([&, w] {
        for (std::size_t i = w; i < count; i += workers) {
          double acc = 0, mag = 0;
          for (int p = 0; p < n_; ++p) {
            const double x = static_cast<double>(static_cast<float>(make<T>(input_value(p, i))));
            mag += std::fabs(x);
            if (p == 0) acc = x;
            else if (o_.op == reduce_op::sum) acc += x;
            else if (o_.op == reduce_op::min) acc = std::min(acc, x);
            else acc = std::max(acc, x);
          }
          const double got = static_cast<double>(static_cast<float>(out[i]));
          const double e = std::fabs(got - acc);
          const double acc_err = o_.op == reduce_op::sum ? 2.0 * (n_ - 1) * 0x1p-24 * mag : 0.0;
          const double tol = o_.op == reduce_op::sum ? u * (std::fabs(acc) + acc_err) + acc_err + tiny : 0.0;
          if (!(e <= tol)) ok[w] = 0;
          if (!(e <= err[w])) err[w] = e;  // NaN propagates into the maximum
        }
      });
    }
    for (auto& t : th) t.join();
    for (unsigned w = 0; w < workers; ++w) {
      r.max_err = std::isnan(err[w]) ? err[w] : std::max(r.max_err, err[w]);
      r.tol_ok = r.tol_ok && ok[w];
    }
    rcclx::gpu::memset_zero(counter_, sizeof(std::uint32_t));
    compare_kernel<T, MaxR> c{};
    for (int p = 0; p < n_; ++p) c.out[p] = out_[p];
    c.count = count;
    c.mismatches = counter_;
    launch(blocks_for<compare_kernel<T, MaxR>>(algorithm::flat, count), c, stream_);
    rcclx::gpu::stream_synchronize(stream_);
    std::uint32_t mismatches = 0;
    rcclx::gpu::copy(&mismatches, counter_, sizeof(mismatches));
    r.identical = mismatches == 0;
  }

  bench::timing_mode mode_for(std::size_t bytes) const {
    if (on_host) return bench::timing_mode::wall;
    return (o_.graph_all || bytes <= o_.graph_max_bytes) ? bench::timing_mode::graph : bench::timing_mode::events;
  }

  template <algorithm Algo, class Op>
  void run_algo(row& r, std::size_t count, bool registered) {
    using kernel = rt::detail::emulated_allreduce<Op, Algo, T, MaxR>;
    const int nb = blocks_for<kernel>(Algo, count);
    r.blocks = nb;
    const kernel k{world_.template device_tables<T>(), buffers(registered), count};
    bench::timing_mode mode = mode_for(r.bytes);
    r.timing = bench::to_string(mode);
    // Correctness first, on freshly filled inputs and poisoned outputs (tree with the input in the
    // symmetric buffer overwrites it, so timing iterations run on reduced data: same speed).
    fill(registered, count, false);
    fill(registered, count, true);
    launch(nb, k, stream_);
    check(r, count);
    bool fell_back = false;
    r.time_us = bench::time_us(mode, o_.timing, stream_, [&](rcclx::gpu::stream_t s) { launch(nb, k, s); }, &fell_back);
    if (fell_back) {  // capture refused: every baseline of this row is timed with events too
      mode = bench::timing_mode::events;
      r.timing = "events*";
    }
    rcclx::gpu::device_synchronize();
    world_.throw_if_error();
    // Baselines with the same grid and the same timing mode.
    const rt::detail::emulated_empty empty{};
    r.empty_us = bench::time_us(mode, o_.timing, stream_, [&](rcclx::gpu::stream_t s) { launch(nb, empty, s); });
    const std::size_t total = count * sizeof(T) * static_cast<std::size_t>(n_);
    r.copy_memcpy_us = bench::time_us(mode, o_.timing, stream_, [&](rcclx::gpu::stream_t s) {
      rcclx::gpu::copy_async(big_dst_, big_src_, total, s);
    });
    using copy_k = rt::detail::emulated_copy<T, MaxR>;
    auto cb = buffers(false);
    const copy_k ck{cb, count};
    const int copy_blocks = blocks_for<copy_k>(algorithm::flat, count);
    r.copy_kernel_us = bench::time_us(mode, o_.timing, stream_, [&](rcclx::gpu::stream_t s) { launch(copy_blocks, ck, s); });
    r.copy_us = std::min(r.copy_memcpy_us, r.copy_kernel_us);
    const double s_bytes = static_cast<double>(count * sizeof(T));
    r.algbw = s_bytes / (r.time_us * 1e3);
    r.busbw = r.algbw * 2.0 * (n_ - 1) / n_;
    r.ratio_empty = r.time_us / r.empty_us;
    r.ratio_copy = r.time_us / r.copy_us;
    r.required_bytes = required_bytes(Algo, registered, n_, s_bytes);
    r.hbm_gbps = r.required_bytes / (r.time_us * 1e3);
    const double copy_gbps = 2.0 * n_ * s_bytes / (r.copy_us * 1e3);
    r.hbm_eff = r.hbm_gbps / copy_gbps;
  }

  void run_size(std::size_t count, bool registered, const std::vector<algorithm>& algos, std::vector<row>& rows) {
    for (const algorithm a : algos) {
      row r;
      r.bytes = count * sizeof(T);
      r.count = count;
      r.type = type_;
      r.op = rcclx::to_string(o_.op);
      r.algo = rcclx::to_string(a);
      r.input = registered ? "sym" : "copy";
      try {
        const algorithm resolved = rcclx::dda::resolve_algorithm<T>(a, count, n_);
        r.resolved = rcclx::to_string(resolved);
        rcclx::core::with_op(o_.op, [&](auto op) {
          if (resolved == algorithm::flat) run_algo<algorithm::flat, decltype(op)>(r, count, registered);
          else run_algo<algorithm::tree, decltype(op)>(r, count, registered);
        });
      } catch (const std::exception& e) {
        r.error = e.what();
        rcclx::gpu::device_synchronize();
        world_.reset();
      }
      print_row(r);
      rows.push_back(r);
    }
  }

  const options& o_;
  std::string type_;
  int n_;
  rt::emulated_world<MaxR> world_;
  rcclx::dda::launch_config cfg_;
  std::vector<T*> in_, out_;
  void* big_src_ = nullptr;
  void* big_dst_ = nullptr;
  std::uint32_t* counter_ = nullptr;
  rcclx::gpu::stream_t stream_{};
};

template <class T>
void run_type(const options& o, const std::string& type, std::vector<row>& rows) {
  if (o.num_ranks <= 8) runner<T, 8>(o, type).run(rows);
  else runner<T, 16>(o, type).run(rows);
}

// ---- reports -------------------------------------------------------------------------------------

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

struct acceptance {
  std::string name, target, result;
  double worst = 0;
  bool evaluated = false, pass = false;
};

std::vector<acceptance> evaluate(const std::vector<row>& rows) {
  acceptance flat{"flat_latency", "flat at <= 64 KiB within 1.25x of the empty-kernel time (input copied by the kernel)", "", 0};
  acceptance flat_sym{"flat_latency_symmetric_input",
                      "the same with the input already in the symmetric buffer (informative)", "", 0};
  acceptance tree{"tree_bandwidth", "tree at >= 16 MiB moves its required HBM traffic at >= 70% of the copy bandwidth",
                  "", 1e30};
  for (const auto& r : rows) {
    if (!r.error.empty()) continue;
    if (r.algo == "flat" && r.bytes <= 64 * 1024) {
      acceptance& a = r.input == "sym" ? flat_sym : flat;
      a.evaluated = true;
      a.worst = std::max(a.worst, r.ratio_empty);
    }
    if (r.algo == "tree" && r.input == "copy" && r.bytes >= 16u * 1024 * 1024) {
      tree.evaluated = true;
      tree.worst = std::min(tree.worst, r.hbm_eff);
    }
  }
  flat.pass = flat.worst <= 1.25;
  flat_sym.pass = flat_sym.worst <= 1.25;
  tree.pass = tree.worst >= 0.70;
  char buf[128];
  std::snprintf(buf, sizeof(buf), "worst x_empty %.2f", flat.worst);
  flat.result = buf;
  std::snprintf(buf, sizeof(buf), "worst x_empty %.2f", flat_sym.worst);
  flat_sym.result = buf;
  std::snprintf(buf, sizeof(buf), "worst hbm%% %.1f", 100.0 * tree.worst);
  tree.result = buf;
  for (acceptance* a : {&flat, &flat_sym, &tree})
    if (!a->evaluated) a->result = "not measured (no row in range)";
  return {flat, flat_sym, tree};
}

void write_json(const options& o, const std::vector<row>& rows, const std::vector<acceptance>& acc) {
  std::ofstream f(o.json);
  if (!f) throw rcclx::error(rcclx::errc::runtime, "cannot write " + o.json);
  f << "{\n  \"tool\": \"rcclx-bench\",\n  \"command\": \"" << json_escape(o.command) << "\",\n";
  f << "  \"backend\": \"" << (on_host ? "host" : (rcclx::current_backend == rcclx::backend::cuda ? "cuda" : "hip"))
    << "\",\n  \"device\": \"" << json_escape(bench::device_name()) << "\",\n  \"arch\": \""
    << rcclx::gpu::to_string(rcclx::gpu::current_arch()) << "\",\n";
  f << "  \"threads_per_block\": " << o.threads << ",\n  \"max_blocks_per_rank\": " << o.max_blocks << ",\n";
  f << "  \"num_ranks\": " << o.num_ranks << ",\n  \"iters\": " << o.timing.iters << ",\n  \"warmup\": "
    << o.timing.warmup << ",\n  \"calls_per_graph\": " << o.timing.calls_per_graph << ",\n";
  f << "  \"definitions\": {\n"
       "    \"required_bytes\": \"flat: N*(N+3)*S (N*(N+1)*S with input in the symmetric buffer); tree: 5*N*S (3*N*S); S = bytes per rank\",\n"
       "    \"copy_baseline\": \"min(runtime device-to-device copy, 16-byte copy kernel) of N*S bytes, 2*N*S bytes of traffic\",\n"
       "    \"hbm_efficiency\": \"(required_bytes/time) / (2*N*S/copy_us)\",\n"
       "    \"busbw\": \"algbw*2(N-1)/N, algbw = S/time\",\n"
       "    \"timing\": \"graph: K back-to-back calls per graph, replay/K, median; events: one call between GPU events, median; wall: host\"\n"
       "  },\n  \"rows\": [\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const row& r = rows[i];
    f << "    {\"size_bytes\": " << r.bytes << ", \"count\": " << r.count << ", \"type\": \"" << r.type
      << "\", \"op\": \"" << r.op << "\", \"algorithm\": \"" << r.algo << "\", \"resolved\": \"" << r.resolved
      << "\", \"input\": \"" << r.input << "\", \"blocks_per_rank\": " << r.blocks << ", \"timing\": \"" << r.timing
      << "\", \"time_us\": " << num(r.time_us) << ", \"empty_us\": " << num(r.empty_us)
      << ", \"copy_us\": " << num(r.copy_us) << ", \"copy_memcpy_us\": " << num(r.copy_memcpy_us)
      << ", \"copy_kernel_us\": " << num(r.copy_kernel_us) << ", \"algbw_GBps\": " << num(r.algbw)
      << ", \"busbw_GBps\": " << num(r.busbw) << ", \"ratio_empty\": " << num(r.ratio_empty)
      << ", \"ratio_copy\": " << num(r.ratio_copy) << ", \"required_bytes\": " << num(r.required_bytes)
      << ", \"hbm_GBps\": " << num(r.hbm_gbps) << ", \"hbm_efficiency\": " << num(r.hbm_eff)
      << ", \"max_abs_error\": " << num(r.max_err) << ", \"within_tolerance\": " << (r.tol_ok ? "true" : "false")
      << ", \"ranks_identical\": " << (r.identical ? "true" : "false") << ", \"error\": \"" << json_escape(r.error)
      << "\"}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  f << "  ],\n  \"acceptance\": [\n";
  for (std::size_t i = 0; i < acc.size(); ++i) {
    f << "    {\"name\": \"" << acc[i].name << "\", \"target\": \"" << json_escape(acc[i].target)
      << "\", \"evaluated\": " << (acc[i].evaluated ? "true" : "false") << ", \"pass\": "
      << (acc[i].evaluated && acc[i].pass ? "true" : "false") << ", \"result\": \"" << json_escape(acc[i].result)
      << "\"}" << (i + 1 < acc.size() ? "," : "") << "\n";
  }
  f << "  ]\n}\n";
}

void write_csv(const std::string& path, const std::vector<row>& rows) {
  std::ofstream f(path);
  if (!f) throw rcclx::error(rcclx::errc::runtime, "cannot write " + path);
  f << "size_bytes,count,type,op,algorithm,resolved,input,blocks,timing,time_us,empty_us,copy_us,algbw_GBps,"
       "busbw_GBps,ratio_empty,ratio_copy,hbm_GBps,hbm_efficiency,max_abs_error,ok,error\n";
  for (const row& r : rows)
    f << r.bytes << ',' << r.count << ',' << r.type << ',' << r.op << ',' << r.algo << ',' << r.resolved << ','
      << r.input << ',' << r.blocks << ',' << r.timing << ',' << num(r.time_us) << ',' << num(r.empty_us) << ','
      << num(r.copy_us) << ',' << num(r.algbw) << ',' << num(r.busbw) << ',' << num(r.ratio_empty) << ','
      << num(r.ratio_copy) << ',' << num(r.hbm_gbps) << ',' << num(r.hbm_eff) << ',' << num(r.max_err) << ','
      << (r.error.empty() && r.tol_ok && r.identical ? "ok" : "FAIL") << ",\"" << json_escape(r.error) << "\"\n";
}

// The PNG comes from plot.py (matplotlib), copied next to this executable by the build.
void plot(const std::string& exe, const options& o) {
  const std::string dir = exe.find('/') == std::string::npos ? "." : exe.substr(0, exe.rfind('/'));
  const std::string cmd = "python3 '" + dir + "/plot.py' '" + o.json + "' '" + o.png + "'";
  if (std::system(cmd.c_str()) != 0)
    std::printf("# plot: '%s' failed (python3 with matplotlib needed); the JSON has every number\n", cmd.c_str());
  else
    std::printf("# plot: %s\n", o.png.c_str());
}

}  // namespace

#include "procs.hpp"

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  // One process per rank: dispatched before any GPU call (a GPU context does not survive fork).
  if (o.procs_child) return procs::run_child(o);
  if (o.procs > 0) return procs::run_parent(o, o.procs_compare);
  if (!on_host && rcclx::gpu::device_count() == 0) {
    std::printf("rcclx-bench: built for a GPU backend but no GPU is present\n");
    return 1;
  }
  std::printf("# rcclx-bench: DDA AllReduce on %d emulated ranks, device: %s (%s), backend %s\n# command: %s\n",
              o.num_ranks, bench::device_name().c_str(), rcclx::gpu::to_string(rcclx::gpu::current_arch()),
              on_host ? "host" : (rcclx::current_backend == rcclx::backend::cuda ? "cuda" : "hip"), o.command.c_str());
  std::printf("# emulated launch: %d threads per block, at most %d blocks per rank (fewer when the grid of all ranks "
              "would not be resident), blocks per rank in column blk\n",
              o.threads, o.max_blocks);
  print_definitions(o);
  print_header();
  std::vector<row> rows;
  try {
    for (const auto& t : o.types) {
      if (t == "float") run_type<float>(o, t, rows);
      else if (t == "bf16") run_type<rcclx::bf16>(o, t, rows);
      else run_type<rcclx::fp16>(o, t, rows);
    }
  } catch (const std::exception& e) {
    std::printf("rcclx-bench: %s\n", e.what());
    return 1;
  }
  bool correct = true;
  for (const auto& r : rows) correct = correct && r.error.empty() && r.tol_ok && r.identical;
  const auto acc = evaluate(rows);
  std::printf("# acceptance (informative, targets of the DDA issue):\n");
  for (const auto& a : acc) {
    if (!a.evaluated) continue;
    std::printf("#   %-30s %-5s %s  [%s]\n", a.name.c_str(), a.pass ? "PASS" : "MISS", a.result.c_str(),
                a.target.c_str());
  }
  std::printf("# correctness: %s\n", correct ? "every row within tolerance, all ranks bit-identical" : "FAILED rows above");
  try {
    if (!o.json.empty()) {
      write_json(o, rows, acc);
      std::printf("# json: %s\n", o.json.c_str());
    }
    if (!o.csv.empty()) write_csv(o.csv, rows);
    if (!o.png.empty() && !o.json.empty()) plot(argv[0], o);
  } catch (const std::exception& e) {
    std::printf("rcclx-bench: %s\n", e.what());
    return 1;
  }
  return correct ? 0 : 1;
}
