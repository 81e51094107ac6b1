// Checked mode: a tile AllReduce whose epilogue has a bad stage argument refuses before any output
// (tile_allreduce asks fused::epilogue::check, fused/stage_check.hpp): FP8 scale 0, -1, NaN, inf;
// ld < cols; a misaligned output; rms_norm::cols = the padded row; eps < 0. Each is recorded as
// invalid_argument with its misuse, both values and the stage (index | stage_id << 8), the outputs
// keep their sentinel, and a correct call after reset() computes.
#include <rcclx/fused/stages.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/gpu/shared.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "../support/catch.hpp"

namespace rows_refusal {

namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
using bf = rcclx::bf16;
constexpr int max_r = 8;
constexpr bool on_host = rcclx::current_backend == rcclx::backend::host;
constexpr int threads = on_host ? 1 : 256;
constexpr std::size_t rows = 4, cols = 64;

struct bad_args {
  float* scale;        // device
  std::size_t out_ld;  // the store's ld
  std::size_t out_offset;
  std::size_t norm_cols;
  float eps;
};

// residual_add -> rms_norm -> store (bf16) -> fp8_out (e4m3).
struct refusal_kernel {
  static constexpr int max_threads_per_block = threads;
  const rcclx::core::peer_table<bf, max_r>* tables;
  bf* out[max_r];
  std::uint8_t* codes[max_r];
  const bf* residual;
  const bf* weight;
  fz::tile_slots slots;
  bad_args b;

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    using norm_t = fz::rms_norm<bf, threads>;
    auto& tmp = rcclx::gpu::block_shared<typename norm_t::storage_type, struct refusal_tag>();
    const fz::row_tiles map{rows, cols};
    fz::tile_allreduce<bf, max_r> ar(tables[ix.rank], slots, cols, static_cast<int>(rows));
    const fz::epilogue<fz::residual_add<bf>, norm_t, fz::store<bf>, fz::fp8_out<rcclx::fp8::e4m3>> epi{
        {residual, nullptr, cols}, {weight, b.eps, b.norm_cols, &tmp}, {out[ix.rank] + b.out_offset, b.out_ld},
        {codes[ix.rank], cols, b.scale}};
    for (int t = ix.block; t < static_cast<int>(rows); t += ix.num_blocks) {
      for (std::size_t e = static_cast<std::size_t>(g.thread_rank()); e < cols; e += static_cast<std::size_t>(g.size()))
        ar.input(t)[e] = bf(0.25f * static_cast<float>((e + t + ix.rank) % 7) - 0.5f);
      ar.publish(g, t);
    }
    bool ok = true;
    for (int t = ix.block; t < static_cast<int>(rows) && ok; t += ix.num_blocks) ok = ar.template reduce<on_host ? 8 : 1>(g, t, map, epi);
    ar.finish(g, ix.num_blocks);
  }
};

}  // namespace rows_refusal

namespace {

using namespace rows_refusal;

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

struct refusal_world {
  int n = 2;
  fz::tile_slots slots{0, static_cast<int>(rows)};
  rt::emulated_world<max_r> world;
  std::vector<void*> owned;
  refusal_kernel k{};
  std::vector<unsigned char> sentinel = std::vector<unsigned char>((rows + 1) * cols * 2 * sizeof(bf), 0x5A);

  refusal_world()
      : world(2, fz::tile_allreduce<bf, max_r>::workspace_bytes(cols, static_cast<int>(rows)), static_cast<int>(rows) + 1,
              rcclx_test::absent_timeout_ns) {
    k.tables = world.device_tables<bf>();
    for (int r = 0; r < n; ++r) {
      k.out[r] = static_cast<bf*>(alloc(sentinel.size()));
      k.codes[r] = static_cast<std::uint8_t*>(alloc(sentinel.size()));
    }
    std::vector<bf> res(rows * cols, bf(0.125f)), w(cols, bf(1.0f));
    k.residual = static_cast<bf*>(alloc(res.size() * 2));
    k.weight = static_cast<bf*>(alloc(w.size() * 2));
    rcclx::gpu::copy(const_cast<bf*>(k.residual), res.data(), res.size() * 2);
    rcclx::gpu::copy(const_cast<bf*>(k.weight), w.data(), w.size() * 2);
    k.b.scale = static_cast<float*>(alloc(4));
    k.slots = slots;
  }
  ~refusal_world() {
    for (void* p : owned) rcclx::gpu::device_free(p);
  }
  void* alloc(std::size_t bytes) {
    owned.push_back(rcclx::gpu::device_malloc(bytes));
    return owned.back();
  }
  // Launches with b; returns rank 0's record (code 0: none), the outputs checked against the sentinel.
  rcclx::core::error_record run(bad_args b, float scale, bool outputs_untouched) {
    rcclx::gpu::copy(k.b.scale, &scale, 4);
    b.scale = k.b.scale;
    k.b = b;
    for (int r = 0; r < n; ++r) {
      rcclx::gpu::copy(k.out[r], sentinel.data(), sentinel.size());
      rcclx::gpu::copy(k.codes[r], sentinel.data(), sentinel.size());
    }
    try {
      rt::launch_emulated(n, 2, threads, k);
      rcclx::gpu::device_synchronize();
    } catch (const rcclx::error&) {
    }
    const auto e = world.errors();
    for (int r = 0; r < n && outputs_untouched; ++r) {
      std::vector<unsigned char> o(sentinel.size()), c(sentinel.size());
      rcclx::gpu::copy(o.data(), k.out[r], o.size());
      rcclx::gpu::copy(c.data(), k.codes[r], c.size());
      REQUIRE(o == sentinel);
      REQUIRE(c == sentinel);
    }
    world.reset();
    return e[0];
  }
};

bad_args good() { return bad_args{nullptr, cols, 0, cols, 1e-6f}; }

void expect(const rcclx::core::error_record& e, rcclx::core::misuse what, std::uint32_t a, std::uint32_t b,
            std::uint32_t stage) {
  CAPTURE(e.code, e.kind, e.observed, e.reserved, e.call);
  REQUIRE(e.code == static_cast<std::uint32_t>(rcclx::errc::invalid_argument));
  REQUIRE(e.kind == static_cast<std::uint32_t>(what));
  REQUIRE(e.observed == a);
  REQUIRE(e.reserved == b);
  REQUIRE(e.call == stage);
}

}  // namespace

TEST_CASE("checked stages: bad stage arguments are refused before any output", "[rows][checks]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using rcclx::core::misuse;
  refusal_world w;
  for (float s : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    CAPTURE(s);
    expect(w.run(good(), s, true), misuse::stage_scale, bits(s), 0, 3u | 3u << 8);
  }
  bad_args b = good();
  b.out_ld = cols - 8;
  expect(w.run(b, 1.0f, true), misuse::stage_ld_short, static_cast<std::uint32_t>(cols - 8), cols, 2u | 6u << 8);
  b = good();
  b.out_offset = 1;  // 2 bytes past a 16-byte boundary
  const auto e = w.run(b, 1.0f, true);
  expect(e, misuse::stage_misaligned, e.observed, 16, 2u | 6u << 8);
  REQUIRE(e.observed % 16 == 2);
  b = good();
  b.norm_cols = 72;  // the padded row
  expect(w.run(b, 1.0f, true), misuse::stage_cols, 72, cols, 1u | 2u << 8);
  b = good();
  b.eps = -1.0f;
  expect(w.run(b, 1.0f, true), misuse::stage_eps, bits(-1.0f), 0, 1u | 2u << 8);
  // After reset(): a correct call computes (the outputs change).
  REQUIRE(w.run(good(), 1.0f, false).code == 0);
  std::vector<unsigned char> o(w.sentinel.size());
  rcclx::gpu::copy(o.data(), w.k.out[0], o.size());
  REQUIRE(o != w.sentinel);
}
