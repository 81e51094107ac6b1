// rcclx-bench-fused: fused against unfused on N emulated ranks (one GPU, or threads on the host),
// both measured in the same run, the same way:
//   AllReduce + residual + RMSNorm: fused::allreduce_rmsnorm (flat, tree, and the automatic choice)
//     against rcclx's own unfused path: dda AllReduce (flat and tree; the faster one) followed by
//     fused::add_rmsnorm, for decode (tokens 1..128) and prefill shapes, bf16 (and FP8 e4m3 output).
//   GEMM + AllReduce: the tiled GEMM of examples/04_gemm_allreduce whose epilogue reduces its tiles
//     across ranks, against the same GEMM writing its partial product into the symmetric buffer
//     followed by the dda AllReduce (flat and tree, the faster one) of that buffer.
//   Cross-rank combines (combine_rows.cpp, which says exactly what is timed): the attention merge
//     (fused::combine + lse_merge; batch 1..64 x 32 heads x 128, bf16) and argmax / top-50 over a
//     vocabulary of 128 Ki or 256 Ki split over the ranks (batch 1..64), against the AllGather of the
//     partial results with rcclx's own AllGather followed by a merge kernel; floor: that AllGather
//     alone, in the same run. Their own table, JSON members (combine_rows) and CSV (*-combine.csv).
// Every row is checked: every rank's output the same bits, fused and unfused outputs bit-identical
// (they compute the same thing; except where the fused GEMM splits its last round's tiles over K:
// then each part is rounded like a rank's partial product, see gemm_example::split_plan), and the
// fused output against a float64 reference on sampled rows.
//
//   rcclx-bench-fused --suite gpu --out DIR     # the GPU suite: DIR/rcclx-bench-fused.{json,csv}, -combine.csv
//   rcclx-bench-fused --suite decode|gemm|combine  # only the gpu suite's decode, GEMM or combine rows (quick A/B)
//   rcclx-bench-fused --suite host              # a tiny sweep for CI on the host backend
//   rcclx-bench-fused [--emulated N] [--iters I] [--warmup W] [--calls-per-graph K] [--json F] [--csv F]
// Timing (rcclx/testing/timing.hpp): K back-to-back calls captured in one graph, replay / K,
// median of replays (events around single calls above 32 MiB per rank); the unfused path's two
// kernels are captured together, so launch gaps count on both sides alike.
// Exit status: 0 when every row is correct (performance targets are reported, not enforced).
#include <rcclx/dda/allreduce.hpp>
#include <rcclx/fused/add_rmsnorm.hpp>
#include <rcclx/fused/allreduce_rmsnorm.hpp>
#include <rcclx/testing/emulated_bench.hpp>
#include <rcclx/testing/emulated_fused_kernels.hpp>
#include <rcclx/testing/emulated_kernels.hpp>
#include <rcclx/testing/error_bounds.hpp>
#include <rcclx/testing/launch.hpp>
#include <rcclx/testing/references.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "../../examples/04_gemm_allreduce/gemm_allreduce.hpp"
#include "../common/cli.hpp"
#include "../common/report.hpp"
#include "combine_rows.hpp"

namespace {

namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
using combine_bench::barrier_blocks;
using combine_bench::dda_max_blocks;
using combine_bench::dda_threads;
using combine_bench::max_r;
using combine_bench::on_host;
using rcclx::algorithm;
using rcclx::gpu::stream_t;
using T = rcclx::bf16;

struct shape {
  std::size_t tokens, hidden;
  bool fp8;
};
struct gemm_shape {
  std::size_t M, N, K;
};

struct options {
  int num_ranks = 8;
  rt::timing_options timing{on_host ? 1 : 5, on_host ? 3 : 20, 32};
  std::size_t graph_max_bytes = 32u << 20;
  // LL regions of the pads (--ll-blocks, --ll-block-bytes; 0 turns LL off): on GPUs 64 x 64 KiB, so
  // every decode shape (up to 128 x 8192 bf16: 2 rows of 16 KiB per block) runs the LL one-shot.
  rcclx::core::ll_layout ll = on_host ? rcclx::core::default_ll_layout() : rcclx::core::ll_layout{64, 64 * 1024};
  std::vector<shape> shapes;
  std::vector<gemm_shape> gemms;
  std::vector<combine_bench::shape> combines;
  std::string json, csv, combine_csv, suite, command;
};

constexpr const char* usage_text = R"(usage: rcclx-bench-fused [--suite gpu|decode|gemm|combine|host] [--out DIR] [--emulated N] [--iters I] [--warmup W]
                         [--calls-per-graph K] [--json FILE] [--csv FILE] [--ll-blocks N] [--ll-block-bytes B]
                         [--gemm MxNxK]...  (only these GEMM rows, no AllReduce + RMSNorm rows)
                         [--combine attn_merge:B | argmax:BxV | topk:BxV]...  (only these combine rows)
)";
[[noreturn]] void usage(const std::string& why) { bench::usage_exit("rcclx-bench-fused", usage_text, why); }

options parse(int argc, char** argv) {
  using combine_bench::kind;
  options o;
  bench::args a(argc, argv, usage, o.command);
  std::string out_dir;
  std::vector<gemm_shape> custom_gemms;
  std::vector<combine_bench::shape> custom_combines;
  while (a.next()) {
    if (a.is("--suite")) o.suite = a.str();
    else if (a.is("--out")) out_dir = a.str();
    else if (a.is("--emulated")) o.num_ranks = a.integer();
    else if (a.is("--ll-blocks")) o.ll.blocks = a.integer();
    else if (a.is("--ll-block-bytes")) o.ll.block_bytes = static_cast<std::size_t>(std::atoll(a.str().c_str()));
    else if (a.is("--json")) o.json = a.str();
    else if (a.is("--csv")) o.csv = a.str();
    else if (a.is("--gemm")) {
      const std::string v = a.str();
      unsigned long long m = 0, n = 0, k = 0;
      char tail = 0;
      if (std::sscanf(v.c_str(), "%llux%llux%llu%c", &m, &n, &k, &tail) != 3 || !m || !n || !k)
        usage("--gemm wants MxNxK, e.g. 16x4096x4096, got " + v);
      custom_gemms.push_back({m, n, k});
    } else if (a.is("--combine")) {
      const std::string v = a.str();
      const std::size_t colon = v.find(':');
      const std::string name = v.substr(0, colon);
      unsigned long long b = 0, voc = 0;
      char tail = 0;
      const char* dims = colon == std::string::npos ? "" : v.c_str() + colon + 1;
      const bool attn = name == "attn_merge";
      const bool ok = attn ? std::sscanf(dims, "%llu%c", &b, &tail) == 1 && b
                           : (name == "argmax" || name == "topk") && std::sscanf(dims, "%llux%llu%c", &b, &voc, &tail) == 2 &&
                                 b && voc;
      if (!ok) usage("--combine wants attn_merge:B, argmax:BxV or topk:BxV, e.g. topk:8x131072, got " + v);
      custom_combines.push_back({attn ? kind::attention : name == "argmax" ? kind::argmax : kind::topk, b, voc});
    } else if (!a.timing(o.timing)) a.unknown();
  }
  if (o.suite.empty()) o.suite = on_host ? "host" : "gpu";
  const bool gpu = o.suite == "gpu";
  // The decode rows (bf16 output, tokens <= 128): the gpu suite's first rows, and the decode suite.
  if (gpu || o.suite == "decode") {
    for (const std::size_t h : {4096, 8192})
      for (const std::size_t t : {1, 2, 4, 8, 16, 32, 64, 128}) o.shapes.push_back({t, h, false});
    o.shapes.push_back({1, 8192, true});  // the decode suite: one FP8 row (a quick A/B)
  }
  if (gpu) {
    for (const shape s : {shape{16, 8192, true}, shape{128, 8192, true}, shape{512, 4096, false},
                          shape{2048, 4096, false}, shape{8192, 4096, false}, shape{2048, 8192, false},
                          shape{2048, 8192, true}})
      o.shapes.push_back(s);
  }
  // The GEMM rows (C[M x 4096] summed over the ranks, K = 4096 split over them): the gpu and gemm suites.
  if (gpu || o.suite == "gemm") o.gemms = {{16, 4096, 4096}, {64, 4096, 4096}, {128, 4096, 4096}, {512, 4096, 4096}};
  // The combine rows (decode: batch <= 64): the gpu and combine suites.
  if (gpu || o.suite == "combine") {
    for (const std::size_t b : {1, 2, 4, 8, 16, 32, 64}) o.combines.push_back({kind::attention, b, 0});
    for (const kind k : {kind::argmax, kind::topk})
      for (const std::size_t v : {128 * 1024, 256 * 1024})
        for (const std::size_t b : {1, 8, 32, 64}) o.combines.push_back({k, b, v});
  }
  if (o.suite == "host") {
    o.num_ranks = 4;
    o.timing = {1, 3, 4};
    o.shapes = {{1, 1032, false}, {3, 2048, false}, {17, 1032, true}, {64, 1032, false}};
    o.gemms = {{17, 128, 256}, {96, 256, 512}, {17, 320, 832}};  // the last: a split last round
    o.combines = {{kind::attention, 1, 0}, {kind::attention, 3, 0}, {kind::argmax, 1, 3001},  // uneven shards;
                  {kind::argmax, 5, 3001}, {kind::topk, 5, 3001}, {kind::topk, 3, 101}};     // the last: shards < K
  } else if (!gpu && o.suite != "decode" && o.suite != "gemm" && o.suite != "combine") {
    usage("unknown suite " + o.suite);
  }
  if (!custom_gemms.empty()) {  // --gemm: these GEMM rows only (the suite's timing and rank count stay)
    o.shapes.clear();
    o.combines.clear();
    o.gemms = custom_gemms;
  }
  if (!custom_combines.empty()) {  // --combine: these combine rows only (and the --gemm rows)
    o.shapes.clear();
    if (custom_gemms.empty()) o.gemms.clear();
    o.combines = custom_combines;
  }
  if (!out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    if (o.json.empty()) o.json = out_dir + "/rcclx-bench-fused.json";
    if (o.csv.empty()) o.csv = out_dir + "/rcclx-bench-fused.csv";
  }
  if (!o.csv.empty()) {  // the combine rows' own columns: FILE.csv -> FILE-combine.csv
    const bool ext = o.csv.size() > 4 && o.csv.compare(o.csv.size() - 4, 4, ".csv") == 0;
    o.combine_csv = (ext ? o.csv.substr(0, o.csv.size() - 4) : o.csv) + "-combine.csv";
  }
  if (o.num_ranks < 2 || o.num_ranks > max_r) usage("--emulated must be in [2, 8]");
  return o;
}

// ---- rows ----------------------------------------------------------------------------------------

struct row {
  std::string kind;  // "rmsnorm" or "gemm"
  std::string shape, out;
  std::size_t tokens = 0, hidden = 0, bytes = 0;  // bytes: the AllReduce's message per rank
  std::string fused_auto_algo{}, unfused_best_algo{};
  int fused_blocks = 0, unfused_blocks = 0;  // blocks per rank (gemm: fused kernel, plain GEMM)
  std::string fused_kernel = "-";  // rmsnorm: the kernel the automatic choice launched (kernel_label)
  int split = 1;  // gemm: parts of K per last-round tile in the fused kernels (gemm_example::split_plan)
  double fused_flat_us = 0, fused_tree_us = 0, fused_auto_us = 0;
  double unfused_flat_us = 0, unfused_tree_us = 0, unfused_best_us = 0;
  double first_kernel_us = 0;  // unfused, first kernel alone: the DDA AllReduce (rmsnorm) or the GEMM
  double speedup = 0;          // unfused_best / fused_auto
  double speedup_best = 0;     // unfused_best / the faster fused algorithm
  double max_err = 0;
  bool identical = true, tol_ok = true;
  std::string timing{}, error{};
};

// What both runners stand on: the rig, the row's timing (fell back to events: "events*"), and the
// unfused paths' DDA AllReduce of count elements per rank (in[q] -> out[q]) on the emulated DDA
// launch shape.
class fused_rig : public rt::emulated_bench<max_r> {
 public:
  fused_rig(const options& o, std::size_t buffer_bytes, int max_tiles, rcclx::core::ll_layout ll)
      : emulated_bench(o.num_ranks, buffer_bytes, fz::pad_blocks_for(barrier_blocks, max_tiles), ll), o_(o),
        n_(o.num_ranks), slots_{barrier_blocks, max_tiles} {}

 protected:
  // Device memory of `count` elements (and 64 bytes to spare) for as long as the rig lives.
  template <class U>
  U* elems(std::size_t count) {
    return alloc<U>(count * sizeof(U) + 64);
  }

  // A row's timings once its outputs are checked, each call on the state the previous left:
  // fused(algorithm, stream) flat and tree (automatic: the one the row reports), unfused(algorithm,
  // stream) flat and tree, and the faster unfused path's first kernel alone (first(algorithm,
  // stream)); then the speedups.
  template <class Fused, class Unfused, class First>
  void time_row(row& r, rt::timing_mode mode, algorithm automatic, Fused&& fused, Unfused&& unfused, First&& first) {
    bool fell_back = false;
    const auto time = [&](auto&& f) { return this->time(mode, o_.timing, f, fell_back); };
    r.fused_flat_us = time([&](stream_t st) { fused(algorithm::flat, st); });
    r.fused_tree_us = time([&](stream_t st) { fused(algorithm::tree, st); });
    r.fused_auto_us = automatic == algorithm::flat ? r.fused_flat_us : r.fused_tree_us;
    r.unfused_flat_us = time([&](stream_t st) { unfused(algorithm::flat, st); });
    r.unfused_tree_us = time([&](stream_t st) { unfused(algorithm::tree, st); });
    const bool flat_best = r.unfused_flat_us <= r.unfused_tree_us;
    r.unfused_best_us = flat_best ? r.unfused_flat_us : r.unfused_tree_us;
    r.unfused_best_algo = flat_best ? "flat" : "tree";
    r.first_kernel_us = time([&](stream_t st) { first(flat_best ? algorithm::flat : algorithm::tree, st); });
    r.speedup = r.fused_auto_us > 0 ? r.unfused_best_us / r.fused_auto_us : 0;
    const double f = r.fused_tree_us > 0 ? std::min(r.fused_flat_us, r.fused_tree_us) : r.fused_flat_us;
    r.speedup_best = f > 0 ? r.unfused_best_us / f : 0;
    if (fell_back) r.timing = "events*";
  }

  template <class In>
  rt::rank_buffers<T, max_r> buffers(const std::vector<In>& in, const std::vector<T*>& out) const {
    rt::rank_buffers<T, max_r> b{};
    for (int q = 0; q < n_; ++q) b.in[q] = static_cast<const T*>(in[q]), b.out[q] = out[q];
    return b;
  }
  void dda(const rt::rank_buffers<T, max_r>& b, std::size_t count, algorithm a, stream_t st) {
    const rcclx::dda::launch_config cfg{dda_threads, dda_max_blocks, dda_max_blocks};
    auto go = [&](auto k) {
      int nb = rcclx::dda::num_blocks_for<T>(count, a, n_, cfg);
      nb = std::max(1, std::min({nb, barrier_blocks, rt::max_blocks_per_rank<decltype(k)>(n_, dda_threads)}));
      rt::launch_emulated(n_, nb, dda_threads, k, st);
    };
    const auto* tables = world().device_tables<T>();
    if (a == algorithm::flat) go(rt::emulated_allreduce<rcclx::core::op_sum, algorithm::flat, T, max_r>{tables, b, count});
    else go(rt::emulated_allreduce<rcclx::core::op_sum, algorithm::tree, T, max_r>{tables, b, count});
  }

  const options& o_;
  int n_;
  fz::tile_slots slots_;
};

// ---- the AllReduce + residual + RMSNorm section --------------------------------------------------

template <class Out>
class rmsnorm_runner : public fused_rig {
 public:
  using out_t = fz::output_t<T, Out>;

  rmsnorm_runner(const options& o, std::size_t max_count, std::size_t max_tokens, std::size_t max_hidden,
                 std::size_t workspace_bytes)
      : fused_rig(o, std::max(workspace_bytes, max_count * sizeof(T)), static_cast<int>(max_tokens), o.ll) {
    for (int r = 0; r < n_; ++r) {
      for (auto* v : {&x_, &res_, &pristine_, &sum_}) v->push_back(elems<T>(max_count));
      out_.push_back(elems<out_t>(max_count));
    }
    weight_ = elems<T>(max_hidden);
    scale_ = elems<float>(1);
    x_sum_ = buffers(x_, sum_);
  }

  row run(const shape& s) {
    row r{"rmsnorm", std::to_string(s.tokens) + "x" + std::to_string(s.hidden),
          fz::rmsnorm_args<T, Out>::fp8_output ? "e4m3" : "bf16", s.tokens, s.hidden, s.tokens * s.hidden * sizeof(T)};
    const rt::timing_mode mode = on_host ? rt::timing_mode::wall
                                         : r.bytes <= o_.graph_max_bytes ? rt::timing_mode::graph : rt::timing_mode::events;
    r.timing = rt::to_string(mode);
    guard(r, [&] {
      fill(s);
      const algorithm automatic = fz::resolve_rmsnorm_algorithm<T>(algorithm::automatic, s.tokens, s.hidden, n_);
      r.fused_auto_algo = rcclx::to_string(automatic);
      // Correctness first, on fresh inputs: fused (both algorithms) == unfused, and the reference.
      rt::fused_launch_info flat_info, tree_info;  // what each algorithm launched
      const auto fused_flat = outputs_after([&](stream_t st) { fused(s, algorithm::flat, st, &flat_info); });
      const auto fused_tree = outputs_after([&](stream_t st) { fused(s, algorithm::tree, st, &tree_info); });
      const rt::fused_launch_info& launched = automatic == algorithm::flat ? flat_info : tree_info;
      r.fused_blocks = launched.blocks_per_rank;
      // "cl<blocks>x<threads>[r<rows>]": the cluster kernel (clusters of <blocks> blocks, up to
      // <rows> rows per cluster); "tile" or "tree": the tile-flag kernel of that algorithm.
      r.fused_kernel = launched.cluster_blocks == 0
                           ? (automatic == algorithm::tree ? "tree" : "tile")
                           : "cl" + std::to_string(launched.cluster_blocks) + "x" + std::to_string(launched.cluster_threads) +
                                 (launched.rows_per_cluster > 1 ? "r" + std::to_string(launched.rows_per_cluster) : "");
      const auto unfused_flat = outputs_after([&](stream_t st) { unfused(s, algorithm::flat, st); });
      r.identical = fused_flat == fused_tree && fused_flat == unfused_flat;
      check_reference(s, fused_flat, r);
      // Then the timings (the residual keeps growing: same speed).
      time_row(
          r, mode, automatic, [&](algorithm a, stream_t st) { fused(s, a, st); },
          [&](algorithm a, stream_t st) { unfused(s, a, st); },
          [&](algorithm a, stream_t st) { dda(x_sum_, s.tokens * s.hidden, a, st); });
    });
    return r;
  }

 private:
  std::vector<fz::rmsnorm_args<T, Out>> args(const shape& s, bool unfused) const {
    std::vector<fz::rmsnorm_args<T, Out>> a(n_);
    for (int r = 0; r < n_; ++r)
      a[r] = {unfused ? sum_[r] : x_[r], res_[r], weight_, out_[r], s.tokens, s.hidden, 1e-6f, scale_};
    return a;
  }

  void fused(const shape& s, algorithm a, stream_t st, rt::fused_launch_info* info = nullptr) {
    rt::launch_allreduce_rmsnorm<T, Out, max_r>(world(), args(s, false).data(), slots_, a, 0, st, info);
  }

  void unfused(const shape& s, algorithm a, stream_t st) {
    dda(x_sum_, s.tokens * s.hidden, a, st);
    rt::launch_add_rmsnorm<T, Out, max_r>(n_, args(s, true).data(), 0, st);
  }

  // Inputs: x uniform in [-1, 1) per rank, residual the same on every rank (kept in `pristine`).
  void fill(const shape& s) {
    const std::size_t count = s.tokens * s.hidden;
    std::mt19937 g(static_cast<unsigned>(count + s.hidden));
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    hx_.assign(n_, std::vector<T>(count));
    for (auto& v : hx_)
      for (auto& e : v) e = T(d(g));
    hres_.resize(count);
    for (auto& e : hres_) e = T(d(g));
    hw_.resize(s.hidden);
    for (auto& e : hw_) e = T(1.0f + 0.25f * d(g));
    for (int r = 0; r < n_; ++r) {
      rcclx::gpu::copy(x_[r], hx_[r].data(), count * sizeof(T));
      rcclx::gpu::copy(pristine_[r], hres_.data(), count * sizeof(T));
    }
    rcclx::gpu::copy(weight_, hw_.data(), s.hidden * sizeof(T));
    const float scale = 0.03f;
    rcclx::gpu::copy(scale_, &scale, sizeof(float));
    count_ = count;
  }

  // Every rank's output and new residual after `f`, starting from the pristine residual.
  template <class F>
  std::vector<std::vector<unsigned char>> outputs_after(F&& f) {
    for (int r = 0; r < n_; ++r) rcclx::gpu::copy(res_[r], pristine_[r], count_ * sizeof(T));
    rcclx::gpu::device_synchronize();
    f(stream());
    const auto out = download(out_, count_ * sizeof(out_t)), res = download(res_, count_ * sizeof(T));
    std::vector<std::vector<unsigned char>> all;
    for (int r = 0; r < n_; ++r) all.push_back(out[r]), all.push_back(res[r]);
    return all;
  }

  // Rank 0 against float64 on up to 64 sampled rows (testing/references.hpp: the bounds of
  // docs/fusion.md "Numerics", first order, doubled).
  void check_reference(const shape& s, const std::vector<std::vector<unsigned char>>& got, row& r) {
    const std::size_t h = s.hidden;
    const auto v = [](T x) { return static_cast<double>(static_cast<float>(x)); };
    for (std::size_t i = 0; i < s.tokens; i += std::max<std::size_t>(1, s.tokens / 64)) {
      const rt::rmsnorm_row ref = rt::rmsnorm_reference<T>(
          n_, h, [&](int q, std::size_t j) { return v(hx_[q][i * h + j]); }, [&](std::size_t j) { return v(hres_[i * h + j]); },
          [&](std::size_t j) { return v(hw_[j]); }, 1e-6);
      for (std::size_t j = 0; j < h; ++j) {
        double gotv = 0;
        if constexpr (fz::rmsnorm_args<T, Out>::fp8_output) {
          gotv = rcclx::fp8::decode<Out>(got[0][i * h + j]) * 0.03;
        } else {
          T t;
          std::memcpy(&t, got[0].data() + (i * h + j) * sizeof(T), sizeof(T));
          gotv = v(t);
        }
        const double e = std::fabs(gotv - ref.y[j]);
        r.max_err = std::max(r.max_err, e);
        if (!(e <= rt::rmsnorm_tolerance<Out>(ref.y[j], ref.err[j], 0.03))) r.tol_ok = false;
      }
    }
  }

  std::vector<T*> x_, res_, pristine_, sum_;
  rt::rank_buffers<T, max_r> x_sum_;  // the unfused AllReduce: x -> sum
  std::vector<out_t*> out_;
  T* weight_ = nullptr;
  float* scale_ = nullptr;
  std::size_t count_ = 0;
  std::vector<std::vector<T>> hx_;
  std::vector<T> hres_, hw_;
};

// ---- the GEMM + AllReduce section ----------------------------------------------------------------

class gemm_runner : public fused_rig {
 public:
  gemm_runner(const options& o, std::size_t max_mn, std::size_t max_mk, std::size_t max_kn, int max_tiles)
      : fused_rig(o,
                  std::max(fz::tile_allreduce<T, max_r, algorithm::tree>::workspace_bytes(
                               gemm_example::BM * gemm_example::BN, max_tiles),
                           max_mn * sizeof(T)),
                  max_tiles, rcclx::core::default_ll_layout()) {
    for (int r = 0; r < n_; ++r) {
      a_.push_back(elems<T>(max_mk));
      b_.push_back(elems<T>(max_kn));
      c_.push_back(elems<T>(max_mn));
      sym_.push_back(world().buffer(r));
    }
    sym_c_ = buffers(sym_, c_);
  }

  row run(const gemm_shape& s) {
    row r{"gemm", std::to_string(s.M) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K), "bf16", s.M, s.N,
          s.M * s.N * sizeof(T)};
    const rt::timing_mode mode = on_host ? rt::timing_mode::wall : rt::timing_mode::graph;
    r.timing = rt::to_string(mode);
    guard(r, [&] {
      if (s.K % n_ != 0 || s.N % 8 != 0) throw rcclx::error(rcclx::errc::invalid_argument, "K % ranks or N % 8");
      const std::size_t K_r = s.K / n_;
      fill(s, K_r);
      const int tiles = static_cast<int>(fz::tile_map{s.M, s.N, gemm_example::BM, gemm_example::BN}.num_tiles());
      if (2 * tiles > slots_.max_tiles) throw rcclx::error(rcclx::errc::invalid_argument, "too many tiles");
      gemm_example::gemm_allreduce fused_k{};
      gemm_example::gemm_partials partial_k{};
      gemm_example::gemm_allreduce_tree fused_tree_k{};
      auto set_fused = [&](auto& k) {  // the flat and tree kernels have the same members
        for (int q = 0; q < n_; ++q) {
          k.tables[q] = world().device_tables<T>() + q;
          k.A[q] = a_[q];
          k.B[q] = b_[q];
          k.C[q] = c_[q];
        }
        k.bias = nullptr;
        k.M = s.M;
        k.N = s.N;
        k.K_r = K_r;
        k.slots = slots_;
      };
      set_fused(fused_k);
      set_fused(fused_tree_k);
      for (int q = 0; q < n_; ++q) {
        partial_k.A[q] = a_[q];
        partial_k.B[q] = b_[q];
        partial_k.out[q] = static_cast<T*>(world().buffer(q));  // the symmetric buffer: no copy in the AllReduce
      }
      partial_k.M = s.M;
      partial_k.N = s.N;
      partial_k.K_r = K_r;
      const auto blocks = [&](auto k) {
        return std::max(1, std::min({tiles, on_host ? 4 : 1 << 20, rt::max_blocks_per_rank<decltype(k)>(n_, gemm_example::threads)}));
      };
      const int fused_blocks = blocks(fused_k), gemm_blocks = blocks(partial_k);
      r.fused_blocks = fused_blocks;
      r.unfused_blocks = gemm_blocks;  // the same when both kernels get the same occupancy (they should)
      const auto launch = [&](int nb, const auto& k, stream_t st) { rt::launch_emulated(n_, nb, gemm_example::threads, k, st); };
      auto fused = [&](algorithm a, stream_t st) {
        if (a == algorithm::flat) launch(fused_blocks, fused_k, st);
        else launch(fused_blocks, fused_tree_k, st);
      };
      auto gemm = [&](algorithm, stream_t st) { launch(gemm_blocks, partial_k, st); };
      auto unfused = [&](algorithm a, stream_t st) {
        gemm(a, st);
        dda(sym_c_, s.M * s.N, a, st);
      };
      // Correctness: every rank gets the same bits, the unfused path's (the tree kernel always;
      // the flat one unless it splits its last round's tiles: each part is rounded to bf16 like a
      // rank's partial product, so within the same tolerance, not the same bits), and rank 0's
      // output is within tolerance of float64 on sampled rows.
      const std::size_t c_bytes = s.M * s.N * sizeof(T);
      const auto f = outputs_after([&](stream_t st) { fused(algorithm::flat, st); }, c_, c_bytes);
      const auto u = outputs_after([&](stream_t st) { unfused(algorithm::flat, st); }, c_, c_bytes);
      const auto ft = outputs_after([&](stream_t st) { fused(algorithm::tree, st); }, c_, c_bytes);
      const gemm_example::split_plan plan(tiles, fused_blocks, K_r);
      r.split = plan.split;
      const bool ranks_agree = std::all_of(f.begin(), f.end(), [&](const auto& c) { return c == f[0]; });
      r.identical = ranks_agree && ft == f && (r.split > 1 || f == u);  // flat and tree split alike
      check_reference(s, K_r, plan, f[0], r);
      // The example's default is flat: the tree tail measured slower at M = 16-128 on one H200 and
      // slightly faster at M = 512 (docs/performance.md); its column stays for comparison.
      r.fused_auto_algo = "flat";
      time_row(r, mode, algorithm::flat, fused, unfused, gemm);
    });
    return r;
  }

 private:
  void fill(const gemm_shape& s, std::size_t K_r) {
    std::mt19937 g(static_cast<unsigned>(s.M * 31 + s.N));
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    ha_.assign(n_, std::vector<T>(s.M * K_r));
    hb_.assign(n_, std::vector<T>(K_r * s.N));
    for (int q = 0; q < n_; ++q) {
      for (auto& e : ha_[q]) e = T(d(g));
      for (auto& e : hb_[q]) e = T(d(g));
      rcclx::gpu::copy(a_[q], ha_[q].data(), ha_[q].size() * sizeof(T));
      rcclx::gpu::copy(b_[q], hb_[q].data(), hb_[q].size() * sizeof(T));
    }
  }

  // Rank 0's C on up to 16 sampled rows against float64 (gemm_example::reference_at, bounds as in
  // examples/04).
  void check_reference(const gemm_shape& s, std::size_t K_r, const gemm_example::split_plan& plan,
                       const std::vector<unsigned char>& c, row& r) {
    for (std::size_t i = 0; i < s.M; i += std::max<std::size_t>(1, s.M / 16)) {
      for (std::size_t j = 0; j < s.N; ++j) {
        const auto ref = gemm_example::reference_at(ha_, hb_, s.N, K_r, plan, i, j, 0.0);
        T t;
        std::memcpy(&t, c.data() + (i * s.N + j) * sizeof(T), sizeof(T));
        const double e = std::fabs(static_cast<float>(t) - ref.sum);
        r.max_err = std::max(r.max_err, e);
        if (!(e <= ref.tol + 0x1p-8 * std::fabs(ref.sum) + 1e-6)) r.tol_ok = false;
      }
    }
  }

  std::vector<T*> a_, b_, c_;
  std::vector<void*> sym_;              // the symmetric buffers, which the GEMM writes
  rt::rank_buffers<T, max_r> sym_c_;    // the unfused AllReduce: symmetric buffer -> C
  std::vector<std::vector<T>> ha_, hb_;
};

// ---- reports -------------------------------------------------------------------------------------

void print_header() {
  std::printf("%-8s %-16s %-5s %-6s %4s %-10s %10s %10s %10s %10s %10s %10s %8s %8s %9s %s\n", "kind", "shape", "out",
              "auto", "blk", "kernel", "fused_flat", "fused_tree", "fused_auto", "unf_flat", "unf_tree", "first_k", "speedup",
              "x_best", "max_err", "ok");
}

void print_row(const row& r) {
  if (!r.error.empty()) {
    std::printf("%-8s %-16s %-5s ERROR: %s\n", r.kind.c_str(), r.shape.c_str(), r.out.c_str(), r.error.c_str());
    return;
  }
  std::printf("%-8s %-16s %-5s %-6s %4d %-10s %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %7.2fx %7.2fx %9.3g %s%s\n",
              r.kind.c_str(), r.shape.c_str(), r.out.c_str(), r.fused_auto_algo.c_str(), r.fused_blocks,
              r.fused_kernel.c_str(), r.fused_flat_us, r.fused_tree_us, r.fused_auto_us, r.unfused_flat_us,
              r.unfused_tree_us, r.first_kernel_us, r.speedup, r.speedup_best, r.max_err,
              r.tol_ok && r.identical ? "ok" : (r.identical ? "TOL" : "DIFF"),
              r.split > 1 ? (" split " + std::to_string(r.split)).c_str() : "");
  std::fflush(stdout);
}

bool correct(const row& r) { return r.error.empty() && r.tol_ok && r.identical; }

std::vector<bench::target> evaluate(const std::vector<row>& rows, const std::vector<combine_bench::row>& combines) {
  bench::target norm{"fused_rmsnorm_decode", "fused AllReduce+residual+RMSNorm >= 1.3x faster than unfused "
                                             "(best of dda flat/tree + add_rmsnorm) for tokens <= 128, bf16 output"};
  bench::target gemm{"fused_gemm_allreduce", "fused GEMM+AllReduce faster than the GEMM followed by the best dda AllReduce"};
  for (const auto& r : rows) {
    if (r.error.empty() && r.kind == "gemm") gemm.see(r.speedup);
    if (r.error.empty() && r.kind == "rmsnorm" && r.out == "bf16" && r.tokens <= 128) norm.see(r.speedup);
  }
  norm.close(norm.worst >= 1.3, "worst speedup %.2fx", 1.0, "not measured");
  gemm.close(gemm.worst > 1.0, "worst speedup %.2fx", 1.0, "not measured");
  std::vector<bench::target> all{norm, gemm};
  for (const auto& t : combine_bench::evaluate(combines)) all.push_back(t);
  return all;
}

bench::fields row_fields(const row& r) {
  return {{"kind", r.kind}, {"shape", r.shape}, {"tokens", r.tokens}, {"hidden", r.hidden}, {"bytes_per_rank", r.bytes},
          {"output", r.out}, {"fused_auto_algorithm", r.fused_auto_algo}, {"fused_blocks_per_rank", r.fused_blocks},
          {"fused_kernel", r.fused_kernel}, {"unfused_gemm_blocks_per_rank", r.unfused_blocks}, {"fused_split", r.split},
          {"timing", r.timing}, {"fused_flat_us", r.fused_flat_us}, {"fused_tree_us", r.fused_tree_us},
          {"fused_auto_us", r.fused_auto_us}, {"unfused_flat_us", r.unfused_flat_us},
          {"unfused_tree_us", r.unfused_tree_us}, {"unfused_best_us", r.unfused_best_us},
          {"unfused_best_algorithm", r.unfused_best_algo}, {"first_kernel_us", r.first_kernel_us},
          {"speedup", r.speedup}, {"speedup_best_fused", r.speedup_best}, {"max_abs_error", r.max_err},
          {"within_tolerance", r.tol_ok}, {"fused_equals_unfused", r.identical}, {"error", r.error}};
}

void write_json(const options& o, const std::vector<row>& rows, const std::vector<combine_bench::row>& combines,
                const std::vector<bench::target>& acc) {
  std::ofstream f = bench::open_output(o.json);
  f << "{\n";
  bench::write_json_members(f, bench::report_head("rcclx-bench-fused", o.command) +
                                   bench::fields{{"num_ranks", o.num_ranks}, {"iters", o.timing.iters},
                                                 {"calls_per_graph", o.timing.calls_per_graph}});
  f << "  \"definitions\": {\n"
       "    \"fused\": \"rmsnorm: fused::allreduce_rmsnorm (one kernel); gemm: examples/04 gemm_allreduce (one kernel)\",\n"
       "    \"unfused\": \"rmsnorm: dda AllReduce (flat or tree) then fused::add_rmsnorm; gemm: the same GEMM into the "
       "symmetric buffer then the dda AllReduce (flat or tree) of it; unfused_best: the faster\",\n"
       "    \"first_kernel_us\": \"the unfused path's first kernel alone (rmsnorm: the best dda AllReduce; gemm: the GEMM)\",\n"
       "    \"speedup\": \"unfused_best_us / fused_auto_us (what the automatic choice gives)\",\n"
       "    \"speedup_best_fused\": \"unfused_best_us / min(fused_flat_us, fused_tree_us)\",\n"
       "    \"fused_kernel\": \"rmsnorm: what the automatic choice launched: clBxT[rR] = the cluster kernel, clusters of B blocks "
       "of T threads, up to R rows per cluster; tile or tree = the tile-flag kernel; fused_blocks_per_rank: its blocks per rank\",\n"
       "    \"timing\": \"graph: K back-to-back calls per graph, replay/K, median; events: single calls; wall: host\"\n"
       "  },\n  \"rows\": [\n";
  bench::write_json_rows(f, rows, row_fields);
  f << "  ],\n";
  combine_bench::write_json_members(f, combines);
  f << ",\n";
  bench::end_json_report(f, acc);
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  if (!on_host && rcclx::gpu::device_count() == 0) {
    std::printf("rcclx-bench-fused: built for a GPU backend but no GPU is present\n");
    return 1;
  }
  std::printf("# rcclx-bench-fused: fused vs unfused on %d emulated ranks, device: %s (%s), backend %s\n# command: %s\n",
              o.num_ranks, bench::device_name().c_str(), rcclx::gpu::to_string(rcclx::gpu::current_arch()),
              bench::backend_label(), o.command.c_str());
  std::printf("# times in us per call; %s\n# unfused = rcclx's own kernels: dda AllReduce (flat | tree) + add_rmsnorm, "
              "or the GEMM + dda AllReduce; speedup = best unfused / fused (automatic); x_best = best unfused / best "
              "fused; first_k = the unfused first kernel alone\n# kernel = what the automatic fused choice launched "
              "(clBxT[rR]: the cluster kernel, clusters of B blocks of T threads, up to R rows each; tile | tree: the "
              "tile-flag kernel), blk = its blocks per rank\n",
              on_host ? "wall clock (host backend), median"
                      : "graphs of back-to-back calls (replay / calls, median) up to 32 MiB per rank, events above");
  if (!o.shapes.empty() || !o.gemms.empty()) print_header();
  std::vector<row> rows;
  std::vector<combine_bench::row> combines;
  const auto add = [&](row r) {
    print_row(r);
    rows.push_back(std::move(r));
  };
  try {
    std::size_t max_count = 16, max_tokens = 1, max_hidden = 8, workspace = 16;
    for (const auto& s : o.shapes) {
      max_count = std::max(max_count, s.tokens * s.hidden);
      max_tokens = std::max(max_tokens, s.tokens);
      max_hidden = std::max(max_hidden, s.hidden);
      // bf16 output needs the most (the FP8 runner's published rows are smaller)
      workspace = std::max(workspace, fz::allreduce_rmsnorm_workspace_bytes<T>(s.tokens, s.hidden, algorithm::tree));
    }
    {
      rmsnorm_runner<T> bf(o, max_count, max_tokens, max_hidden, workspace);
      for (const auto& s : o.shapes)
        if (!s.fp8) add(bf.run(s));
    }
    {
      rmsnorm_runner<rcclx::fp8::e4m3> q(o, max_count, max_tokens, max_hidden, workspace);
      for (const auto& s : o.shapes)
        if (s.fp8) add(q.run(s));
    }
    std::size_t max_mn = 16, max_mk = 16, max_kn = 16;
    int max_tiles = 1;
    for (const auto& g : o.gemms) {
      max_mn = std::max(max_mn, g.M * g.N);
      max_mk = std::max(max_mk, g.M * g.K / o.num_ranks);
      max_kn = std::max(max_kn, g.K / o.num_ranks * g.N);
      // Slots: the tiles plus the parts of split ones (gemm_example::split_plan: fewer than tiles + blocks <= 2 tiles).
      max_tiles = std::max(max_tiles, 2 * static_cast<int>(fz::tile_map{g.M, g.N, gemm_example::BM, gemm_example::BN}.num_tiles()));
    }
    if (!o.gemms.empty()) {
      gemm_runner gr(o, max_mn, max_mk, max_kn, max_tiles);
      for (const auto& g : o.gemms) add(gr.run(g));
    }
    if (!o.combines.empty()) {
      std::printf("# cross-rank combines (bench/fused/combine_rows.cpp): fused = one kernel ending in fused::combine; "
                  "unfused = (argmax, topk: the local scan kernel +) rcclx's AllGather of the partial records + a merge "
                  "kernel; floor = that AllGather alone; local = the scan kernel alone; read = the logits read once with "
                  "the scan's loads (its memory floor); bytes = partial records per "
                  "rank; speedup = unfused / fused (automatic), x_best = unfused / best fused; g_blk = the "
                  "AllGather's blocks per rank\n");
      combine_bench::print_header();
      combines = combine_bench::run(o.num_ranks, o.timing, o.combines, combine_bench::print_row);
    }
  } catch (const std::exception& e) {
    std::printf("rcclx-bench-fused: %s\n", e.what());
    return 1;
  }
  const bool ok = std::all_of(rows.begin(), rows.end(), correct) &&
                  std::all_of(combines.begin(), combines.end(), combine_bench::correct);
  const auto acc = evaluate(rows, combines);
  std::printf("# targets (fused against the best unfused path of the same run%s):\n", on_host ? "; host timings mean nothing" : "");
  for (const auto& a : acc)
    std::printf("#   %-22s %-5s %s  [%s]\n", a.name.c_str(), !a.evaluated ? "n/a" : (a.pass ? "PASS" : "MISS"),
                a.result.c_str(), a.target.c_str());
  std::printf("# correctness: %s\n", ok ? "every row: fused == unfused bit for bit on every rank (GEMM rows with "
                                          "split > 1: the same bits on every rank), within the float64 tolerance "
                                          "(argmax, topk: equal to it)"
                                        : "FAILED rows above");
  try {
    if (!o.json.empty()) {
      write_json(o, rows, combines, acc);
      std::printf("# json: %s\n", o.json.c_str());
    }
    if (!o.csv.empty())
      bench::write_csv(o.csv,
                       "kind,shape,tokens,hidden,bytes_per_rank,output,fused_auto_algorithm,fused_blocks=fused_blocks_per_rank,"
                       "fused_kernel,timing,fused_flat_us,fused_tree_us,fused_auto_us,unfused_flat_us,unfused_tree_us,"
                       "unfused_best_us,unfused_best_algorithm,first_kernel_us,speedup,speedup_best_fused,max_abs_error,ok,"
                       "\"error\"",
                       rows, [](const row& r) { return row_fields(r) + bench::fields{{"ok", correct(r) ? "ok" : "FAIL"}}; });
    if (!o.combine_csv.empty() && !combines.empty()) combine_bench::write_csv(o.combine_csv, combines);
  } catch (const std::exception& e) {
    std::printf("rcclx-bench-fused: %s\n", e.what());
    return 1;
  }
  return ok ? 0 : 1;
}
