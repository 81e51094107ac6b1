// rcclx-bench: an rccl-tests-style table for the DDA AllReduce on N emulated ranks (one GPU, or
// threads on the host backend), with two baselines measured in the same run, the same way:
//   empty : an empty kernel with the row's grid (N ranks x blocks x threads): the launch floor
//   copy  : the best of a runtime device-to-device copy and a 16-byte copy kernel moving every
//           rank's S bytes (2*N*S bytes of traffic): the bandwidth roofline
// Every row is checked against a float64 reference (max error, all ranks bit-identical).
// A second table (--collectives, part of both suites) compares the low-precision collectives
// (rcclx::lpc, FP8 on the wire) with the plain ones for AllReduce (plain = DDA tree), AllGather,
// ReduceScatter and AlltoAll: time, speedup, bytes over the wire, the HBM byte model, max error.
//
//   rcclx-bench --emulated 8 --type bf16 --algo all --min-bytes 8 --max-bytes 256M
//   rcclx-bench --collectives-only --type float --coll-min-bytes 16M --coll-max-bytes 64M
//   rcclx-bench --suite gpu --out DIR      # the full GPU suite: DIR/rcclx-bench.{json,csv,png} and
//                                          #   DIR/rcclx-bench-collectives.{csv,png}
//   rcclx-bench --suite host               # a tiny sweep for CI on the host backend
//   rcclx-bench --procs 8 --type bf16      # one process per rank (procs.hpp), then the same sizes emulated
//   mpirun -np 4 rcclx-bench --hierarchical --local 2    # several nodes (hierarchical.hpp): rcclx::multinode
//                                          #   against the engine's AllReduce (host + MPI, CUDA + NCCL)
// Exit status: 0 when every row is correct (performance targets are reported, not enforced).
#include <rcclx/dda/allreduce.hpp>
#include <rcclx/kernel/layout.hpp>
#include <rcclx/lpc/workspace.hpp>
#include <rcclx/testing/emulated_bench.hpp>
#include <rcclx/testing/emulated_kernels.hpp>
#include <rcclx/testing/error_bounds.hpp>
#include <rcclx/testing/launch.hpp>
#include <rcclx/testing/rank_inputs.hpp>

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
#include <type_traits>
#include <vector>

#include "../common/cli.hpp"
#include "../common/report.hpp"
#include "checks_cost.hpp"

namespace {

using bench::on_host;
using rcclx::algorithm;
using rcclx::reduce_op;
namespace rt = rcclx::testing;
namespace lpc = rcclx::lpc;

// ---- options -------------------------------------------------------------------------------------

struct options {
  int num_ranks = on_host ? 4 : 8;
  std::size_t min_bytes = 8;
  std::size_t max_bytes = on_host ? 64 * 1024 : 256u * 1024 * 1024;
  std::vector<std::string> types{"float"};
  reduce_op op = reduce_op::sum;
  std::vector<algorithm> algos{algorithm::flat, algorithm::tree, algorithm::automatic};
  rt::timing_options timing{on_host ? 1 : 5, on_host ? 3 : 20, 32};
  bool graph_all = false;                        // --graph: graph replays at every size
  std::size_t graph_max_bytes = 4 * 1024 * 1024;  // graph replays up to this size, events above
  bool registered = false;                       // --input-in-symmetric: inputs live in the symmetric buffers
  // Emulated launch shape. All N ranks share one GPU, so blocks of 256 threads pack better than the
  // ready-made kernels' 512 (3 blocks of ~72 registers per SM instead of 1): more warps per SM.
  int threads = on_host ? 1 : 256;               // --threads
  int max_blocks = on_host ? 4 : 48;             // --max-blocks: per rank, also capped by residency
  rcclx::core::ll_layout ll = rcclx::core::default_ll_layout();  // --ll-blocks / --ll-block-bytes (0: LL off)
  std::size_t registered_flat_max = 0;           // suite: also flat with registered input up to this size
  int procs = 0;                                 // --procs N: one process per rank (procs.hpp)
  bool procs_child = false;                      // --procs-child: this process is one rank (launcher)
  bool procs_compare = true;                     // --no-compare: skip the emulated sweep after --procs
  int procs_blocks = 0;                          // --procs-blocks: communicator_options::collective_blocks
  bool dda = true;                               // the DDA AllReduce table (--collectives-only: off)
  bool collectives = false;                      // --collectives: the LPC vs plain table
  bool checks_cost = false;                      // --checks-cost: the checked mode's cost (checks_cost.hpp)
  std::size_t coll_min_bytes = on_host ? 4 * 1024 : 1024 * 1024;
  std::size_t coll_max_bytes = on_host ? 64 * 1024 : 256u * 1024 * 1024;
  bool hierarchical = false;                     // --hierarchical: rcclx::multinode vs the engine (hierarchical.hpp)
  int hier_nodes = 0;                            // --nodes G (simulated nodes)
  int hier_local = 0;                            // --local L (ranks per node; MPI)
  std::size_t hier_buffer = 0;                   // --hier-buffer: workspace / chunk bytes (0: --max-bytes)
  std::string id_dir;                            // --id-dir: where NCCL ids cross nodes (a shared directory)
  std::string json, csv, png, suite, coll_csv, coll_png;
  std::string command;
};

constexpr const char* usage_text = R"(usage: rcclx-bench [--emulated N] [--min-bytes B] [--max-bytes B] [--type float|bf16|fp16[,..]]
                   [--op sum|min|max] [--algo flat|tree|automatic|all[,lpc]] [--iters I] [--warmup W]
                   [--graph] [--graph-max-bytes B] [--calls-per-graph K] [--input-in-symmetric]
                   [--threads T] [--max-blocks B] [--ll-blocks N] [--ll-block-bytes B]
                   [--procs N [--no-compare] | --procs-child] [--procs-blocks B]   one process per rank (procs.hpp)
                   [--collectives] [--collectives-only] [--coll-min-bytes B] [--coll-max-bytes B]
                   [--checks-cost]   flat AllReduce with and without RCCLX_CHECKS (docs/checks.md)
                   [--checks-cost-only]   that table alone
                   [--json FILE] [--csv FILE] [--png FILE] [--suite gpu|host --out DIR]
       rcclx-bench --hierarchical [--nodes G] [--local L] [--procs N] [--id-dir DIR] [--hier-buffer B]
                   [--min-bytes B] [--max-bytes B] [--type ..] [--iters I] [--warmup W]   (hierarchical.hpp;
                   sizes 1M..256M unless given; MPI: under mpirun; CUDA + NCCL: --procs N forks N ranks)
sizes accept K, M and G suffixes (KiB, MiB, GiB)
)";
[[noreturn]] void usage(const std::string& why) { bench::usage_exit("rcclx-bench", usage_text, why); }

options parse(int argc, char** argv) {
  options o;
  bench::args a(argc, argv, usage, o.command);
  std::string out_dir;
  bool min_given = false, max_given = false;
  const std::vector<algorithm> all{algorithm::flat, algorithm::tree, algorithm::automatic};
  while (a.next()) {
    if (a.is("--emulated")) o.num_ranks = a.integer();
    else if (a.is("--min-bytes")) o.min_bytes = a.size(), min_given = true;
    else if (a.is("--max-bytes")) o.max_bytes = a.size(), max_given = true;
    else if (a.is("--hierarchical")) o.hierarchical = true;
    else if (a.is("--nodes")) o.hier_nodes = a.integer();
    else if (a.is("--local")) o.hier_local = a.integer();
    else if (a.is("--hier-buffer")) o.hier_buffer = a.size();
    else if (a.is("--id-dir")) o.id_dir = a.str();
    else if (a.is("--type")) o.types = a.list();
    else if (a.is("--op")) {
      const std::string v = a.str();
      o.op = v == "sum" ? reduce_op::sum : v == "min" ? reduce_op::min : v == "max" ? reduce_op::max : (usage("bad --op " + v), reduce_op::sum);
    } else if (a.is("--algo")) {
      o.algos.clear();
      for (const auto& v : a.list()) {
        if (v == "all") o.algos = all;
        else if (v == "flat" || v == "tree") o.algos.push_back(v == "flat" ? algorithm::flat : algorithm::tree);
        else if (v == "automatic" || v == "auto") o.algos.push_back(algorithm::automatic);
        else if (v == "lpc" || v == "low_precision") o.algos.push_back(algorithm::low_precision);  // --procs only
        else usage("bad --algo " + v);
      }
    } else if (a.is("--graph")) o.graph_all = true;
    else if (a.is("--graph-max-bytes")) o.graph_max_bytes = a.size();
    else if (a.is("--input-in-symmetric")) o.registered = true;
    else if (a.is("--threads")) o.threads = a.integer();
    else if (a.is("--max-blocks")) o.max_blocks = a.integer();
    else if (a.is("--ll-blocks")) o.ll.blocks = a.integer();
    else if (a.is("--ll-block-bytes")) o.ll.block_bytes = a.size();
    else if (a.is("--procs")) o.procs = a.integer();
    else if (a.is("--procs-child")) o.procs_child = true;
    else if (a.is("--no-compare")) o.procs_compare = false;
    else if (a.is("--procs-blocks")) o.procs_blocks = a.integer();
    else if (a.is("--collectives") || a.is("--collectives-only")) o.collectives = true, o.dda &= a.is("--collectives");
    else if (a.is("--checks-cost") || a.is("--checks-cost-only")) o.checks_cost = true, o.dda &= a.is("--checks-cost");
    else if (a.is("--coll-min-bytes")) o.coll_min_bytes = a.size();
    else if (a.is("--coll-max-bytes")) o.coll_max_bytes = a.size();
    else if (a.is("--json")) o.json = a.str();
    else if (a.is("--csv")) o.csv = a.str();
    else if (a.is("--png")) o.png = a.str();
    else if (a.is("--suite")) o.suite = a.str();
    else if (a.is("--out")) out_dir = a.str();
    else if (!a.timing(o.timing)) a.unknown();
  }
  if (o.suite == "gpu" || o.suite == "host") {
    // GPU: 8 emulated ranks, 8 B .. 256 MiB, every algorithm, flat with the input already in the
    // symmetric buffer (no copy) up to 1 MiB; LPC vs plain from 1 MiB. Host: a tiny sweep for CI.
    const bool gpu = o.suite == "gpu";
    o.num_ranks = gpu ? 8 : 4;
    o.min_bytes = gpu ? 8 : o.min_bytes;
    o.max_bytes = gpu ? 256u * 1024 * 1024 : 64 * 1024;
    o.types = {"bf16", "float"};
    if (gpu) o.algos = all;
    else o.timing.iters = 2, o.timing.warmup = 1;
    o.registered_flat_max = gpu ? 1024 * 1024 : 16 * 1024;
    o.collectives = o.checks_cost = true;
    o.coll_min_bytes = gpu ? 1024 * 1024 : 4 * 1024;
    o.coll_max_bytes = gpu ? 256u * 1024 * 1024 : 64 * 1024;
  } else if (!o.suite.empty()) {
    usage("unknown suite " + o.suite);
  }
  if (!out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    for (auto [path, name] : {std::pair{&o.json, ".json"}, {&o.csv, ".csv"}, {&o.png, ".png"},
                              {&o.coll_csv, "-collectives.csv"}, {&o.coll_png, "-collectives.png"}})
      if (path->empty()) *path = out_dir + "/rcclx-bench" + name;
  }
  for (const auto& t : o.types)
    if (t != "float" && t != "bf16" && t != "fp16") usage("bad --type " + t);
  if (o.hierarchical) {
    // 1 MiB .. 256 MiB per rank unless given; the workspace (and chunk) holds the largest call.
    if (!min_given) o.min_bytes = 1024 * 1024;
    if (!max_given) o.max_bytes = std::max<std::size_t>(o.min_bytes, 256u * 1024 * 1024);
    if (o.hier_buffer == 0) o.hier_buffer = o.max_bytes;
    if (o.procs < 0 || o.procs > 128 || o.hier_nodes < 0 || o.hier_local < 0) usage("bad --procs, --nodes or --local");
  } else {
    if (o.procs != 0 && (o.procs < 2 || o.procs > rcclx::max_ranks)) usage("--procs must be in [2, 16]");
    if (o.procs != 0) o.num_ranks = o.procs;
    if (std::count(o.algos.begin(), o.algos.end(), algorithm::low_precision) && o.procs == 0 && !o.procs_child)
      usage("--algo lpc is for --procs / --procs-child (emulated LPC rows: --collectives)");
    if (o.num_ranks < 2 || o.num_ranks > rcclx::max_ranks) usage("--emulated must be in [2, 16]");
    if (o.threads < 1 || o.threads > 1024 || (on_host && o.threads != 1)) usage("--threads must be in [1, 1024] (1 on the host)");
    if (o.max_blocks < 1 || o.max_blocks > 1024) usage("--max-blocks must be in [1, 1024]");
    if (o.procs_blocks < 0 || o.procs_blocks > 1024) usage("--procs-blocks must be in [0, 1024]");
    if (o.coll_min_bytes < 16 || o.coll_min_bytes > o.coll_max_bytes)
      usage("need 16 <= --coll-min-bytes <= --coll-max-bytes");
  }
  if (o.min_bytes < 1 || o.min_bytes > o.max_bytes) usage("need 1 <= --min-bytes <= --max-bytes");
  return o;
}

// Runs f(T{}) for the element type named `type` (float, bf16 or fp16).
template <class F>
void with_type(const std::string& type, F&& f) {
  if (type == "float") f(float{});
  else if (type == "bf16") f(rcclx::bf16{});
  else f(rcclx::fp16{});
}

// Input element i of rank p as the rows' reference reads it (testing::rank_input, rounded to T).
template <class T>
double input_of(int p, std::size_t i) {
  return static_cast<float>(rt::rank_input<T>(p, i));
}

// ---- results -------------------------------------------------------------------------------------

struct row {
  std::size_t bytes = 0, count = 0;
  std::string type, op, algo, input, resolved{};
  int blocks = 0;
  std::string timing{};
  double time_us = 0, empty_us = 0, copy_us = 0, copy_memcpy_us = 0, copy_kernel_us = 0;
  double algbw = 0, busbw = 0, ratio_empty = 0, ratio_copy = 0;
  double required_bytes = 0, hbm_gbps = 0, hbm_eff = 0;
  double exchange_us = 0, ratio_exchange = 0;  // the LL one-shot's exchange floor (flat rows it runs): 0 = n/a
  double max_err = 0;
  bool tol_ok = true, identical = true;
  std::string error{};
};

template <class Row>
bool correct(const Row& r) {
  return r.error.empty() && r.tol_ok && r.identical;
}
template <class Row>
const char* verdict(const Row& r) {
  return r.tol_ok && r.identical ? "ok" : (r.identical ? "TOL" : "DIFF");
}

// Rank 0's output of collective c over n ranks against the float64 result of their inputs
// (testing::check_collective: within `bound`, or the plain collective's tolerance when 0). Used by
// the emulated runners and by --procs.
template <class T, class Row>
void check_output(lpc::collective c, const T* out, std::size_t count, int n, Row& r, double bound = 0,
                  reduce_op op = reduce_op::sum) {
  const rt::error_summary s = rt::check_collective(c, out, n, count, 0, input_of<T>, bound, op);
  r.max_err = s.max_error;
  r.tol_ok = s.within;
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
      "#   the same way as the row; algbw = S/time, busbw = algbw*2(N-1)/N\n"
      "# x_xchg (flat rows on the LL one-shot): time / exchange floor = the same grid publishing the same LL packets\n"
      "#   and loading every peer's (no input, no reduction, no output), timed the same way\n",
      o.num_ranks,
      on_host ? "wall clock around one synchronous call (host backend), median"
              : (o.graph_all ? "graph: K back-to-back calls in one CUDA/HIP graph, replay time / K, median over replays"
                             : "graph replays (K back-to-back calls per graph, median of replay/K) up to --graph-max-bytes, "
                               "then GPU events around single calls (median)"));
}

void print_header() {
  std::printf("%12s %11s %5s %3s %-15s %5s %3s %6s %11s %10s %10s %8s %7s %7s %6s %10s %s\n", "size(B)", "count",
              "type", "op", "algorithm", "input", "blk", "timing", "time(us)", "algbw", "busbw", "x_empty", "x_xchg",
              "x_copy", "hbm%", "max_err", "ok");
}

// The table's algorithm column: "automatic" resolved to flat reads "auto->flat".
std::string algo_text(const row& r) {
  return r.algo == r.resolved ? r.algo : r.algo.substr(0, 4) + "->" + r.resolved;
}

void print_row(const row& r) {
  if (!r.error.empty()) {
    std::printf("%12zu %11zu %5s %3s %-15s %5s ERROR: %s\n", r.bytes, r.count, r.type.c_str(), r.op.c_str(),
                r.algo.c_str(), r.input.c_str(), r.error.c_str());
    return;
  }
  char xchg[16] = "      -";
  if (r.ratio_exchange > 0) std::snprintf(xchg, sizeof(xchg), "%7.2f", r.ratio_exchange);
  std::printf("%12zu %11zu %5s %3s %-15s %5s %3d %6s %11.2f %10.2f %10.2f %8.2f %s %7.2f %6.1f %10.3g %s\n", r.bytes,
              r.count, r.type.c_str(), r.op.c_str(), algo_text(r).c_str(), r.input.c_str(), r.blocks, r.timing.c_str(),
              r.time_us, r.algbw, r.busbw, r.ratio_empty, xchg, r.ratio_copy, 100.0 * r.hbm_eff, r.max_err, verdict(r));
  std::fflush(stdout);
}

// ---- one element type ----------------------------------------------------------------------------

// What both tables stand on (testing/emulated_bench.hpp): every rank's input and output, the copy
// baseline's buffers, the fill kernel, and the blocks a functor can have (pads and residency).
template <class T, int MaxR>
class rank_rig : public rt::emulated_bench<MaxR> {
 public:
  rank_rig(const options& o, const std::string& type, std::size_t buffer_bytes, std::size_t in_bytes,
           std::size_t out_bytes, rcclx::core::ll_layout ll = rcclx::core::default_ll_layout())
      : rt::emulated_bench<MaxR>(o.num_ranks, buffer_bytes, o.max_blocks, ll), o_(o), type_(type), n_(o.num_ranks) {
    for (int r = 0; r < n_; ++r) {
      in_.push_back(this->template alloc<T>(in_bytes));
      out_.push_back(this->template alloc<T>(out_bytes));
    }
    big_src_ = this->alloc(in_bytes * n_);
    big_dst_ = this->alloc(in_bytes * n_);
  }

 protected:
  using rt::emulated_bench<MaxR>::time;

  rt::rank_buffers<T, MaxR> buffers(bool registered = false) {
    rt::rank_buffers<T, MaxR> b{};
    for (int r = 0; r < n_; ++r) {
      b.in[r] = registered ? static_cast<const T*>(this->world().buffer(r)) : in_[r];
      b.out[r] = out_[r];
    }
    return b;
  }

  rt::timing_mode mode_for(std::size_t bytes) const {
    if (on_host) return rt::timing_mode::wall;
    return (o_.graph_all || bytes <= o_.graph_max_bytes) ? rt::timing_mode::graph : rt::timing_mode::events;
  }

  // `wanted` blocks per rank, capped by the pads' slots and by residency.
  template <class F>
  int fit(int wanted) const {
    int nb = std::min(wanted, this->world().max_blocks());
    nb = std::min(nb, rt::max_blocks_per_rank<F>(n_, o_.threads));
    if (nb < 1) throw rcclx::error(rcclx::errc::unsupported, "the emulated grid does not fit on this device");
    return nb;
  }
  // Blocks for an element loop over `elems` elements per rank.
  template <class F>
  int fit_elems(std::size_t elems) const {
    return fit<F>(rcclx::kernel::blocks_for_elems<T>(elems, o_.threads, o_.max_blocks));
  }

  template <class F>
  void launch(int blocks, const F& f, rcclx::gpu::stream_t s) {
    rt::launch_emulated(n_, blocks, o_.threads, f, s);
  }
  template <class F>
  double time(rt::timing_mode mode, int blocks, const F& f) {
    return rt::time_us(mode, o_.timing, this->stream(), [&](rcclx::gpu::stream_t s) { launch(blocks, f, s); });
  }

  // Fresh inputs (in: count elements of every rank) and poisoned outputs (out_count), then f once,
  // and rank 0's out_count outputs once no rank recorded an error.
  template <class F>
  std::vector<T> run_once(const std::vector<T*>& in, std::size_t count, std::size_t out_count, int blocks, const F& f) {
    fill(in, count, false, fit_elems<rt::emulated_fill<T, MaxR>>(count));
    rcclx::gpu::stream_synchronize(this->stream());
    fill(out_, out_count, true, fit_elems<rt::emulated_fill<T, MaxR>>(out_count));
    rcclx::gpu::stream_synchronize(this->stream());
    launch(blocks, f, this->stream());
    rcclx::gpu::device_synchronize();
    this->world().throw_if_error();
    std::vector<T> out(out_count);
    rcclx::gpu::copy(out.data(), out_[0], out_count * sizeof(T));
    return out;
  }

  // count elements of every rank's inputs (dst[r]), or of the poison pattern.
  void fill(const std::vector<T*>& dst, std::size_t count, bool poison, int blocks) {
    rt::emulated_fill<T, MaxR> f{{}, count, poison};
    std::copy(dst.begin(), dst.end(), f.dst);
    launch(blocks, f, this->stream());
  }

  // Is every rank's output (count elements) the same bits as rank 0's? Checked on the device.
  bool ranks_identical(std::size_t count) {
    return rt::emulated_bench<MaxR>::ranks_identical(out_, count, fit_elems<rt::emulated_compare<T, MaxR>>(count),
                                                     o_.threads);
  }

  // The copy baseline moving every rank's count elements: a runtime copy, and the 16-byte copy
  // kernel on `blocks` blocks per rank.
  std::pair<double, double> copy_us(rt::timing_mode mode, std::size_t count, int blocks) {
    const std::size_t total = count * sizeof(T) * static_cast<std::size_t>(n_);
    const double memcpy_us = rt::time_us(mode, o_.timing, this->stream(), [&](rcclx::gpu::stream_t s) {
      rcclx::gpu::copy_async(big_dst_, big_src_, total, s);
    });
    return {memcpy_us, time(mode, blocks, rt::emulated_copy<T, MaxR>{buffers(), count})};
  }

  const options& o_;
  std::string type_;
  int n_;
  std::vector<T*> in_, out_;
  void* big_src_ = nullptr;
  void* big_dst_ = nullptr;
};

template <class T, int MaxR>
class runner : public rank_rig<T, MaxR> {
  using base = rank_rig<T, MaxR>;
  using base::n_;
  using base::o_;

 public:
  runner(const options& o, const std::string& type)
      : base(o, type, std::max<std::size_t>(o.max_bytes, 16), std::max<std::size_t>(o.max_bytes, 16),
             std::max<std::size_t>(o.max_bytes, 16), o.ll),
        cfg_{o.threads, o.max_blocks, o.max_blocks} {}

  // One line: the exchange floor (emulated_ll_probe, one block per rank) against an empty kernel of
  // the same grid, timed like the smallest rows.
  void print_exchange_floor() {
    if (this->world().ll().blocks < 1) return;
    const rt::emulated_ll_probe<MaxR> k{this->world().template device_tables<unsigned char>()};
    this->launch(1, k, this->stream());
    rcclx::gpu::device_synchronize();
    this->world().throw_if_error();
    const rt::timing_mode mode = this->mode_for(8);
    const double probe_us = this->time(mode, 1, k), empty_us = this->time(mode, 1, rt::emulated_empty{});
    rcclx::gpu::device_synchronize();
    this->world().throw_if_error();
    std::printf("# exchange floor: each of %d ranks publishes one LL packet and waits for every peer's (1 block per rank, "
                "no data): %.2f us = %.2fx the empty kernel (%.2f us), %s\n",
                n_, probe_us, probe_us / empty_us, empty_us, rt::to_string(mode));
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
  template <algorithm Algo, class Op>
  void run_algo(row& r, std::size_t count, bool registered) {
    using kernel = rt::emulated_allreduce<Op, Algo, T, MaxR>;
    const int nb = this->template fit<kernel>(rcclx::dda::num_blocks_for<T>(count, Algo, n_, cfg_));
    r.blocks = nb;
    const kernel k{this->world().template device_tables<T>(), this->buffers(registered), count};
    rt::timing_mode mode = this->mode_for(r.bytes);
    r.timing = rt::to_string(mode);
    // Correctness first, on freshly filled inputs and poisoned outputs (tree with the input in the
    // symmetric buffer overwrites it, so timing iterations run on reduced data: same speed).
    std::vector<T*> in = this->in_;
    if (registered)
      for (int q = 0; q < n_; ++q) in[q] = static_cast<T*>(this->world().buffer(q));
    const std::vector<T> out = this->run_once(in, count, count, nb, k);
    check_output(lpc::collective::allreduce, out.data(), count, n_, r, 0, o_.op);
    r.identical = this->ranks_identical(count);
    bool fell_back = false;
    r.time_us = this->time(mode, o_.timing, [&](rcclx::gpu::stream_t s) { this->launch(nb, k, s); }, fell_back);
    if (fell_back) {  // capture refused: every baseline of this row is timed with events too
      mode = rt::timing_mode::events;
      r.timing = "events*";
    }
    // Baselines with the same grid and the same timing mode.
    r.empty_us = this->time(mode, nb, rt::emulated_empty{});
    std::tie(r.copy_memcpy_us, r.copy_kernel_us) = this->copy_us(
        mode, count, this->template fit<rt::emulated_copy<T, MaxR>>(rcclx::dda::num_blocks_for<T>(count, algorithm::flat, n_, cfg_)));
    r.copy_us = std::min(r.copy_memcpy_us, r.copy_kernel_us);
    const double s_bytes = static_cast<double>(count * sizeof(T));
    r.algbw = s_bytes / (r.time_us * 1e3);
    r.busbw = r.algbw * 2.0 * (n_ - 1) / n_;
    r.ratio_empty = r.time_us / r.empty_us;
    r.ratio_copy = r.time_us / r.copy_us;
    if constexpr (Algo == algorithm::flat) {
      // The same grid's exchange floor, where the row runs the LL one-shot with one vector per thread.
      const rcclx::kernel::layout<T> l(count, cfg_.threads, 0, nb);
      if (rcclx::dda::flat_uses_ll<T>(this->world().template table<T>(0).signals, count, cfg_.threads, nb) &&
          l.tiles <= static_cast<std::size_t>(nb)) {
        r.exchange_us = this->time(mode, nb, rt::emulated_ll_exchange<T, MaxR>{this->world().template device_tables<T>(), count});
        rcclx::gpu::device_synchronize();
        this->world().throw_if_error();
        r.ratio_exchange = r.time_us / r.exchange_us;
      }
    }
    // Bytes the algorithm must move through HBM (print_definitions says which).
    r.required_bytes = n_ * s_bytes * (Algo == algorithm::flat ? n_ + (registered ? 1 : 3) : (registered ? 3 : 5));
    r.hbm_gbps = r.required_bytes / (r.time_us * 1e3);
    r.hbm_eff = r.hbm_gbps / (2.0 * n_ * s_bytes / (r.copy_us * 1e3));
  }

  void run_size(std::size_t count, bool registered, const std::vector<algorithm>& algos, std::vector<row>& rows) {
    for (const algorithm a : algos) {
      row r{count * sizeof(T), count, this->type_, rcclx::to_string(o_.op), rcclx::to_string(a), registered ? "sym" : "copy"};
      this->guard(r, [&] {
        const algorithm resolved = rcclx::dda::resolve_algorithm<T>(a, count, n_);
        r.resolved = rcclx::to_string(resolved);
        rcclx::core::with_op(o_.op, [&](auto op) {
          if (resolved == algorithm::flat) run_algo<algorithm::flat, decltype(op)>(r, count, registered);
          else run_algo<algorithm::tree, decltype(op)>(r, count, registered);
        });
      });
      print_row(r);
      rows.push_back(r);
    }
  }

  rcclx::dda::launch_config cfg_;
};

template <class T>
void run_type(const options& o, const std::string& type, std::vector<row>& rows) {
  const bool first = &type == &o.types.front();  // the floor does not depend on the type: once
  auto go = [&](auto&& r) {
    if (first) r.print_exchange_floor();
    r.run(rows);
  };
  if (o.num_ranks <= 8) go(runner<T, 8>(o, type));
  else go(runner<T, 16>(o, type));
}

// ---- LPC vs plain: AllReduce, AllGather, ReduceScatter, AlltoAll ------------------------------------

using cfg = lpc::default_config;
constexpr lpc::collective collectives[] = {lpc::collective::allreduce, lpc::collective::allgather,
                                           lpc::collective::reduce_scatter, lpc::collective::alltoall};

struct coll_row {
  std::size_t bytes = 0, count = 0;  // input bytes / elements per rank
  std::string type, coll, algo, format;
  int blocks = 0;
  std::string timing{};
  double time_us = 0, copy_us = 0, x_plain = 0;
  double wire_bytes = 0, required_bytes = 0, hbm_gbps = 0, hbm_eff = 0;
  double max_err = 0, bound = 0;
  bool tol_ok = true, identical = true;
  std::string error{};
};

// Per rank, S = count * sizeof(T) bytes, Q = count * (1 + scale bytes / block) bytes of FP8 codes
// and scales: what crosses to peers (wire) and what the algorithm must move through HBM.
struct byte_model {
  double hbm, wire;
};
byte_model bytes_of(lpc::collective c, bool low, int num_ranks, double s, double q) {
  const double n = num_ranks;
  switch (c) {
    case lpc::collective::allreduce:  // tree: in S, copy S, RS S + 2S/N, AG 2(N-1)S/N; LPC: in S, Q, Q + Q/N + S/N, ...
      return low ? byte_model{2 * s + 3 * q, 2 * (n - 1) * q / n} : byte_model{5 * s, 2 * (n - 1) * s / n};
    case lpc::collective::allgather:
      return low ? byte_model{(n + 1) * s + n * q, (n - 1) * q} : byte_model{(2 * n + 1) * s, (n - 1) * s};
    case lpc::collective::reduce_scatter:
      return low ? byte_model{s + 2 * q + s / n, (n - 1) * q / n} : byte_model{3 * s - s / n, (n - 1) * s / n};
    case lpc::collective::alltoall:
    default:
      return low ? byte_model{2 * s + 2 * (n - 1) * q / n, (n - 1) * q / n}
                 : byte_model{2 * s + 2 * (n - 1) * s / n, (n - 1) * s / n};
  }
}

void print_coll_definitions(const options& o) {
  std::printf(
      "#\n# LPC vs plain (%d emulated ranks). size = input bytes per rank S; Q = FP8 codes + scales = count*(1+%d/%d)\n"
      "#   (%s, %d-element blocks, fp32 scales: S/%.2f for float, S/%.2f for bf16). Per rank (x N ranks in hbm%%):\n"
      "#   allreduce      plain = DDA tree: HBM 5S, wire 2(N-1)S/N | lpc: HBM 2S + 3Q (in S, quantize Q, reduce-scatter\n"
      "#                  reads Q and writes Q/N + S/N, all-gather reads (N-1)Q/N and writes (N-1)S/N), wire 2(N-1)Q/N\n"
      "#   allgather      plain: HBM (2N+1)S, wire (N-1)S | lpc: HBM (N+1)S + NQ, wire (N-1)Q\n"
      "#   reduce_scatter plain: HBM 3S - S/N, wire (N-1)S/N | lpc: HBM S + 2Q + S/N, wire (N-1)Q/N\n"
      "#   alltoall       plain: HBM 2S + 2(N-1)S/N, wire (N-1)S/N | lpc: HBM 2S + 2(N-1)Q/N, wire (N-1)Q/N\n"
      "#   x_plain = plain time / this time; hbm%% = (required/time) / (2*N*S/copy time); max_err = max |out - exact|\n"
      "#   of rank 0 (float64 reference), bound = the documented bound for inputs in [-1, 1) (docs/numerics.md 8)\n",
      o.num_ranks, static_cast<int>(sizeof(cfg::scale_type)), cfg::block_size, rcclx::fp8::format_traits<cfg::format>::name,
      cfg::block_size, 4.0 / (1.0 + 4.0 / cfg::block_size), 2.0 / (1.0 + 4.0 / cfg::block_size));
  std::printf("%12s %11s %5s %-14s %-6s %3s %6s %11s %7s %12s %12s %6s %10s %10s %s\n", "size(B)", "count", "type",
              "collective", "algo", "blk", "timing", "time(us)", "x_plain", "wire(B)", "hbm(B)", "hbm%",
              "max_err", "bound", "ok");
}

void print_coll_row(const coll_row& r) {
  if (!r.error.empty()) {
    std::printf("%12zu %11zu %5s %-14s %-6s ERROR: %s\n", r.bytes, r.count, r.type.c_str(), r.coll.c_str(),
                r.algo.c_str(), r.error.c_str());
    return;
  }
  std::printf("%12zu %11zu %5s %-14s %-6s %3d %6s %11.2f %7.2f %12.4g %12.4g %6.1f %10.3g %10.3g %s\n", r.bytes,
              r.count, r.type.c_str(), r.coll.c_str(), r.algo.c_str(), r.blocks, r.timing.c_str(), r.time_us, r.x_plain,
              r.wire_bytes, r.required_bytes, 100.0 * r.hbm_eff, r.max_err, r.bound, verdict(r));
  std::fflush(stdout);
}

template <class T, int MaxR>
class coll_runner : public rank_rig<T, MaxR> {
 public:
  coll_runner(const options& o, const std::string& type, std::size_t max_count)
      : rank_rig<T, MaxR>(o, type, buffer_bytes(o.num_ranks, max_count), max_count * sizeof(T),
                          max_count * sizeof(T) * o.num_ranks) {}  // outputs: AllGather's N * count

  void run(std::vector<coll_row>& rows) {
    for (std::size_t bytes = o_.coll_min_bytes; bytes <= o_.coll_max_bytes; bytes *= 2) {
      std::size_t count = std::max<std::size_t>(1, bytes / sizeof(T));
      count = std::max<std::size_t>(static_cast<std::size_t>(n_), count / n_ * n_);  // RS and A2A split it in N
      const auto copy = this->copy_us(this->mode_for(count * sizeof(T)), count, this->template fit_elems<rt::emulated_copy<T, MaxR>>(count));
      const double copy_us = std::min(copy.first, copy.second);
      for (const lpc::collective c : collectives) {
        coll_row plain = run_one(c, false, count, copy_us), low = run_one(c, true, count, copy_us);
        plain.x_plain = 1.0;
        if (plain.error.empty() && low.error.empty()) low.x_plain = plain.time_us / low.time_us;
        for (const coll_row* r : {&plain, &low}) {
          print_coll_row(*r);
          rows.push_back(*r);
        }
      }
      if (bytes > o_.coll_max_bytes / 2) break;
    }
  }

 private:
  using rank_rig<T, MaxR>::n_;
  using rank_rig<T, MaxR>::o_;

  static std::size_t buffer_bytes(int n, std::size_t count) {
    std::size_t b = count * sizeof(T);
    for (const lpc::collective c : collectives) b = std::max(b, lpc::workspace_bytes<cfg>(c, count, n));
    return b;
  }

  coll_row run_one(lpc::collective c, bool low, std::size_t count, double copy_us) {
    coll_row r{count * sizeof(T), count, this->type_, lpc::to_string(c),
               low ? "lpc" : (c == lpc::collective::allreduce ? "tree" : "direct"),
               low ? rcclx::fp8::format_traits<cfg::format>::name : ""};
    const double q = static_cast<double>(count) * (1.0 + static_cast<double>(sizeof(cfg::scale_type)) / cfg::block_size);
    const byte_model b = bytes_of(c, low, n_, static_cast<double>(r.bytes), q);
    r.wire_bytes = b.wire;
    r.required_bytes = b.hbm * n_;
    this->guard(r, [&] {
      using lc = lpc::collective;
      const auto go = [&](auto cc) {
        if (low) run_kernel<decltype(cc)::value, true>(r, count);
        else run_kernel<decltype(cc)::value, false>(r, count);
      };
      if (c == lc::allreduce) go(std::integral_constant<lc, lc::allreduce>{});
      else if (c == lc::allgather) go(std::integral_constant<lc, lc::allgather>{});
      else if (c == lc::reduce_scatter) go(std::integral_constant<lc, lc::reduce_scatter>{});
      else go(std::integral_constant<lc, lc::alltoall>{});
      r.copy_us = copy_us;
      r.hbm_gbps = r.required_bytes / (r.time_us * 1e3);
      r.hbm_eff = r.hbm_gbps / (2.0 * n_ * static_cast<double>(r.bytes) / (copy_us * 1e3));
    });
    return r;
  }

  template <lpc::collective C, bool Low>
  void run_kernel(coll_row& r, std::size_t count) {
    using op = rcclx::core::op_sum;
    const rt::rank_buffers<T, MaxR> b = this->buffers();
    const auto* tables = this->world().template device_tables<T>();
    if constexpr (C == lpc::collective::allreduce && !Low) {
      using kernel = rt::emulated_allreduce<op, algorithm::tree, T, MaxR>;
      const rcclx::dda::launch_config dcfg{o_.threads, o_.max_blocks, o_.max_blocks};
      measure(r, C, count, this->template fit<kernel>(rcclx::dda::num_blocks_for<T>(count, algorithm::tree, n_, dcfg)),
              kernel{tables, b, count});
    } else {
      using kernel = rt::emulated_collective<C, Low ? algorithm::low_precision : algorithm::flat, cfg, op, T, MaxR>;
      // Balanced over the blocks that can actually run (the pads' and residency's cap), so no block
      // gets one tile more than the others.
      const int cap = this->template fit<kernel>(o_.max_blocks);
      int wanted;
      if constexpr (Low) {
        wanted = lpc::num_blocks_for<cfg>(C, count, n_, lpc::launch_config{o_.threads, cap});
      } else {
        const std::size_t elems = C == lpc::collective::allgather ? count : count / static_cast<std::size_t>(n_);
        wanted = rcclx::kernel::blocks_for_elems<T>(elems, o_.threads, cap);
      }
      measure(r, C, count, this->template fit<kernel>(wanted), kernel{tables, b, count});
    }
  }

  // Runs the call once and checks it: rank 0's output against the float64 reference, within the
  // bound, and (AllReduce, AllGather) every rank bit-identical to rank 0; then times it.
  template <class F>
  void measure(coll_row& r, lpc::collective c, std::size_t count, int nb, const F& k) {
    r.blocks = nb;
    const rt::timing_mode mode = this->mode_for(r.bytes);
    r.timing = rt::to_string(mode);
    const std::size_t nn = static_cast<std::size_t>(n_);
    const std::size_t total = c == lpc::collective::allgather ? count * nn : c == lpc::collective::reduce_scatter ? count / nn : count;
    const std::vector<T> out = this->run_once(this->in_, count, total, nb, k);
    r.bound = rt::lpc_error_bound<T>(c, n_, 1.0, r.algo == "lpc");
    check_output(c, out.data(), count, n_, r, r.bound);
    if (c == lpc::collective::allreduce || c == lpc::collective::allgather) r.identical = this->ranks_identical(total);
    bool fell_back = false;
    r.time_us = this->time(mode, o_.timing, [&](rcclx::gpu::stream_t s) { this->launch(nb, k, s); }, fell_back);
    if (fell_back) r.timing = "events*";
  }
};

template <class T>
void run_coll_type(const options& o, const std::string& type, std::vector<coll_row>& rows) {
  const std::size_t max_count = std::max<std::size_t>(16, o.coll_max_bytes / sizeof(T));
  if (o.num_ranks <= 8) coll_runner<T, 8>(o, type, max_count).run(rows);
  else coll_runner<T, 16>(o, type, max_count).run(rows);
}

// ---- reports -------------------------------------------------------------------------------------

using acceptance = bench::target;

// The checked mode's cost: flat AllReduce (the latency path) with RCCLX_CHECKS=1 against the same
// call without, timed alternately in this process (checks_cost.hpp). Target: <= 5% at 8 KiB.
acceptance run_checks_cost(const options& o) {
  acceptance a{"checks_cost_8KiB", "flat AllReduce at 8 KiB with RCCLX_CHECKS=1 within 1.05x of the same call without"};
  const bench::checks_cost_args args{"", std::min(o.num_ranks, 8), bench::checks_cost_bytes(), o.timing.warmup,
                                     o.timing.iters, o.timing.calls_per_graph};
  std::string type;
  a.worst = bench::print_checks_cost(args, o.types, 2, &type);
  a.evaluated = a.worst > 0;
  if (a.evaluated) a.result = "worst on/off " + std::to_string(a.worst).substr(0, 5) + " (" + type + ")";
  a.pass = a.evaluated && a.worst <= 1.05;
  return a;
}

// Targets against floors measured in the same run, with the same grid and timing:
//   flat (LL one-shot) at <= 64 KiB within 1.3x of its exchange floor (testing::emulated_ll_exchange);
//   tree at >= 16 MiB moving its required HBM traffic at >= 90% of the copy bandwidth;
//   every LPC collective at >= 16 MiB moving its required HBM traffic at >= 75% of the copy bandwidth.
// (Emulated ranks share one GPU: an empty kernel or a multi-GPU speedup is not a floor here.)
std::vector<acceptance> evaluate(const std::vector<row>& rows) {
  acceptance flat{"flat_vs_exchange_floor", "flat at <= 64 KiB within 1.3x of the exchange floor (same LL packets and grid, "
                                            "no input, reduction or output; input copied by the kernel)"};
  acceptance flat_sym{"flat_vs_exchange_floor_sym", "the same with the input already in the symmetric buffer"};
  acceptance tree{"tree_vs_copy_bandwidth", "tree at >= 16 MiB moves its required HBM traffic at >= 90% of the copy "
                                            "bandwidth"};
  flat.higher_is_worse = flat_sym.higher_is_worse = true;
  for (const auto& r : rows) {
    if (!r.error.empty()) continue;
    const std::string where = r.type + " " + std::to_string(r.bytes) + " B";
    // Flat rows not on the LL one-shot have no floor of that kind (ratio_exchange 0).
    if (r.resolved == "flat" && r.algo != "automatic" && r.bytes <= 64 * 1024 && r.ratio_exchange > 0)
      (r.input == "sym" ? flat_sym : flat).see(r.ratio_exchange, where);
    if (r.algo == "tree" && r.input == "copy" && r.bytes >= 16u * 1024 * 1024) tree.see(r.hbm_eff, where);
  }
  flat.close(flat.worst <= 1.3, "worst x_xchg %.2f (%s)");
  flat_sym.close(flat_sym.worst <= 1.3, "worst x_xchg %.2f (%s)");
  tree.close(tree.worst >= 0.90, "worst hbm%% %.1f (%s)", 100.0);
  return {flat, flat_sym, tree};
}

// LPC targets: every LPC collective at >= 16 MiB per rank moves its required HBM traffic (the byte
// model of print_coll_definitions) at >= 75% of the copy bandwidth of the same size; every LPC row
// within its error bound.
std::vector<acceptance> evaluate_coll(const std::vector<coll_row>& rows) {
  acceptance f{"lpc_vs_hbm_floor", "every LPC collective at >= 16 MiB moves its required HBM traffic at >= 75% of the "
                                   "copy bandwidth"};
  acceptance e{"lpc_error_bound", "every LPC row's max error within the documented bound, AllReduce/AllGather ranks "
                                  "bit-identical"};
  std::map<std::string, acceptance> per_coll;
  for (const auto& r : rows) {
    if (!r.error.empty() || r.algo != "lpc") continue;
    e.evaluated = true;
    e.worst += r.tol_ok && r.identical ? 0 : 1;  // rows outside
    if (r.bytes < 16u * 1024 * 1024) continue;
    f.see(r.hbm_eff, r.coll + " " + r.type + " " + std::to_string(r.bytes >> 20) + " MiB");
    per_coll[r.coll].see(r.hbm_eff);
  }
  f.close(f.worst >= 0.75, "worst hbm%% %.1f (%s);", 100.0);
  for (const auto& [c, w] : per_coll) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), " %s %.1f", c.c_str(), 100.0 * w.worst);
    f.result += buf;
  }
  e.close(e.worst == 0, "%.0f rows outside");
  return {f, e};
}

bench::fields row_fields(const row& r) {
  return {{"size_bytes", r.bytes}, {"count", r.count}, {"type", r.type}, {"op", r.op}, {"algorithm", r.algo},
          {"resolved", r.resolved}, {"input", r.input}, {"blocks_per_rank", r.blocks}, {"timing", r.timing},
          {"time_us", r.time_us}, {"empty_us", r.empty_us}, {"copy_us", r.copy_us},
          {"copy_memcpy_us", r.copy_memcpy_us}, {"copy_kernel_us", r.copy_kernel_us}, {"algbw_GBps", r.algbw},
          {"busbw_GBps", r.busbw}, {"ratio_empty", r.ratio_empty}, {"ratio_copy", r.ratio_copy},
          {"required_bytes", r.required_bytes}, {"hbm_GBps", r.hbm_gbps}, {"hbm_efficiency", r.hbm_eff},
          {"exchange_floor_us", r.exchange_us}, {"ratio_exchange", r.ratio_exchange}, {"max_abs_error", r.max_err},
          {"within_tolerance", r.tol_ok}, {"ranks_identical", r.identical}, {"error", r.error}};
}

bench::fields coll_fields(const coll_row& r) {
  return {{"size_bytes", r.bytes}, {"count", r.count}, {"type", r.type}, {"collective", r.coll},
          {"algorithm", r.algo}, {"format", r.format}, {"blocks_per_rank", r.blocks}, {"timing", r.timing},
          {"time_us", r.time_us}, {"copy_us", r.copy_us}, {"x_plain", r.x_plain}, {"wire_bytes", r.wire_bytes},
          {"required_bytes", r.required_bytes}, {"hbm_GBps", r.hbm_gbps}, {"hbm_efficiency", r.hbm_eff},
          {"max_abs_error", r.max_err}, {"error_bound", r.bound}, {"within_bound", r.tol_ok},
          {"ranks_identical", r.identical}, {"error", r.error}};
}

void write_json(const options& o, const std::vector<row>& rows, const std::vector<coll_row>& crows,
                const std::vector<acceptance>& acc) {
  std::ofstream f = bench::open_output(o.json);
  f << "{\n";
  bench::write_json_members(f, bench::report_head("rcclx-bench", o.command) +
                                   bench::fields{{"threads_per_block", o.threads}, {"max_blocks_per_rank", o.max_blocks},
                                                 {"ll_blocks", o.ll.blocks}, {"ll_block_bytes", o.ll.block_bytes},
                                                 {"num_ranks", o.num_ranks}, {"iters", o.timing.iters},
                                                 {"warmup", o.timing.warmup}, {"calls_per_graph", o.timing.calls_per_graph}});
  f << "  \"definitions\": {\n"
       "    \"required_bytes\": \"flat: N*(N+3)*S (N*(N+1)*S with input in the symmetric buffer); tree: 5*N*S (3*N*S); S = bytes per rank\",\n"
       "    \"copy_baseline\": \"min(runtime device-to-device copy, 16-byte copy kernel) of N*S bytes, 2*N*S bytes of traffic\",\n"
       "    \"hbm_efficiency\": \"(required_bytes/time) / (2*N*S/copy_us)\",\n"
       "    \"exchange_floor\": \"flat rows on the LL one-shot: the same grid publishing the same LL packets and loading every peer's, no input/reduction/output; ratio_exchange = time/exchange_floor_us (0: not applicable)\",\n"
       "    \"busbw\": \"algbw*2(N-1)/N, algbw = S/time\",\n"
       "    \"timing\": \"graph: K back-to-back calls per graph, replay/K, median; events: one call between GPU events, median; wall: host\"\n"
       "  },\n  \"rows\": [\n";
  bench::write_json_rows(f, rows, row_fields);
  f << "  ],\n  \"collectives_definitions\": {\n"
       "    \"size_bytes\": \"input bytes per rank S (allgather output N*S, reduce_scatter output S/N)\",\n"
       "    \"wire_bytes\": \"bytes each rank reads from peers: allreduce 2(N-1)X/N, allgather (N-1)X, reduce_scatter and alltoall (N-1)X/N; X = S plain, Q = count*(1+scale bytes/block) lpc\",\n"
       "    \"required_bytes\": \"HBM bytes of all N ranks: allreduce tree 5S / lpc 2S+3Q; allgather (2N+1)S / (N+1)S+NQ; reduce_scatter 3S-S/N / S+2Q+S/N; alltoall 2S+2(N-1)S/N / 2S+2(N-1)Q/N (per rank, times N)\",\n"
       "    \"x_plain\": \"time of the plain row of the same size / time of this row\",\n"
       "    \"bound\": \"documented error bound for inputs in [-1, 1) (docs/numerics.md section 8)\"\n"
       "  },\n  \"collectives\": [\n";
  bench::write_json_rows(f, crows, coll_fields);
  f << "  ],\n";
  bench::end_json_report(f, acc);
}

template <class Row>
bench::fields with_ok(bench::fields f, const Row& r) {
  return f + bench::fields{{"ok", correct(r) ? "ok" : "FAIL"}};
}

void write_csv(const std::string& path, const std::vector<row>& rows) {
  bench::write_csv(path,
                   "size_bytes,count,type,op,algorithm,resolved,input,blocks=blocks_per_rank,timing,time_us,empty_us,"
                   "copy_us,algbw_GBps,busbw_GBps,ratio_empty,ratio_exchange,ratio_copy,hbm_GBps,hbm_efficiency,"
                   "max_abs_error,ok,\"error\"",
                   rows, [](const row& r) { return with_ok(row_fields(r), r); });
}

// The PNG comes from plot.py (matplotlib), copied next to this executable by the build.
void plot(const std::string& exe, const options& o) {
  const std::string dir = exe.find('/') == std::string::npos ? "." : exe.substr(0, exe.rfind('/'));
  const std::string cmd = "python3 '" + dir + "/plot.py' '" + o.json + "' '" + o.png + "'" +
                          (o.coll_png.empty() ? std::string() : " '" + o.coll_png + "'");
  if (std::system(cmd.c_str()) != 0)
    std::printf("# plot: '%s' failed (python3 with matplotlib needed); the JSON has every number\n", cmd.c_str());
  else
    std::printf("# plot: %s\n", o.png.c_str());
}

}  // namespace

#include "procs.hpp"
#include "hierarchical.hpp"

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  if (o.hierarchical) return hier::run(o, argc, argv);  // before any GPU call (it may fork)
  // One process per rank: dispatched before any GPU call (a GPU context does not survive fork).
  if (o.procs_child) return procs::run_child(o);
  if (o.procs > 0) return procs::run_parent(o, o.procs_compare);
  if (!on_host && rcclx::gpu::device_count() == 0) {
    std::printf("rcclx-bench: built for a GPU backend but no GPU is present\n");
    return 1;
  }
  std::printf("# rcclx-bench: DDA AllReduce%s on %d emulated ranks, device: %s (%s), backend %s\n# command: %s\n",
              o.collectives ? " and LPC vs plain collectives" : "", o.num_ranks, bench::device_name().c_str(),
              rcclx::gpu::to_string(rcclx::gpu::current_arch()), bench::backend_label(), o.command.c_str());
  std::printf("# emulated launch: %d threads per block, at most %d blocks per rank (fewer when the grid of all ranks "
              "would not be resident), blocks per rank in column blk\n",
              o.threads, o.max_blocks);
  std::vector<row> rows;
  std::vector<coll_row> crows;
  std::vector<acceptance> acc;
  const char* stage = "";
  try {
    if (o.dda) {
      print_definitions(o);
      print_header();
      for (const auto& t : o.types) with_type(t, [&](auto tag) { run_type<decltype(tag)>(o, t, rows); });
    }
    if (o.collectives) {
      print_coll_definitions(o);
      for (const auto& t : o.types) {
        if (t == "float") run_coll_type<float>(o, t, crows);
        else if (t == "bf16") run_coll_type<rcclx::bf16>(o, t, crows);
        else std::printf("# (%s: the LPC collectives take float and bf16; no collectives rows)\n", t.c_str());
      }
    }
    acc = evaluate(rows);
    stage = "checks cost: ";
    if (o.checks_cost) acc.push_back(run_checks_cost(o));
  } catch (const std::exception& e) {
    std::printf("rcclx-bench: %s%s\n", stage, e.what());
    return 1;
  }
  bool ok = std::all_of(rows.begin(), rows.end(), correct<row>) && std::all_of(crows.begin(), crows.end(), correct<coll_row>);
  std::printf("# targets against floors measured in this run (informative; the exit status is correctness only):\n");
  for (const auto& a : evaluate_coll(crows)) acc.push_back(a);
  for (const auto& a : acc)
    if (a.evaluated)
      std::printf("#   %-30s %-5s %s  [%s]\n", a.name.c_str(), a.pass ? "PASS" : "MISS", a.result.c_str(), a.target.c_str());
  std::printf("# correctness: %s\n", ok ? "every row within tolerance, all ranks bit-identical" : "FAILED rows above");
  try {
    if (!o.json.empty()) {
      write_json(o, rows, crows, acc);
      std::printf("# json: %s\n", o.json.c_str());
    }
    if (!o.csv.empty()) write_csv(o.csv, rows);
    if (!o.coll_csv.empty() && !crows.empty())
      bench::write_csv(o.coll_csv,
                       "size_bytes,count,type,collective,algorithm,format,blocks=blocks_per_rank,timing,time_us,x_plain,"
                       "wire_bytes,required_bytes,hbm_GBps,hbm_efficiency,max_abs_error,error_bound,ok,\"error\"",
                       crows, [](const coll_row& r) { return with_ok(coll_fields(r), r); });
    if (!o.png.empty() && !o.json.empty()) plot(argv[0], o);
  } catch (const std::exception& e) {
    std::printf("rcclx-bench: %s\n", e.what());
    return 1;
  }
  return ok ? 0 : 1;
}
