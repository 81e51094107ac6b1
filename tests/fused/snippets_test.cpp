// The usage snippets at the top of rcclx/fused/tile_allreduce.hpp, epilogue.hpp and stages.hpp,
// compiled and run (blockIdx.x / gridDim.x become the emulated block index and count): a hand-built
// chain (residual add, RMSNorm, store) over the tile-level AllReduce must give exactly the bits of
// the ready-made fused::allreduce_rmsnorm, which is built from the same parts.
#include <rcclx/fused/allreduce_rmsnorm.hpp>
#include <rcclx/fused/epilogue.hpp>
#include <rcclx/fused/stages.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/gpu/shared.hpp>
#include <rcclx/testing/emulated_fused_kernels.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <vector>

#include "../support/catch.hpp"
#include "reference.hpp"

namespace {

constexpr int threads = RCCLX_GPU_BLOCKS ? 512 : 1;  // the host backend: one thread, unless its threads are emulated
constexpr std::size_t hidden_max = 1024;
constexpr int vpt = hidden_max / 8 > threads ? static_cast<int>(hidden_max / 8 / threads) : 1;

struct snippet_kernel {
  static constexpr int max_threads_per_block = threads;
  const rcclx::core::peer_table<rcclx::bf16, 8>* tables;
  rcclx::bf16* x[8];
  rcclx::bf16* residuals[8];
  rcclx::bf16* outs[8];
  const rcclx::bf16* weight;
  std::size_t tokens, hidden;
  rcclx::fused::tile_slots slots;

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rcclx::testing::launch_index ix) const {
    const auto& table = tables[ix.rank];
    rcclx::bf16 *residual = residuals[ix.rank], *out = outs[ix.rank];
    const int num_tiles = static_cast<int>(tokens);
    const std::size_t tile_elems = hidden;
    const rcclx::fused::row_tiles map{tokens, hidden};
    auto compute_tile = [&](int t, rcclx::bf16* dst) {  // this rank's row t
      for (std::size_t e = static_cast<std::size_t>(g.thread_rank()); e < hidden; e += static_cast<std::size_t>(g.size()))
        dst[e] = x[ix.rank][static_cast<std::size_t>(t) * hidden + e];
    };
    // From stages.hpp (with this kernel's block size):
    namespace fz = rcclx::fused;
    auto& tmp = rcclx::gpu::block_shared<fz::rms_norm<rcclx::bf16, threads>::storage_type, struct norm_tag>();
    fz::epilogue<fz::residual_add<rcclx::bf16>, fz::rms_norm<rcclx::bf16, threads>, fz::store<rcclx::bf16>> epi{
        {residual, residual, hidden},      // residual += v; v = the new residual (rounded to bf16)
        {weight, 1e-6f, hidden, &tmp},     // v = v / sqrt(mean(v^2) + eps) * weight
        {out, hidden}};                    // out = bf16(v)
    // From tile_allreduce.hpp:
    rcclx::fused::tile_allreduce<rcclx::bf16, 8> ar(table, slots, tile_elems, num_tiles);
    for (int t = ix.block; t < num_tiles; t += ix.num_blocks) {
      compute_tile(t, ar.input(t));            // this rank's contribution, tile_elems elements
      ar.publish(g, t);                        // flag up for the ranks that read it
    }
    for (int t = ix.block; t < num_tiles; t += ix.num_blocks)
      if (!ar.reduce<vpt>(g, t, map, epi)) break;  // waits for every rank's tile t; epi gets the sums
    ar.finish(g, ix.num_blocks);               // every block, once, even after a failure
  }
};

}  // namespace

TEST_CASE("fused header snippets: a hand-built chain equals the ready-made kernel", "[fused][snippets]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = rcclx::bf16;
  const int n = 3;
  const std::size_t tokens = 5, hidden = hidden_max, count = tokens * hidden;
  const rcclx::fused::tile_slots slots{0, static_cast<int>(tokens)};
  rcclx::testing::emulated_world<8> world(
      n, rcclx::fused::allreduce_rmsnorm_workspace_bytes<T>(tokens, hidden, rcclx::algorithm::flat), slots.end());
  std::vector<std::vector<T>> hx(n, std::vector<T>(count));
  std::vector<T> hres(count), hw(hidden, T(1.25f));
  for (int r = 0; r < n; ++r) rcclx_test::fill_random(hx[r], 31 + r);
  rcclx_test::fill_random(hres, 7);
  std::vector<void*> owned;
  auto upload = [&](const std::vector<T>& v) {
    owned.push_back(rcclx::gpu::device_malloc(v.size() * sizeof(T)));
    rcclx::gpu::copy(owned.back(), v.data(), v.size() * sizeof(T));
    return static_cast<T*>(owned.back());
  };
  snippet_kernel k{};
  k.tables = world.device_tables<T>();
  std::vector<rcclx::fused::rmsnorm_args<T>> args(n);
  T* weight = upload(hw);
  for (int r = 0; r < n; ++r) {
    k.x[r] = upload(hx[r]);
    k.residuals[r] = upload(hres);
    k.outs[r] = upload(std::vector<T>(count));
    args[r] = {k.x[r], upload(hres), weight, upload(std::vector<T>(count)), tokens, hidden, 1e-6f};
  }
  k.weight = weight;
  k.tokens = tokens;
  k.hidden = hidden;
  k.slots = slots;
  rcclx::testing::launch_emulated(n, 2, threads, k);
  rcclx::testing::launch_allreduce_rmsnorm<T, T, 8>(world, args.data(), slots, rcclx::algorithm::flat, 2);
  rcclx::gpu::device_synchronize();
  world.throw_if_error();
  for (int r = 0; r < n; ++r) {
    std::vector<T> a(count), b(count), ra(count), rb(count);
    rcclx::gpu::copy(a.data(), k.outs[r], count * sizeof(T));
    rcclx::gpu::copy(b.data(), args[r].output, count * sizeof(T));
    rcclx::gpu::copy(ra.data(), k.residuals[r], count * sizeof(T));
    rcclx::gpu::copy(rb.data(), args[r].residual, count * sizeof(T));
    CAPTURE(r);
    REQUIRE(rcclx_test::bitwise_equal(a, b));
    REQUIRE(rcclx_test::bitwise_equal(ra, rb));
  }
  const auto e = fused_ref::rmsnorm_reference<T>(hx, hres, hw, tokens, hidden, 1e-6);
  std::vector<T> a(count);
  rcclx::gpu::copy(a.data(), k.outs[0], count * sizeof(T));
  std::string first;
  REQUIRE(fused_ref::mismatches(count, [&](std::size_t i) { return fused_ref::exact(a[i]); }, e.out, e.out_tol, first,
                                "output") == 0);
  for (void* p : owned) rcclx::gpu::device_free(p);
}
