// Example 09: one decode step of a tensor-parallel transformer layer as one kernel with three
// collectives (decode_layer.hpp): the split-KV attention merge (combine<lse_merge>), the output
// projection's AllReduce + residual + RMSNorm, and the MLP's down projection AllReduce + residual,
// each in a region of its own of one fused::region_plan. Checked against a float64 reference of the
// whole layer; every rank must hold the same bits.
//
//   rcclx_example_decode_layer [tokens hidden]              8 emulated ranks (one GPU, or host threads)
//   rcclx_example_decode_layer --procs N [tokens hidden]    N processes, one rank each (host::plan_memory)
//   rcclx_example_decode_layer --check                      a region sized for flat under a tree call:
//                                                           the checked mode names it, nothing is written
#include <rcclx/host/communicator.hpp>
#include <rcclx/host/fork_ranks.hpp>
#include <rcclx/host/plan_memory.hpp>
#include <rcclx/testing/emulated_world.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "decode_layer.hpp"

namespace {

namespace dl = decode_layer;
namespace fz = rcclx::fused;
using rcclx::algorithm;
using T = rcclx::bf16;
constexpr algorithm automatic = algorithm::automatic;

struct uploads {
  std::vector<void*> owned;
  uploads() = default;
  uploads(const uploads&) = delete;
  uploads& operator=(const uploads&) = delete;
  ~uploads() {
    for (void* x : owned) rcclx::gpu::device_free(x);
  }
  template <class U>
  U* put(const std::vector<U>& v) {
    owned.push_back(rcclx::gpu::device_malloc(v.size() * sizeof(U)));
    rcclx::gpu::copy(owned.back(), v.data(), v.size() * sizeof(U));
    return static_cast<U*>(owned.back());
  }
  template <class U>
  U* zeros(std::size_t count) {
    owned.push_back(rcclx::gpu::device_malloc(count * sizeof(U)));
    rcclx::gpu::memset_zero(owned.back(), count * sizeof(U));
    return static_cast<U*>(owned.back());
  }
};

// Rank r's arguments: its inputs and weights, scratch, outputs (device memory).
dl::rank_args<T> upload_rank(const dl::problem<T>& p, int r, uploads& up) {
  const dl::layer_shape& s = p.shape;
  const std::size_t H = s.hidden, tokens = static_cast<std::size_t>(s.tokens);
  const int h0 = dl::head_begin(r, p.n, s.heads), h1 = dl::head_begin(r + 1, p.n, s.heads);
  const std::vector<T> wo(p.wo.begin() + static_cast<std::size_t>(h0) * dl::head_dim * H,
                          p.wo.begin() + static_cast<std::size_t>(h1) * dl::head_dim * H);
  dl::rank_args<T> a{};
  a.partial = up.put(p.partial[r]);
  a.wo = wo.empty() ? up.zeros<T>(1) : up.put(wo);
  a.wup = up.put(p.wup[r]);
  a.wdown = up.put(p.wdown[r]);
  a.x = up.put(p.x);
  a.norm_weight = up.put(p.norm_weight);
  a.attn = up.zeros<T>(tokens * static_cast<std::size_t>(s.heads) * dl::head_dim);
  a.act = up.zeros<float>(tokens * static_cast<std::size_t>(s.ffn));
  a.h1 = up.zeros<T>(tokens * H);
  a.normed = up.zeros<T>(tokens * H);
  a.out = up.zeros<T>(tokens * H);
  a.head_first = h0;
  a.head_end = h1;
  return a;
}

std::vector<T> download(const T* d, std::size_t count) {
  std::vector<T> h(count);
  rcclx::gpu::copy(h.data(), d, count * sizeof(T));
  return h;
}

std::uint64_t hash(const std::vector<T>& v) {
  std::uint64_t h = 1469598103934665603ull;
  for (const T& x : v) h = (h ^ x.bits) * 1099511628211ull;
  return h;
}

// Blocks per rank: a block per token up to 32 (4 host threads), as many as can all be resident.
template <class Kernel>
int blocks_for(const dl::layer_shape& s, int n) {
  return std::max(1, std::min({s.tokens, dl::on_gpu ? 32 : 4, rcclx::testing::max_blocks_per_rank<Kernel>(n, dl::threads)}));
}

// Rank r's output against the reference: elements out of bound (out and normed).
std::size_t check_rank(const dl::rank_args<T>& a, const dl::layer_shape& s, const dl::reference& ref, double& max_err) {
  const std::size_t count = static_cast<std::size_t>(s.tokens) * s.hidden;
  double normed_err = 0;
  return dl::out_of_bound(download(a.out, count), ref.out, ref.out_err, max_err) +
         dl::out_of_bound(download(a.normed, count), ref.normed, ref.normed_err, normed_err);
}

template <class Map>
int run_emulated(const dl::layer_shape& s, int n) {
  const std::size_t heads = static_cast<std::size_t>(s.heads), tokens = static_cast<std::size_t>(s.tokens);
  const std::size_t hidden = s.hidden;
  // [decode-plan]
  using kernel = dl::layer_kernel<T, automatic, automatic, automatic, Map>;
  fz::region_plan plan;  // every call of the kernel adds what its largest call needs
  const auto merge = plan.add(kernel::merge_t::need(heads, tokens * heads), "attention merge");
  const auto o_proj = plan.add(kernel::o_proj_t::need(dl::padded<T>(hidden), s.tokens), "o_proj");
  const auto down_proj = plan.add(kernel::down_proj_t::need(dl::padded<T>(hidden), s.tokens), "down_proj");
  rcclx::testing::emulated_world<dl::max_ranks> world(n, plan.bytes(), plan.slots());
  plan.place(world);  // bytes of the world's buffers, slots of its pads: one region per call
  kernel k{};
  for (int r = 0; r < n; ++r) {
    k.tables[r] = world.device_tables<T>() + r;
    k.record_tables[r] = world.device_tables<dl::record<T>>() + r;
  }
  k.merge_region = plan[merge];
  k.o_proj_region = plan[o_proj];
  k.down_proj_region = plan[down_proj];
  // [decode-plan]
  k.shape = s;
  std::printf("%s\n", plan.describe().c_str());
  const dl::problem<T> p = dl::make_problem<T>(n, s);
  uploads up;
  for (int r = 0; r < n; ++r) k.args[r] = upload_rank(p, r, up);
  for (int rep = 0; rep < 3; ++rep)  // each call alternates its own buffer halves
    rcclx::testing::launch_emulated(world, blocks_for<kernel>(s, n), dl::threads, k);
  const dl::reference ref = dl::layer_reference(p);
  double max_err = 0;
  std::size_t bad = 0;
  const std::size_t count = tokens * hidden;
  const std::uint64_t h0 = hash(download(k.args[0].out, count)), n0 = hash(download(k.args[0].normed, count));
  for (int r = 0; r < n; ++r) {
    bad += check_rank(k.args[r], s, ref, max_err);
    bad += hash(download(k.args[r].out, count)) != h0 || hash(download(k.args[r].normed, count)) != n0;
  }
  std::printf("  %d emulated ranks: max |error| vs float64 %.3g; %s\n", n, max_err,
              bad ? "FAILED" : "every rank bit-identical and within the bound");
  return bad ? 1 : 0;
}

template <class Map>
int run_process_rank(const rcclx::host::launch_config& cfg, const dl::layer_shape& s) {
  rcclx::host::use_device(cfg);
  rcclx::host::socket_bootstrap bs(cfg);
  const int n = bs.num_ranks();
  // The pads hold the communicator's own grids (up to 128 block slots on a GPU) and, above them, the
  // plan's tile slots: room for both.
  rcclx::host::communicator_options o;
  o.max_blocks = 256;
  rcclx::host::communicator<dl::max_ranks> comm(bs, o);
  const int rank = comm.rank();
  using kernel = dl::layer_kernel<T, automatic, automatic, automatic, Map>;
  // [decode-procs]
  dl::layer_plan<T, automatic, automatic, automatic> lp(s);  // the same three calls as emulated
  rcclx::host::plan_memory<dl::max_ranks> memory(comm, lp.plan, "example 09");  // every rank: collective
  const rcclx::core::peer_table<T, dl::max_ranks> table = memory.table<T>();
  // ... a copy of `table` in device memory becomes k.tables[rank] (and k.record_tables[rank])
  // [decode-procs]
  void* dev_table = rcclx::gpu::device_malloc(sizeof(table));
  rcclx::gpu::copy(dev_table, &table, sizeof(table));
  kernel k{};
  k.tables[rank] = static_cast<const rcclx::core::peer_table<T, dl::max_ranks>*>(dev_table);
  k.record_tables[rank] = static_cast<const rcclx::core::peer_table<dl::record<T>, dl::max_ranks>*>(dev_table);
  k.merge_region = lp.plan[lp.merge];
  k.o_proj_region = lp.plan[lp.o_proj];
  k.down_proj_region = lp.plan[lp.down_proj];
  k.shape = s;
  const dl::problem<T> p = dl::make_problem<T>(n, s);
  uploads up;
  k.args[rank] = upload_rank(p, rank, up);
  rcclx::gpu::stream_t stream = rcclx::gpu::stream_create();
  for (int rep = 0; rep < 3; ++rep) {
    rcclx::testing::launch_rank(rank, n, blocks_for<kernel>(s, 1), dl::threads, k, stream);
    comm.synchronize(stream);  // throws if a peer never arrived
  }
  rcclx::gpu::stream_destroy(stream);
  double max_err = 0;
  const std::size_t bad = check_rank(k.args[rank], s, dl::layer_reference(p), max_err);
  const auto all = comm.get_bootstrap().allgather_value(hash(download(k.args[rank].out, static_cast<std::size_t>(s.tokens) * s.hidden)));
  int differ = 0;
  for (const std::uint64_t x : all) differ += x != all[0];
  rcclx::gpu::device_free(dev_table);
  if (bad) std::printf("  [rank %d] %zu elements out of the bound\n", rank, bad);
  if (rank == 0)
    std::printf("  %d processes: max |error| vs float64 %.3g (rank 0); %s\n", n, max_err,
                differ ? "ranks DIFFER" : "every rank bit-identical");
  return bad || differ ? 1 : 0;
}

// --check: the o_proj region sized for flat while the call runs tree. Checked builds refuse the
// call on the device before it writes past its region, and name it.
int run_check(const dl::layer_shape& s) {
  if (!rcclx::checks) {
    std::printf("--check needs a build with RCCLX_CHECKS=1 (docs/checks.md); this one has it off\n");
    return 0;
  }
  const int n = 3;
  using kernel = dl::layer_kernel<T, algorithm::flat, algorithm::tree, algorithm::flat, fz::row_tiles>;
  using flat_ar = fz::tile_allreduce<T, dl::max_ranks, algorithm::flat>;
  const std::size_t heads = static_cast<std::size_t>(s.heads), hp = dl::padded<T>(s.hidden);
  fz::region_plan plan;
  const auto merge = plan.add(kernel::merge_t::need(heads, static_cast<std::size_t>(s.tokens) * heads), "attention merge");
  const auto o_proj = plan.add(flat_ar::need(hp, s.tokens), "o_proj (sized for flat)");
  const auto down_proj = plan.add(kernel::down_proj_t::need(hp, s.tokens), "down_proj");
  rcclx::testing::emulated_world<dl::max_ranks> world(n, plan.bytes(), plan.slots(), 500ull * 1000 * 1000);
  plan.place(world);
  kernel k{};
  for (int r = 0; r < n; ++r) {
    k.tables[r] = world.device_tables<T>() + r;
    k.record_tables[r] = world.device_tables<dl::record<T>>() + r;
  }
  k.merge_region = plan[merge];
  k.o_proj_region = plan[o_proj];
  k.down_proj_region = plan[down_proj];
  k.shape = s;
  const dl::problem<T> p = dl::make_problem<T>(n, s);
  uploads up;
  for (int r = 0; r < n; ++r) k.args[r] = upload_rank(p, r, up);
  try {
    rcclx::testing::launch_emulated(world, blocks_for<kernel>(s, n), dl::threads, k);
  } catch (const rcclx::error& e) {
    std::printf("  the checked mode refused the call:\n  %s\n", e.what());
    return e.code() == rcclx::errc::invalid_argument ? 0 : 1;
  }
  std::printf("  FAILED: a tree call in a region sized for flat was not refused\n");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int procs = 0;  // 0: emulated ranks in this process; -1: one rank of a launcher's job
  if (!rcclx::host::procs_argument(argc, argv, dl::max_ranks, procs)) return 2;
  const bool check = argc >= 2 && std::strcmp(argv[1], "--check") == 0;
  if (check) --argc, ++argv;
  dl::layer_shape s{dl::on_gpu ? 32 : 4, dl::on_gpu ? 32 : 8, dl::on_gpu ? 128 : 32, 1001};
  if (argc == 3) {
    s.tokens = std::atoi(argv[1]);
    s.hidden = static_cast<std::size_t>(std::atol(argv[2]));
  }
  if (s.tokens < 1 || s.hidden < 1 || s.hidden > dl::max_hidden) {
    std::printf("tokens must be positive and hidden in [1, %zu]\n", dl::max_hidden);
    return 2;
  }
  std::printf("rcclx decode layer: %d tokens, %d heads x %d, hidden %zu, MLP %d columns per rank; attention merge, "
              "o_proj and down_proj in one kernel\n", s.tokens, s.heads, dl::head_dim, s.hidden, s.ffn);
  const bool ragged = s.hidden % (16 / sizeof(T)) != 0;
  if (procs != 0) {
    const int rc = rcclx::host::run_ranks(procs, [&](const rcclx::host::launch_config& cfg) {
      return ragged ? run_process_rank<fz::ragged_row_tiles>(cfg, s) : run_process_rank<fz::row_tiles>(cfg, s);
    });
    if (procs > 0) std::printf(rc ? "FAILED\n" : "all ranks within the bound of float64, bit-identical\n");
    return rc;
  }
  if (dl::on_gpu && rcclx::gpu::device_count() == 0) {
    std::printf("built for a GPU but none is present; rebuild with RCCLX_BACKEND=host\n");
    return 0;
  }
  if (check) {
    s.hidden = 64;
    return run_check(s);
  }
  return ragged ? run_emulated<fz::ragged_row_tiles>(s, 8) : run_emulated<fz::row_tiles>(s, 8);
}
