// fused::tile_allreduce, the device API, on emulated ranks: producers write tiles of a 2-D output
// (edges sticking out), publish them (one by one, or all at once with publish_strided), and reduce
// them all at the end, one tile behind, or on another block (tile_reducer::any_block, example 04's
// GEMM); an epilogue chain with a user stage, residual_add (not written back) and two stores
// of different types. Against float64; ranks bit-identical; flat == tree; many back-to-back
// calls whose tile shapes change; counter wrap-around; a user row-wide stage; a missing rank;
// reduce_parts (a tile published in parts, summed with the ranks).
#include <rcclx/fused/stages.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/gpu/shared.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../support/bits.hpp"
#include "../support/catch.hpp"
#include "reference.hpp"

namespace {

namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
using rcclx::algorithm;
constexpr int max_r = 8;
constexpr bool on_host = rcclx::current_backend == rcclx::backend::host;
// The host backend's blocks are one thread, unless every thread is emulated (RCCLX_EMULATE_THREADS,
// tests/emulate): then the GPU's block size.
constexpr bool one_thread_blocks = on_host && !rcclx::emulate_threads;
constexpr int threads = one_thread_blocks ? 1 : 256;
#if defined(__SANITIZE_THREAD__)
constexpr bool tsan = true;
#else
constexpr bool tsan = false;
#endif
const bool quick = rcclx_test::quick();

using rcclx_test::mix;
// Rank r's contribution to element e of tile t in call c: uniform in [-1, 1), the same on host and device.
RCCLX_HOST_DEVICE inline float tile_value(int r, std::uint32_t call, std::size_t t, std::size_t e) {
  const std::uint64_t h = mix((static_cast<std::uint64_t>(call) << 40) ^ (t << 20) ^ (e << 4) ^ static_cast<std::uint64_t>(r));
  return static_cast<float>(h >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

// A user stage that uses its position: v = v * a + b + col / 1024.
struct affine {
  float a, b;
  template <int E>
  RCCLX_HOST_DEVICE void operator()(const fz::position& p, float (&v)[E]) const {
    for (int i = 0; i < E; ++i) v[i] = v[i] * a + b + static_cast<float>(p.col + i) * (1.0f / 1024.0f);
  }
};

// The bf16 copy is stored evict-first (cache_hint::streaming): the same bits as a normal store.
template <class T>
using chain_t = fz::epilogue<affine, fz::residual_add<T>, fz::store<T>,
                             fz::store<rcclx::bf16, rcclx::gpu::cache_hint::streaming>>;
constexpr auto streaming = rcclx::gpu::cache_hint::streaming;

// Every block of every rank: produce its tiles, publish, reduce (all at the end, or one behind).
template <class T, algorithm Algo, int VPT>
struct tile_kernel {
  const rcclx::core::peer_table<T, max_r>* tables;
  T* out[max_r];
  rcclx::bf16* out16[max_r];
  const T* residual;  // [rows][cols], shared read-only
  fz::tile_slots slots;
  fz::tile_map map;
  std::uint32_t call;
  int lag;
  bool early_finish;  // finish() right after the constructor instead of at the end

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    const int tiles = static_cast<int>(map.num_tiles());
    fz::tile_allreduce<T, max_r, Algo> ar(tables[ix.rank], slots, map.tile_elems(), tiles,
                                          lag == 4 ? fz::tile_reducer::any_block : fz::tile_reducer::same_block);
    if (early_finish) ar.finish(g, ix.num_blocks);  // the object stays usable for the whole call
    const chain_t<T> epi{{2.0f, 0.5f}, {residual, nullptr, map.cols}, {out[ix.rank], map.cols}, {out16[ix.rank], map.cols}};
    // lag 0: publish each tile, reduce all at the end; 1: reduce one tile behind; 2: write all,
    // publish_strided, reduce all; 3 (example 04's GEMM): write all, publish_strided, one
    // wait_inputs_strided, reduce all with 2 peers' loads in flight; 4: publish each tile, then
    // reduce the tiles of the next block (any_block: the flags of this rank's tiles come from it).
    // Lags 3 and 4 load the peers' tiles evict-first (cache_hint::streaming), as example 04 does.
    bool ok = true;
    int previous = -1;
    for (int t = ix.block; t < tiles; t += ix.num_blocks) {
      T* in = ar.input(t);
      for (std::size_t e = static_cast<std::size_t>(g.thread_rank()); e < map.tile_elems(); e += static_cast<std::size_t>(g.size()))
        in[e] = T(tile_value(ix.rank, call, static_cast<std::size_t>(t), e));
      if (lag == 2 || lag == 3) continue;
      ar.publish(g, t);
      if (lag == 1) {
        if (previous >= 0 && ok) ok = ar.template reduce<VPT>(g, previous, map, epi);
        previous = t;
      }
    }
    if (lag == 2 || lag == 3) ar.publish_strided(g, ix.block, ix.num_blocks);
    if (lag == 3) ok = ar.wait_inputs_strided(g, ix.block, ix.num_blocks);
    if (lag == 1 && previous >= 0 && ok) ok = ar.template reduce<VPT>(g, previous, map, epi);
    for (int t = (ix.block + 1) % ix.num_blocks; lag == 4 && t < tiles && ok; t += ix.num_blocks)
      ok = ar.template reduce<VPT, fz::detail::all_peers, streaming>(g, t, map, epi);
    for (int t = ix.block; t < tiles && lag != 1 && lag != 4 && ok; t += ix.num_blocks)
      ok = lag == 3 ? ar.template reduce<VPT, 2, streaming>(g, t, map, epi) : ar.template reduce<VPT>(g, t, map, epi);
    if (!early_finish) ar.finish(g, ix.num_blocks);
  }
};

template <class T>
struct tile_world {
  int n;
  fz::tile_slots slots;
  rt::emulated_world<max_r> world;
  std::size_t max_out;
  std::vector<T*> out;
  std::vector<rcclx::bf16*> out16;
  T* residual;
  std::vector<T> residual_host;
  std::vector<void*> owned;

  tile_world(int num_ranks, std::size_t max_elems_in_tiles, int max_tiles, std::size_t max_outputs,
             std::uint64_t timeout_ns = rcclx::core::default_timeout_ns)
      : n(num_ranks), slots{5, max_tiles},
        world(num_ranks,
              fz::tile_allreduce<T, max_r, algorithm::tree>::workspace_bytes(max_elems_in_tiles / max_tiles, max_tiles),
              slots.end(), timeout_ns),
        max_out(max_outputs), residual_host(max_outputs) {
    for (int r = 0; r < n; ++r) {
      out.push_back(static_cast<T*>(alloc(max_out * sizeof(T))));
      out16.push_back(static_cast<rcclx::bf16*>(alloc(max_out * 2)));
    }
    residual = static_cast<T*>(alloc(max_out * sizeof(T)));
    rcclx_test::fill_random(residual_host, 4242);
    rcclx::gpu::copy(residual, residual_host.data(), max_out * sizeof(T));
  }
  ~tile_world() {
    for (void* p : owned) rcclx::gpu::device_free(p);
  }
  void* alloc(std::size_t bytes) {
    owned.push_back(rcclx::gpu::device_malloc(bytes));
    return owned.back();
  }
};

struct tile_out {
  std::vector<std::vector<unsigned char>> out, out16;
  bool operator==(const tile_out& o) const { return out == o.out && out16 == o.out16; }
};

template <class T, algorithm Algo, int VPT>
tile_out run_tiles(tile_world<T>& w, const fz::tile_map& map, std::uint32_t call, int lag, int blocks,
                   bool early_finish = false) {
  const std::size_t count = map.rows * map.cols;
  std::vector<unsigned char> poison(count * sizeof(T), 0x5A);
  tile_kernel<T, Algo, VPT> k{};
  k.tables = w.world.template device_tables<T>();
  for (int r = 0; r < w.n; ++r) {
    rcclx::gpu::copy(w.out[r], poison.data(), count * sizeof(T));
    rcclx::gpu::copy(w.out16[r], poison.data(), count * 2);
    k.out[r] = w.out[r];
    k.out16[r] = w.out16[r];
  }
  k.residual = w.residual;
  k.slots = w.slots;
  k.map = map;
  k.call = call;
  k.lag = lag;
  k.early_finish = early_finish;
  rt::launch_emulated(w.n, blocks, threads, k);
  rcclx::gpu::device_synchronize();
  w.world.throw_if_error();
  tile_out o;
  for (int r = 0; r < w.n; ++r) {
    o.out.emplace_back(count * sizeof(T));
    o.out16.emplace_back(count * 2);
    rcclx::gpu::copy(o.out.back().data(), w.out[r], count * sizeof(T));
    rcclx::gpu::copy(o.out16.back().data(), w.out16[r], count * 2);
  }
  return o;
}

// Expected outputs (T and bf16) of a call and their tolerances, in float64.
template <class T>
void check_tiles(const tile_world<T>& w, const fz::tile_map& map, std::uint32_t call, const tile_out& got) {
  const double u = fused_ref::unit<T>(), u32 = fused_ref::u32;
  std::string first;
  std::size_t bad = 0;
  for (std::size_t row = 0; row < map.rows; ++row) {
    for (std::size_t col = 0; col < map.cols; ++col) {
      const std::size_t t = (row / map.tile_rows) * map.tiles_per_row() + col / map.tile_cols;
      const std::size_t e = (row % map.tile_rows) * map.tile_cols + col % map.tile_cols;
      double s = 0, sabs = 0;
      for (int r = 0; r < w.n; ++r) {
        const double v = fused_ref::exact(T(tile_value(r, call, t, e)));
        s += v;
        sabs += std::fabs(v);
      }
      const double es = (w.n - 1) * u32 * sabs + u * std::fabs(s) + fused_ref::tiny<T>();
      const double res = fused_ref::exact(w.residual_host[row * map.cols + col]);
      const double y0 = 2.0 * s + 0.5 + static_cast<double>(col) / 1024.0;  // affine
      const double e0 = 2.0 * es + 3 * u32 * (std::fabs(y0) + 2);
      const double y = y0 + res;  // residual_add: rounded to T, not written back
      const double ey = e0 + (u + u32) * (std::fabs(y) + e0) + fused_ref::tiny<T>();
      const std::size_t k = row * map.cols + col;
      T got_t;
      std::memcpy(&got_t, got.out[0].data() + k * sizeof(T), sizeof(T));
      rcclx::bf16 got_b;
      std::memcpy(&got_b, got.out16[0].data() + k * 2, 2);
      const double tol_t = 2 * ey, tol_b = 2 * (ey + 0x1p-8 * (std::fabs(y) + ey));
      const double gt = fused_ref::exact(got_t), gb = fused_ref::exact(got_b);
      if (!(std::fabs(gt - y) <= tol_t) || !(std::fabs(gb - y) <= tol_b)) {
        if (bad == 0)
          first = "row " + std::to_string(row) + " col " + std::to_string(col) + ": got " + std::to_string(gt) + " / " +
                  std::to_string(gb) + ", expected " + std::to_string(y) + " +- " + std::to_string(tol_t);
        ++bad;
      }
    }
  }
  CAPTURE(first);
  REQUIRE(bad == 0);
  for (int r = 1; r < w.n; ++r) {
    CAPTURE(r);
    REQUIRE(got.out[r] == got.out[0]);
    REQUIRE(got.out16[r] == got.out16[0]);
  }
}

std::vector<fz::tile_map> maps() {
  // Edges sticking out in both directions, a single tile (tree with fewer tiles than ranks), more
  // tiles than blocks, tiles of one vector row.
  return {fz::tile_map{17, 40, 8, 16}, fz::tile_map{5, 24, 4, 8}, fz::tile_map{64, 64, 64, 64},
          fz::tile_map{33, 8, 1, 8}};
}

constexpr std::size_t max_tile_elems = 64 * 64;
constexpr int max_tiles = 40;

}  // namespace

TEMPLATE_TEST_CASE("fused tile_allreduce: flat and tree, all at once and one tile behind, against float64", "[fused]",
                   float, rcclx::bf16) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = TestType;
  const int n = quick ? GENERATE(2, 8) : tsan ? GENERATE(2, 5) : GENERATE(2, 3, 4, 5, 8);
  tile_world<T> w(n, max_tile_elems * max_tiles, max_tiles, 64 * 64);
  std::uint32_t call = 1;
  for (const auto& map : maps()) {
    for (const int lag : {0, 1, 2, 3, 4}) {
      for (const int blocks : on_host ? std::vector<int>{1, 3} : std::vector<int>{1, 7}) {
        CAPTURE(n, map.rows, map.cols, map.tile_rows, map.tile_cols, lag, blocks);
        const tile_out flat = run_tiles<T, algorithm::flat, 1>(w, map, call, lag, blocks);
        check_tiles(w, map, call, flat);
        const tile_out tree = run_tiles<T, algorithm::tree, 1>(w, map, call, lag, blocks);
        check_tiles(w, map, call, tree);
        REQUIRE(tree == flat);
        // More vectors per thread: the same bits.
        REQUIRE(run_tiles<T, algorithm::flat, 4>(w, map, call, lag, blocks) == flat);
        ++call;
      }
    }
  }
}

TEMPLATE_TEST_CASE("fused tile_allreduce: automatic runs flat or tree by the message size, with the same bits", "[fused]",
                   float, rcclx::bf16) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = TestType;
  const int n = GENERATE(2, 5);
  // 64 x 64: one tile of 4096 elements (flat everywhere); 512 x 256 in 32 tiles of 64 x 64: above the
  // table's flat range on the host (tree), and for float at 5 ranks on sm_90 (the CAPTURE says which).
  tile_world<T> w(n, max_tile_elems * max_tiles, max_tiles, 512 * 256);
  std::uint32_t call = 1;
  for (const auto& map : {fz::tile_map{64, 64, 64, 64}, fz::tile_map{512, 256, 64, 64}}) {
    const std::size_t bytes = map.rows * map.cols * sizeof(T);
    CAPTURE(n, map.rows, map.cols, bytes, rcclx::to_string(rcclx::dda::select_algorithm(bytes, n, rcclx::gpu::build_arch)));
    const tile_out a = run_tiles<T, algorithm::automatic, 1>(w, map, call, 1, on_host ? 3 : 7);
    check_tiles(w, map, call, a);
    REQUIRE(run_tiles<T, algorithm::flat, 1>(w, map, call, 1, on_host ? 3 : 7) == a);
    REQUIRE(run_tiles<T, algorithm::tree, 1>(w, map, call, 1, on_host ? 3 : 7) == a);
    ++call;
  }
}

TEST_CASE("fused tile_allreduce: back-to-back calls with changing tile shapes (finish early or at the end)", "[fused]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = rcclx::bf16;
  const int n = on_host ? 4 : 8;
  const int calls = rcclx_test::scaled(tsan ? 40 : (on_host ? 400 : 2000));
  tile_world<T> w(n, max_tile_elems * max_tiles, max_tiles, 64 * 64);
  const auto ms = maps();
  std::mt19937 g(11);
  for (int c = 0; c < calls; ++c) {
    const auto& map = ms[g() % ms.size()];
    const bool tree = g() % 2;
    const int lag = static_cast<int>(g() % 5), blocks = 1 + static_cast<int>(g() % (on_host ? 3 : 8));
    const bool early = g() % 2;  // finish() before or after the call's work: the same protocol
    CAPTURE(c, map.rows, map.cols, tree, lag, blocks, early);
    // The call number is in every value: a stale tile from any earlier call is a wrong result.
    const auto o = tree ? run_tiles<T, algorithm::tree, 1>(w, map, c, lag, blocks, early)
                        : run_tiles<T, algorithm::flat, 1>(w, map, c, lag, blocks, early);
    if (on_host || c % 16 == 0) check_tiles(w, map, c, o);
  }
}

TEST_CASE("fused tile_allreduce: counters wrap around 2^32", "[fused]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = float;
  tile_world<T> w(3, max_tile_elems * max_tiles, max_tiles, 64 * 64);
  w.world.reset(0xFFFFFFFFu - 3u);
  const auto ms = maps();
  for (std::uint32_t c = 0; c < 10; ++c) {
    CAPTURE(c);
    const auto& map = ms[c % ms.size()];
    const auto o = c % 2 ? run_tiles<T, algorithm::tree, 1>(w, map, c, c % 4 == 1 ? 1 : 4, 2)
                         : run_tiles<T, algorithm::flat, 1>(w, map, c, c % 4 == 0 ? 0 : 4, 2);
    check_tiles(w, map, c, o);
  }
}

namespace {
// reduce_parts: every tile t of the map comes in `parts` parts, slots t, t + tiles, ... (example
// 04's split GEMM tiles), each written and published (publish_part) by whichever block has that
// slot; every tile is reduced over the ranks and its parts by another block (any_block) and stored
// (tree: by its owner, the other ranks copying the result).
template <class T, int PeersInFlight, algorithm Algo = algorithm::flat>
struct parts_kernel {
  const rcclx::core::peer_table<T, max_r>* tables;
  T* out[max_r];
  fz::tile_slots slots;
  fz::tile_map map;
  std::uint32_t call;
  int parts;

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    const int tiles = static_cast<int>(map.num_tiles()), slots_used = tiles * parts;
    fz::tile_allreduce<T, max_r, Algo> ar(tables[ix.rank], slots, map.tile_elems(), slots_used,
                                          fz::tile_reducer::any_block);
    for (int v = ix.block; v < slots_used; v += ix.num_blocks) {
      T* in = ar.input(v);
      for (std::size_t e = static_cast<std::size_t>(g.thread_rank()); e < map.tile_elems(); e += static_cast<std::size_t>(g.size()))
        in[e] = T(tile_value(ix.rank, call, static_cast<std::size_t>(v), e));
      ar.publish_part(g, v, v % tiles);
    }
    const fz::epilogue<fz::store<T>> epi{{out[ix.rank], map.cols}};
    bool ok = true;
    for (int t = (ix.block + 1) % ix.num_blocks; t < tiles && ok; t += ix.num_blocks)
      ok = ar.template reduce_parts<1, PeersInFlight>(g, t, parts, tiles, map, epi);
    ar.finish(g, ix.num_blocks);
  }
};

template <class T, int PeersInFlight, algorithm Algo = algorithm::flat>
std::vector<std::vector<unsigned char>> run_parts(tile_world<T>& w, const fz::tile_map& map, std::uint32_t call,
                                                  int parts, int blocks) {
  const std::size_t bytes = map.rows * map.cols * sizeof(T);
  std::vector<unsigned char> poison(bytes, 0x5A);
  parts_kernel<T, PeersInFlight, Algo> k{};
  k.tables = w.world.template device_tables<T>();
  for (int r = 0; r < w.n; ++r) {
    rcclx::gpu::copy(w.out[r], poison.data(), bytes);
    k.out[r] = w.out[r];
  }
  k.slots = w.slots;
  k.map = map;
  k.call = call;
  k.parts = parts;
  rt::launch_emulated(w.n, blocks, threads, k);
  rcclx::gpu::device_synchronize();
  w.world.throw_if_error();
  std::vector<std::vector<unsigned char>> o;
  for (int r = 0; r < w.n; ++r) {
    o.emplace_back(bytes);
    rcclx::gpu::copy(o.back().data(), w.out[r], bytes);
  }
  return o;
}
}  // namespace

TEST_CASE("fused tile_allreduce: reduce_parts sums every rank's parts of a tile (flat and tree), against float64", "[fused]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = rcclx::bf16;
  const int n = quick || tsan ? GENERATE(2, 5) : GENERATE(2, 3, 5, 8);
  tile_world<T> w(n, max_tile_elems * max_tiles, max_tiles, 64 * 64);
  const double u = fused_ref::unit<T>(), u32 = fused_ref::u32;
  std::uint32_t call = 7;
  for (const auto& map : maps()) {
    const int tiles = static_cast<int>(map.num_tiles());
    for (const int parts : {1, 2, 3}) {
      if (tiles * parts > max_tiles) continue;
      const int blocks = on_host ? 3 : 7;
      CAPTURE(n, map.rows, map.cols, map.tile_rows, map.tile_cols, parts);
      const auto got = run_parts<T, 2>(w, map, call, parts, blocks);
      std::size_t bad = 0;
      std::string first;
      for (std::size_t row = 0; row < map.rows; ++row) {
        for (std::size_t col = 0; col < map.cols; ++col) {
          const std::size_t t = (row / map.tile_rows) * map.tiles_per_row() + col / map.tile_cols;
          const std::size_t e = (row % map.tile_rows) * map.tile_cols + col % map.tile_cols;
          double s = 0, sabs = 0;
          for (int q = 0; q < parts; ++q)
            for (int r = 0; r < n; ++r) {
              const double v = fused_ref::exact(T(tile_value(r, call, t + static_cast<std::size_t>(q * tiles), e)));
              s += v;
              sabs += std::fabs(v);
            }
          const double tol = 2 * ((n * parts - 1) * u32 * sabs + u * std::fabs(s)) + fused_ref::tiny<T>();
          T g;
          std::memcpy(&g, got[0].data() + (row * map.cols + col) * sizeof(T), sizeof(T));
          if (!(std::fabs(fused_ref::exact(g) - s) <= tol)) {
            if (bad++ == 0)
              first = "row " + std::to_string(row) + " col " + std::to_string(col) + ": got " +
                      std::to_string(fused_ref::exact(g)) + ", expected " + std::to_string(s) + " +- " + std::to_string(tol);
          }
        }
      }
      CAPTURE(first);
      REQUIRE(bad == 0);
      for (int r = 1; r < n; ++r) REQUIRE(got[r] == got[0]);  // every rank the same bits
      // Every peer's loads at once (the DDA loop for one part): the same sum, the same bits.
      REQUIRE(run_parts<T, fz::detail::all_peers>(w, map, call, parts, blocks) == got);
      // Tree: each tile's owner sums the parts of every rank, the others copy: the same bits.
      REQUIRE(run_parts<T, 2, algorithm::tree>(w, map, call, parts, blocks) == got);
      ++call;
    }
  }
}

namespace fused_test {  // named: nvcc warns about row_wide "never referenced" in an anonymous namespace
// A user row-wide stage: subtract the row's mean (tile = row, the whole row held by the block).
template <int BlockThreads>
struct center_rows {
  static constexpr bool row_wide = true;
#if RCCLX_BACKEND_GPU || RCCLX_EMULATE_THREADS  // a block of BlockThreads threads (a GPU's, or emulated)
  using storage_type = typename rcclx::gpu::block_reduce<float, BlockThreads>::storage_type;
#else
  using storage_type = int;
#endif
  std::size_t cols;
  storage_type* tmp;
  template <int E>
  RCCLX_HOST_DEVICE float row_partial(const fz::position&, const float (&v)[E]) const {
    float s = 0;
    for (int i = 0; i < E; ++i) s += v[i];
    return s;
  }
  template <class G>
  RCCLX_HOST_DEVICE float row_combine(const G& g, float x) const {
    (void)g;
#if RCCLX_BACKEND_GPU || RCCLX_EMULATE_THREADS
    return rcclx::gpu::block_reduce<float, BlockThreads>().sum(x, *tmp);
#else
    return x;
#endif
  }
  template <int E>
  RCCLX_HOST_DEVICE void operator()(const fz::position&, float (&v)[E], float total) const {
    for (int i = 0; i < E; ++i) v[i] -= total / static_cast<float>(cols);
  }
};
}  // namespace fused_test

namespace {

struct centered_kernel {
  static constexpr int max_threads_per_block = threads;
  const rcclx::core::peer_table<float, max_r>* tables;
  float* out[max_r];
  fz::tile_slots slots;
  std::size_t rows, cols;

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    using stage = fused_test::center_rows<threads>;
    auto& tmp = rcclx::gpu::block_shared<typename stage::storage_type, struct center_tag>();
    const fz::row_tiles map{rows, cols};
    fz::tile_allreduce<float, max_r> ar(tables[ix.rank], slots, cols, static_cast<int>(rows));
    const fz::epilogue<stage, fz::store<float>> epi{{cols, &tmp}, {out[ix.rank], cols}};
    constexpr int vpt = one_thread_blocks ? 1024 : 4;  // 4 x 256 threads x 4 floats: rows of up to 4096
    for (int t = ix.block; t < static_cast<int>(rows); t += ix.num_blocks) {
      for (std::size_t e = static_cast<std::size_t>(g.thread_rank()); e < cols; e += static_cast<std::size_t>(g.size()))
        ar.input(t)[e] = tile_value(ix.rank, 0, static_cast<std::size_t>(t), e);
      ar.publish(g, t);
    }
    bool ok = true;
    for (int t = ix.block; t < static_cast<int>(rows) && ok; t += ix.num_blocks)
      ok = ar.template reduce<vpt>(g, t, map, epi);
    ar.finish(g, ix.num_blocks);
  }
};
}  // namespace

TEST_CASE("fused tile_allreduce: a user row-wide stage sees the whole row", "[fused]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const int n = 3;
  const std::size_t rows = 5, cols = 4000;
  const fz::tile_slots slots{0, static_cast<int>(rows)};
  rt::emulated_world<max_r> world(n, fz::tile_allreduce<float, max_r>::workspace_bytes(cols, rows), slots.end());
  centered_kernel k{};
  k.tables = world.device_tables<float>();
  std::vector<void*> outs;
  for (int r = 0; r < n; ++r) {
    outs.push_back(rcclx::gpu::device_malloc(rows * cols * sizeof(float)));
    k.out[r] = static_cast<float*>(outs.back());
  }
  k.slots = slots;
  k.rows = rows;
  k.cols = cols;
  rt::launch_emulated(n, 2, threads, k);
  rcclx::gpu::device_synchronize();
  world.throw_if_error();
  std::vector<float> got(rows * cols);
  rcclx::gpu::copy(got.data(), k.out[n - 1], got.size() * sizeof(float));
  for (void* p : outs) rcclx::gpu::device_free(p);
  for (std::size_t i = 0; i < rows; ++i) {
    std::vector<double> s(cols);
    double mean = 0, mag = 0;
    for (std::size_t j = 0; j < cols; ++j) {
      for (int r = 0; r < n; ++r) s[j] += tile_value(r, 0, i, j);
      mean += s[j] / cols;
      mag += std::fabs(s[j]);
    }
    for (std::size_t j = 0; j < cols; ++j) {
      CAPTURE(i, j);
      REQUIRE(std::fabs(got[i * cols + j] - (s[j] - mean)) <= 1e-6 + (cols + 16) * 0x1p-24 * mag / cols * 4);
    }
  }
}


TEST_CASE("fused tile_allreduce: a rank that never publishes is a timeout error naming it", "[fused]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = float;
  const int n = 5, absent = 3;
  for (const bool tree : {false, true}) {
    CAPTURE(tree);
    tile_world<T> w(n, max_tile_elems * max_tiles, max_tiles, 64 * 64, rcclx_test::absent_timeout_ns);
    const fz::tile_map map{17, 40, 8, 16};
    auto launch = [&](auto k) {
      k.tables = w.world.template device_tables<T>();
      for (int r = 0; r < n; ++r) {
        k.out[r] = w.out[r];
        k.out16[r] = w.out16[r];
      }
      k.residual = w.residual;
      k.slots = w.slots;
      k.map = map;
      k.call = 0;
      k.lag = 0;
      rt::launch_emulated(n, 2, threads, rt::without_rank(k, absent));
      rcclx::gpu::device_synchronize();
    };
    if (tree) launch(tile_kernel<T, algorithm::tree, 1>{});
    else launch(tile_kernel<T, algorithm::flat, 1>{});
    const auto errors = w.world.errors();
    REQUIRE(errors[absent].code == 0);
    REQUIRE(errors[0].code == static_cast<std::uint32_t>(rcclx::errc::timeout));
    REQUIRE(errors[0].kind == static_cast<std::uint32_t>(rcclx::core::barrier_kind::tile));
    REQUIRE(errors[0].missing_rank == static_cast<std::uint32_t>(absent));
    try {
      w.world.throw_if_error();
      FAIL("no error");
    } catch (const rcclx::error& e) {
      REQUIRE(e.code() == rcclx::errc::timeout);
      REQUIRE(std::string(e.what()).find("waiting for rank 3") != std::string::npos);
    }
    w.world.reset();
    check_tiles(w, map, 7, run_tiles<T, algorithm::flat, 1>(w, map, 7, 1, 2));  // usable after reset
  }
}

TEST_CASE("fused tile_allreduce: host-side checks", "[fused]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using ar = fz::tile_allreduce<rcclx::bf16, max_r>;
  rt::emulated_world<max_r> world(2, ar::workspace_bytes(64, 10), 12);
  const auto t = world.table<rcclx::bf16>(0);
  auto code_of = [](auto&& f) {
    try {
      f();
    } catch (const rcclx::error& e) {
      return e.code();
    }
    return rcclx::errc::ok;
  };
  REQUIRE(code_of([&] { ar::check("t", t, {0, 10}, 64, 10); }) == rcclx::errc::ok);
  REQUIRE(code_of([&] { ar::check("t", t, {0, 10}, 60, 10); }) == rcclx::errc::invalid_argument);   // not 8k
  REQUIRE(code_of([&] { ar::check("t", t, {0, 10}, 64, 11); }) == rcclx::errc::invalid_argument);   // > max_tiles
  REQUIRE(code_of([&] { ar::check("t", t, {2, 10}, 64, 10); }) == rcclx::errc::invalid_argument);   // slots > pads
  REQUIRE(code_of([&] { ar::check("t", t, {0, 10}, 128, 10); }) == rcclx::errc::invalid_argument);  // capacity
  try {
    ar::check("t", t, {2, 10}, 64, 10);
  } catch (const rcclx::error& e) {
    REQUIRE(std::string(e.what()).find("max_blocks = 12") != std::string::npos);
  }
}
