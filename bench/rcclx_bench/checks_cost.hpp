// bench/rcclx_bench/checks_cost.hpp: the cost of the checked mode (RCCLX_CHECKS, docs/checks.md).
// The same measurement is compiled twice, into checks_on.cpp (RCCLX_CHECKS=1) and checks_off.cpp
// (RCCLX_CHECKS=0): each has its own copy of rcclx (the checked mode is part of the inline
// namespace), so one process times both, in the same way, alternating. Only the plain types below
// cross between them.
#pragma once

#include <rcclx/config.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace bench {

struct checks_cost_args {
  std::string type;                // "float" or "bf16"
  int num_ranks;                   // emulated ranks on one GPU (<= 8)
  std::vector<std::size_t> bytes;  // message sizes
  int warmup, iters, calls_per_graph;
};

// The sizes of the table: up to 64 KiB on the host backend, 256 KiB on GPUs.
inline std::vector<std::size_t> checks_cost_bytes() {
#if RCCLX_BACKEND_GPU
  return {16, 1024, 8192, 65536, 262144};
#else
  return {1024, 8192, 65536};
#endif
}

// Median time (us) of one flat AllReduce per size (dda::flat_allreduce on emulated ranks, graph
// replay on GPUs, wall time on the host backend); a negative entry: the size could not run.
std::vector<double> allreduce_us_checks_on(const checks_cost_args& a);
std::vector<double> allreduce_us_checks_off(const checks_cost_args& a);

// The tile AllReduce row: one kernel per call of fused::tile_allreduce<T, 8, flat> on
// `num_ranks` emulated ranks, 4 blocks per rank, each block copying, publishing and reducing one
// 2 KiB tile (8 KiB per rank in all) into a plain store epilogue. Median time (us) of one call,
// timed like the flat AllReduce; negative: it could not run.
constexpr int tile_cost_blocks = 4;
constexpr std::size_t tile_cost_tile_bytes = 2048;
double tile_allreduce_us_checks_on(const checks_cost_args& a);
double tile_allreduce_us_checks_off(const checks_cost_args& a);

// The AllReduce + residual + RMSNorm row: fused::allreduce_rmsnorm (algorithm::automatic, the
// launcher's own choice of kernel and grid) of 1 x 4096 bf16 on `num_ranks` emulated ranks, timed
// like the others; negative: it could not run.
constexpr std::size_t rmsnorm_cost_tokens = 1, rmsnorm_cost_hidden = 4096;
double allreduce_rmsnorm_us_checks_on(const checks_cost_args& a);
double allreduce_rmsnorm_us_checks_off(const checks_cost_args& a);

// One row of the summary: a name and the worst on/off ratio over the types measured (0: none).
struct checks_cost_row {
  std::string name;
  double worst = 0;
  std::string worst_type;
};

// The summary of the cost table: per row the worst on/off ratio, flagged "OVER" above `limit`.
// Returns true when every measured row is within it.
inline bool print_checks_cost_summary(const std::vector<checks_cost_row>& rows, double limit = 1.10) {
  std::printf("#\n# checked mode cost summary: worst on/off per row (limit %.2f)\n", limit);
  bool ok = true;
  for (const checks_cost_row& r : rows) {
    const bool measured = r.worst > 0, over = measured && r.worst > limit;
    ok = ok && !over;
    std::printf("#   %-28s %s %.3f (%s)\n", r.name.c_str(), !measured ? "NOT EVALUATED" : over ? "OVER" : "ok  ",
                r.worst, r.worst_type.c_str());
  }
  return ok;
}

// The tile AllReduce row's table (per type: off, on, on/off, each the best of `rounds` alternating
// medians); returns its worst ratio.
inline checks_cost_row print_tile_checks_cost(checks_cost_args args, const std::vector<std::string>& types, int rounds) {
  checks_cost_row row{"tile_allreduce flat 8 KiB", 0.0, ""};
  std::printf("#\n# checked mode cost: fused::tile_allreduce flat on %d emulated ranks, %d blocks x one %zu-byte tile "
              "per rank (best of %d medians each)\n",
              args.num_ranks, tile_cost_blocks, tile_cost_tile_bytes, rounds);
  std::printf("# %6s %10s %12s %12s %8s\n", "type", "bytes", "off(us)", "on(us)", "on/off");
  for (const std::string& t : types) {
    if (t != "float" && t != "bf16") continue;
    args.type = t;
    double off = 1e30, on = 1e30;
    for (int k = 0; k < rounds; ++k) {
      const double f = tile_allreduce_us_checks_off(args), n = tile_allreduce_us_checks_on(args);
      off = f < 0 || off < 0 ? -1.0 : std::min(off, f);
      on = n < 0 || on < 0 ? -1.0 : std::min(on, n);
    }
    const double ratio = off > 0 && on > 0 ? on / off : 0.0;
    std::printf("  %6s %10zu %12.2f %12.2f %8.3f\n", t.c_str(), tile_cost_blocks * tile_cost_tile_bytes, off, on, ratio);
    if (ratio > row.worst) row.worst = ratio, row.worst_type = t;
  }
  return row;
}

// Prints the table (per type in `types` that is float or bf16, per size: off, on, on/off; each the
// best of `rounds` alternating measurements) and returns the worst on/off ratio at 8 KiB (0: none).
inline double print_checks_cost(checks_cost_args args, const std::vector<std::string>& types, int rounds,
                                std::string* worst_type = nullptr) {
  std::printf("#\n# checked mode cost (RCCLX_CHECKS, docs/checks.md): flat AllReduce on %d emulated ranks, the same "
              "measurement compiled with and without checks, timed alternately (best of %d medians each)\n",
              args.num_ranks, rounds);
  std::printf("# %6s %10s %12s %12s %8s\n", "type", "bytes", "off(us)", "on(us)", "on/off");
  double worst = 0;
  for (const std::string& t : types) {
    if (t != "float" && t != "bf16") continue;
    args.type = t;
    std::vector<double> off(args.bytes.size(), 1e30), on(args.bytes.size(), 1e30);
    for (int k = 0; k < rounds; ++k) {
      const std::vector<double> f = allreduce_us_checks_off(args), n = allreduce_us_checks_on(args);
      for (std::size_t i = 0; i < args.bytes.size(); ++i) {
        off[i] = f[i] < 0 || off[i] < 0 ? -1.0 : std::min(off[i], f[i]);
        on[i] = n[i] < 0 || on[i] < 0 ? -1.0 : std::min(on[i], n[i]);
      }
    }
    for (std::size_t i = 0; i < args.bytes.size(); ++i) {
      const double ratio = off[i] > 0 && on[i] > 0 ? on[i] / off[i] : 0.0;
      std::printf("  %6s %10zu %12.2f %12.2f %8.3f\n", t.c_str(), args.bytes[i], off[i], on[i], ratio);
      if (args.bytes[i] == 8192 && ratio > worst) {
        worst = ratio;
        if (worst_type) *worst_type = t;
      }
    }
  }
  return worst;
}

// The AllReduce + RMSNorm row's table (bf16 only; best of `rounds` alternating medians).
inline checks_cost_row print_rmsnorm_checks_cost(const checks_cost_args& args, int rounds) {
  checks_cost_row row{"allreduce_rmsnorm 1x4096 bf16", 0.0, ""};
  std::printf("#\n# checked mode cost: fused::allreduce_rmsnorm %zu x %zu bf16 (automatic) on %d emulated ranks "
              "(best of %d medians each)\n",
              rmsnorm_cost_tokens, rmsnorm_cost_hidden, args.num_ranks, rounds);
  std::printf("# %6s %10s %12s %12s %8s\n", "type", "bytes", "off(us)", "on(us)", "on/off");
  double off = 1e30, on = 1e30;
  for (int k = 0; k < rounds; ++k) {
    const double f = allreduce_rmsnorm_us_checks_off(args), n = allreduce_rmsnorm_us_checks_on(args);
    off = f < 0 || off < 0 ? -1.0 : std::min(off, f);
    on = n < 0 || on < 0 ? -1.0 : std::min(on, n);
  }
  const double ratio = off > 0 && on > 0 ? on / off : 0.0;
  std::printf("  %6s %10zu %12.2f %12.2f %8.3f\n", "bf16", rmsnorm_cost_tokens * rmsnorm_cost_hidden * 2, off, on, ratio);
  row.worst = ratio;
  row.worst_type = "bf16";
  return row;
}

}  // namespace bench

#ifdef RCCLX_BENCH_CHECKS_COST_IMPL
// The body, included by checks_on.cpp and checks_off.cpp with RCCLX_BENCH_CHECKS_COST_IMPL set to
// the function they define.
#  include <rcclx/core/types.hpp>
#  include <rcclx/dda/allreduce.hpp>
#  include <rcclx/fused/allreduce_rmsnorm.hpp>
#  include <rcclx/fused/stages.hpp>
#  include <rcclx/fused/tile_allreduce.hpp>
#  include <rcclx/testing/emulated_fused_kernels.hpp>
#  include <rcclx/testing/emulated_bench.hpp>
#  include <rcclx/testing/emulated_kernels.hpp>
#  include <rcclx/testing/emulated_launch_config.hpp>
#  include <rcclx/testing/launch.hpp>

#  include <algorithm>


namespace bench {
namespace {

template <class T>
std::vector<double> checks_cost_run(const checks_cost_args& a) {
  namespace rt = rcclx::testing;
  constexpr int max_r = 8;
  std::size_t max_bytes = 16;
  for (std::size_t b : a.bytes) max_bytes = std::max(max_bytes, b);
  rt::emulated_bench<max_r> rig(a.num_ranks, max_bytes, 32, rcclx::core::default_ll_layout(), rcclx::core::default_timeout_ns);
  rt::rank_buffers<T, max_r> buf{};
  for (int r = 0; r < a.num_ranks; ++r) {
    buf.in[r] = rig.template alloc<const T>(max_bytes);
    rcclx::gpu::memset_zero(const_cast<T*>(buf.in[r]), max_bytes);
    buf.out[r] = rig.template alloc<T>(max_bytes);
  }
  const rcclx::dda::launch_config cfg = rt::emulated_launch_config();
  const rt::timing_options o{a.warmup, a.iters, a.calls_per_graph};
  const rt::timing_mode mode = rcclx::current_backend == rcclx::backend::host ? rt::timing_mode::wall : rt::timing_mode::graph;
  std::vector<double> us;
  using kernel = rt::emulated_allreduce<rcclx::core::op_sum, rcclx::algorithm::flat, T, max_r>;
  for (std::size_t b : a.bytes) {
    const std::size_t count = b / sizeof(T);
    const kernel k{rig.world().template device_tables<T>(), buf, count};
    int nb = rcclx::dda::num_blocks_for<T>(count, rcclx::algorithm::flat, a.num_ranks, cfg);
    nb = std::min(nb, rt::max_blocks_per_rank<kernel>(a.num_ranks, cfg.threads));
    try {
      bool fell_back = false;
      us.push_back(rig.time(mode, o, [&](rcclx::gpu::stream_t s) { rt::launch_emulated(a.num_ranks, nb, cfg.threads, k, s); },
                            fell_back));
    } catch (const std::exception&) {
      us.push_back(-1.0);
      rig.recover();
    }
  }
  return us;
}

// Every block of every rank: copy its tile of this rank's input into the symmetric buffer,
// publish it, reduce it (flat) into a plain store.
template <class T>
struct tile_cost_kernel {
  static constexpr int max_r = 8;
  const rcclx::core::peer_table<T, max_r>* tables;
  const T* in[max_r];
  T* out[max_r];
  rcclx::fused::tile_slots slots;
  std::size_t tile_elems;
  int tiles;

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rcclx::testing::launch_index ix) const {
    namespace fz = rcclx::fused;
    fz::tile_allreduce<T, max_r, rcclx::algorithm::flat> ar(tables[ix.rank], slots, tile_elems, tiles);
    const fz::row_tiles map{static_cast<std::size_t>(tiles), tile_elems};
    ar.declare_map(map);
    const fz::epilogue<fz::store<T>> epi{fz::store<T>{out[ix.rank], tile_elems}};
    constexpr std::size_t e = 16 / sizeof(T);
    for (int t = ix.block; t < tiles; t += ix.num_blocks) {
      const T* src = in[ix.rank] + static_cast<std::size_t>(t) * tile_elems;
      T* dst = ar.input(t);
      for (std::size_t v = static_cast<std::size_t>(g.thread_rank()); v < tile_elems / e; v += static_cast<std::size_t>(g.size()))
        rcclx::gpu::store16(dst + v * e, rcclx::gpu::load16(src + v * e));
      ar.publish(g, t);
    }
    for (int t = ix.block; t < tiles; t += ix.num_blocks)
      if (!ar.template reduce<1>(g, t, map, epi)) break;
    ar.finish(g, ix.num_blocks);
  }
};

template <class T>
double tile_cost_run(const checks_cost_args& a) {
  namespace rt = rcclx::testing;
  constexpr int max_r = 8;
  constexpr int threads = rcclx::current_backend == rcclx::backend::host ? 1 : 128;  // 128 x 16 B = one tile
  const std::size_t tile_elems = tile_cost_tile_bytes / sizeof(T);
  const std::size_t bytes = tile_cost_tile_bytes * tile_cost_blocks;
  using ar_t = rcclx::fused::tile_allreduce<T, max_r, rcclx::algorithm::flat>;
  rt::emulated_bench<max_r> rig(a.num_ranks, ar_t::workspace_bytes(tile_elems, tile_cost_blocks), 1 + tile_cost_blocks,
                                rcclx::core::default_ll_layout(), rcclx::core::default_timeout_ns);
  tile_cost_kernel<T> k{};
  k.tables = rig.world().template device_tables<T>();
  k.slots = rig.world().reserve_tile_slots(tile_cost_blocks, "rcclx-bench-checks tile row");
  k.tile_elems = tile_elems;
  k.tiles = tile_cost_blocks;
  for (int r = 0; r < a.num_ranks; ++r) {
    T* in = rig.template alloc<T>(bytes);
    rcclx::gpu::memset_zero(in, bytes);
    k.in[r] = in;
    k.out[r] = rig.template alloc<T>(bytes);
  }
  const rt::timing_options o{a.warmup, a.iters, a.calls_per_graph};
  const rt::timing_mode mode = rcclx::current_backend == rcclx::backend::host ? rt::timing_mode::wall : rt::timing_mode::graph;
  try {
    bool fell_back = false;
    return rig.time(mode, o, [&](rcclx::gpu::stream_t s) { rt::launch_emulated(a.num_ranks, tile_cost_blocks, threads, k, s); },
                    fell_back);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "# tile_allreduce row (%s): %s\n", a.type.c_str(), e.what());
    return -1.0;
  }
}

double rmsnorm_cost_run(const checks_cost_args& a) {
  namespace rt = rcclx::testing;
  namespace fz = rcclx::fused;
  using T = rcclx::bf16;
  constexpr int max_r = 8;
  const std::size_t tokens = rmsnorm_cost_tokens, hidden = rmsnorm_cost_hidden, count = tokens * hidden;
  rt::emulated_bench<max_r> rig(a.num_ranks,
                                fz::allreduce_rmsnorm_workspace_bytes<T>(tokens, hidden, rcclx::algorithm::tree),
                                fz::pad_blocks_for(32, static_cast<int>(tokens)), rcclx::core::default_ll_layout(),
                                rcclx::core::default_timeout_ns);
  rig.world().reserve_blocks(32);  // the block slots of the launcher's other kernels (the LL cluster path)
  const fz::tile_slots slots = rig.world().reserve_tile_slots(static_cast<int>(tokens), "rcclx-bench-checks rmsnorm row");
  std::vector<fz::rmsnorm_args<T>> args(static_cast<std::size_t>(a.num_ranks));
  T* weight = rig.template alloc<T>(hidden * sizeof(T));
  rcclx::gpu::memset_zero(weight, hidden * sizeof(T));
  for (int r = 0; r < a.num_ranks; ++r) {
    T* x = rig.template alloc<T>(count * sizeof(T));
    T* res = rig.template alloc<T>(count * sizeof(T));
    rcclx::gpu::memset_zero(x, count * sizeof(T));  // zero inputs: the residual stays what it was
    rcclx::gpu::memset_zero(res, count * sizeof(T));
    args[static_cast<std::size_t>(r)] = fz::rmsnorm_args<T>{x, res, weight, rig.template alloc<T>(count * sizeof(T)),
                                                            tokens, hidden, 1e-6f};
  }
  const rt::timing_options o{a.warmup, a.iters, a.calls_per_graph};
  const rt::timing_mode mode = rcclx::current_backend == rcclx::backend::host ? rt::timing_mode::wall : rt::timing_mode::graph;
  try {
    bool fell_back = false;
    return rig.time(mode, o,
                    [&](rcclx::gpu::stream_t s) {
                      rt::launch_allreduce_rmsnorm<T, T, max_r>(rig.world(), args.data(), slots,
                                                                rcclx::algorithm::automatic, 0, s);
                    },
                    fell_back);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "# allreduce_rmsnorm row: %s\n", e.what());
    return -1.0;
  }
}

}  // namespace

std::vector<double> RCCLX_BENCH_CHECKS_COST_IMPL(const checks_cost_args& a) {
  if (a.type == "bf16") return checks_cost_run<rcclx::bf16>(a);
  return checks_cost_run<float>(a);
}

#  if RCCLX_CHECKS
double tile_allreduce_us_checks_on(const checks_cost_args& a)
#  else
double tile_allreduce_us_checks_off(const checks_cost_args& a)
#  endif
{
  if (a.type == "bf16") return tile_cost_run<rcclx::bf16>(a);
  return tile_cost_run<float>(a);
}

#  if RCCLX_CHECKS
double allreduce_rmsnorm_us_checks_on(const checks_cost_args& a)
#  else
double allreduce_rmsnorm_us_checks_off(const checks_cost_args& a)
#  endif
{
  return rmsnorm_cost_run(a);
}

}  // namespace bench
#endif
