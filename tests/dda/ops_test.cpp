// Op functors, value_traits and algorithm selection (host code: the same on every backend).
#include <rcclx/core/ops.hpp>
#include <rcclx/dda/allreduce.hpp>
#include <rcclx/dda/select.hpp>
#include <rcclx/kernel/layout.hpp>
#include <rcclx/lpc/detail/launch.hpp>
#include <rcclx/testing/emulated_launch_config.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <utility>

#include "../support/catch.hpp"
#include "reference.hpp"

using rcclx::algorithm;
using rcclx::gpu::arch;

// ---- compile-time selection: usable in constant expressions ----------------------------------
static_assert(rcclx::dda::select_algorithm_v<rcclx::bf16, 8, 4096> == algorithm::flat, "8 KiB at 8 ranks: flat");
static_assert(rcclx::dda::select_algorithm_v<rcclx::bf16, 8, 100 * 1024, arch::gfx942> == algorithm::flat, "200 KiB: flat");
static_assert(rcclx::dda::select_algorithm_v<rcclx::bf16, 8, 100 * 1024 + 1, arch::gfx942> == algorithm::tree,
              "> 200 KiB: tree");
static_assert(rcclx::dda::select_algorithm_v<float, 2, 128 * 1024, arch::gfx942> == algorithm::flat,
              "512 KiB at 2 ranks: flat");
static_assert(rcclx::dda::resolve_algorithm_v<float, 8, 1 << 20, algorithm::flat> == algorithm::flat &&
                  rcclx::dda::resolve_algorithm_v<float, 8, 1 << 24, algorithm::automatic, arch::gfx942> ==
                      algorithm::tree,
              "resolve_algorithm_v: an explicit algorithm stays, automatic takes the table's choice");
#if RCCLX_BACKEND_HOST
static_assert(rcclx::gpu::build_arch == arch::host, "the host backend's build architecture");
#elif RCCLX_BACKEND_CUDA
static_assert(rcclx::gpu::build_arch == arch::sm_80 || rcclx::gpu::build_arch == arch::sm_90 ||
                  rcclx::gpu::build_arch == arch::sm_100,
              "a CUDA build's architecture comes from its targets");
#endif
static_assert(rcclx::dda::select_algorithm_v<float, 8, 1 << 20, arch::sm_90> == algorithm::tree, "4 MiB: tree");
static_assert(rcclx::dda::select_algorithm(300 * 1024, 8, arch::sm_90) == algorithm::tree, "sm_90 8 ranks: 256 KiB");
static_assert(rcclx::dda::select_algorithm(300 * 1024, 4, arch::sm_90) == algorithm::flat, "sm_90 4 ranks: 512 KiB");
static_assert(rcclx::dda::select_algorithm(8u << 20, 2, arch::sm_90) == algorithm::flat &&
                  rcclx::dda::select_algorithm((8u << 20) + 1, 2, arch::sm_90) == algorithm::tree &&
                  rcclx::dda::select_algorithm(1u << 20, 2, arch::sm_80) == algorithm::tree,
              "sm_90 2 ranks: flat up to 8 MiB (measured on two H200s); other NVLink archs keep 512 KiB");
static_assert(rcclx::dda::default_thresholds(arch::gfx942, 8).tree_max_bytes == 29u * 1024 * 1024, "RCCLX default");
static_assert(rcclx::dda::num_blocks_for<float>(0, algorithm::flat, 8) == 1, "at least one block");
static_assert(rcclx::dda::num_blocks_for<float>(std::size_t{1} << 30, algorithm::tree, 8) ==
                  rcclx::dda::default_max_blocks,
              "capped");

TEST_CASE("ops: sum, min and max on accumulators", "[dda][ops]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  rcclx::core::op_sum sum;
  rcclx::core::op_min mn;
  rcclx::core::op_max mx;
  REQUIRE(sum(1.5f, 2.25f) == 3.75f);
  REQUIRE(mn(1.0f, -2.0f) == -2.0f);
  REQUIRE(mx(1.0f, -2.0f) == 1.0f);
  // NaN propagates from either side (unlike fminf / fmaxf).
  REQUIRE(std::isnan(mn(nan, 1.0f)));
  REQUIRE(std::isnan(mn(1.0f, nan)));
  REQUIRE(std::isnan(mx(nan, 1.0f)));
  REQUIRE(std::isnan(mx(1.0f, nan)));
  // Ties keep the lower rank's value: the sign of zero is the first operand's.
  REQUIRE(std::signbit(mn(-0.0f, 0.0f)));
  REQUIRE(!std::signbit(mn(0.0f, -0.0f)));
  REQUIRE(std::signbit(mx(-0.0f, 0.0f)));
  // int32 sums wrap modulo 2^32; min/max are plain.
  REQUIRE(sum(std::int32_t{2147483647}, std::int32_t{1}) == std::numeric_limits<std::int32_t>::min());
  REQUIRE(mn(std::int32_t{-5}, std::int32_t{3}) == -5);
  REQUIRE(mx(std::int32_t{-5}, std::int32_t{3}) == 3);
  REQUIRE(std::string(rcclx::to_string(rcclx::reduce_op::max)) == "max");
  REQUIRE(std::string(rcclx::to_string(algorithm::tree)) == "tree");
  REQUIRE(!rcclx::is_valid(static_cast<rcclx::reduce_op>(6)));
  REQUIRE(rcclx::is_valid(rcclx::reduce_op::premul_sum));
  REQUIRE(!rcclx::is_basic(rcclx::reduce_op::avg));
  REQUIRE(rcclx::core::with_op(rcclx::reduce_op::min, [](auto op) { return decltype(op)::value; }) ==
          rcclx::reduce_op::min);
}

TEMPLATE_TEST_CASE("value_traits: vector unpack/pack agree with the scalar load/store and the exact value", "[dda][ops]",
                   rcclx::bf16, rcclx::fp16) {
  using T = TestType;
  using tr = rcclx::core::value_traits<T>;
  static_assert(rcclx::core::is_reducible_v<T>, "");
  static_assert(rcclx::core::is_reducible_v<double> && !rcclx::core::is_reducible_v<std::uint16_t>, "");
  // Every 16-bit pattern, eight per vector: widening is exact, narrowing of the widened value
  // returns the same pattern (NaN stays NaN).
  for (std::uint32_t base = 0; base < 65536; base += 8) {
    T x[8];
    for (int i = 0; i < 8; ++i) x[i] = T::from_bits(static_cast<std::uint16_t>(base + i));
    rcclx::gpu::vec16 v;
    std::memcpy(&v, x, 16);
    float a[8];
    tr::unpack(v, a);
    for (int i = 0; i < 8; ++i) {
      const double e = rcclx_test::exact(x[i]);
      if (std::isnan(e)) {
        REQUIRE(std::isnan(a[i]));
        continue;
      }
      REQUIRE(static_cast<double>(a[i]) == e);
      REQUIRE(tr::load(x[i]) == a[i]);
    }
    const rcclx::gpu::vec16 back = tr::pack(a);
    T y[8];
    std::memcpy(y, &back, 16);
    for (int i = 0; i < 8; ++i) {
      if (std::isnan(a[i])) continue;
      REQUIRE(y[i].bits == x[i].bits);
      REQUIRE(tr::store(a[i]).bits == x[i].bits);
    }
  }
}

namespace {
struct env_guard {  // sets variables for one test, restores them after
  std::vector<std::pair<std::string, std::string>> saved;
  std::vector<std::string> unset_after;
  void set(const char* name, const char* value) {
    if (const char* old = std::getenv(name)) saved.emplace_back(name, old);
    else unset_after.emplace_back(name);
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~env_guard() {
    for (auto& s : saved) setenv(s.first.c_str(), s.second.c_str(), 1);
    for (auto& n : unset_after) unsetenv(n.c_str());
  }
};
}  // namespace

TEST_CASE("select: run-time table and environment overrides", "[dda][select]") {
  env_guard env;
  for (const char* v : {"RCCLX_DDA_FLAT_MAX_BYTES", "RCCLX_DDA_TREE_MAX_BYTES", "RCCL_DDA_ALL_REDUCE_FLAT_MAX_BYTES",
                        "RCCL_DDA_ALL_REDUCE_TREE_MAX_BYTES"})
    env.set(v, nullptr);
  const arch a = arch::gfx942;
  REQUIRE(rcclx::dda::tuned_thresholds(8, a).flat_max_bytes == 200 * 1024);
  env.set("RCCL_DDA_ALL_REDUCE_FLAT_MAX_BYTES", "4096");  // RCCLX's name
  REQUIRE(rcclx::dda::tuned_thresholds(8, a).flat_max_bytes == 4096);
  env.set("RCCLX_DDA_FLAT_MAX_BYTES", "64K");  // ours wins
  REQUIRE(rcclx::dda::tuned_thresholds(8, a).flat_max_bytes == 64 * 1024);
  env.set("RCCLX_DDA_TREE_MAX_BYTES", "2M");
  REQUIRE(rcclx::dda::tuned_thresholds(8, a).tree_max_bytes == 2 * 1024 * 1024);
  REQUIRE(rcclx::dda::select_algorithm(64 * 1024, 8) == algorithm::flat);
  REQUIRE(rcclx::dda::select_algorithm(64 * 1024 + 1, 8) == algorithm::tree);
  REQUIRE(rcclx::dda::prefers_external_library(3 * 1024 * 1024, 8));
  REQUIRE(!rcclx::dda::prefers_external_library(1024 * 1024, 8));
  REQUIRE(rcclx::dda::resolve_algorithm<float>(algorithm::automatic, 16 * 1024, 8) == algorithm::flat);
  REQUIRE(rcclx::dda::resolve_algorithm<float>(algorithm::automatic, 16 * 1024 + 1, 8) == algorithm::tree);
  REQUIRE(rcclx::dda::resolve_algorithm<float>(algorithm::flat, 1 << 30, 8) == algorithm::flat);
  env.set("RCCLX_DDA_FLAT_MAX_BYTES", "12x");
  try {
    (void)rcclx::dda::tuned_thresholds(8, a);
    FAIL("no error");
  } catch (const rcclx::error& e) {
    REQUIRE(e.code() == rcclx::errc::invalid_argument);
    REQUIRE(std::string(e.what()).find("RCCLX_DDA_FLAT_MAX_BYTES = '12x'") != std::string::npos);
  }
  env.set("RCCLX_DDA_FLAT_MAX_BYTES", "99999999999999999999999");
  REQUIRE_THROWS_AS(rcclx::dda::tuned_thresholds(8, a), rcclx::error);
  env.set("RCCLX_DDA_FLAT_MAX_BYTES", "");
  REQUIRE_THROWS_AS(rcclx::dda::tuned_thresholds(8, a), rcclx::error);
}

namespace {
// The compile-time choice (select_algorithm_v: this build's architecture, no environment) against
// the run-time choice (select_algorithm: the device's architecture and the environment, here unset)
// for every size in Sizes at NumRanks ranks.
template <class T, int NumRanks, std::size_t... Sizes>
void check_compile_time_choice(std::index_sequence<Sizes...>) {
  constexpr std::size_t base[] = {1, 64, 1000, 4096, 16384, 32768, 65536, 100000, 131072, 262144, 1 << 20, 4 << 20,
                                  8 << 20, 16 << 20, 64 << 20};
  const algorithm compiled[] = {rcclx::dda::select_algorithm_v<T, NumRanks, base[Sizes]>...};
  const std::size_t sizes[] = {base[Sizes]...};
  for (std::size_t i = 0; i < sizeof...(Sizes); ++i) {
    const std::size_t count = sizes[i];
    CAPTURE(NumRanks, count, sizeof(T));
    REQUIRE(compiled[i] == rcclx::dda::select_algorithm(count * sizeof(T), NumRanks));
    REQUIRE(rcclx::dda::resolve_algorithm<T>(algorithm::automatic, count, NumRanks) == compiled[i]);
  }
}
}  // namespace

TEST_CASE("select: the compile-time choice is the run-time choice on this build's architecture", "[dda][select]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  if (rcclx::gpu::current_arch() != rcclx::gpu::build_arch) {
    WARN("this device (" << rcclx::gpu::to_string(rcclx::gpu::current_arch()) << ") is not the build's architecture ("
                         << rcclx::gpu::to_string(rcclx::gpu::build_arch) << "): nothing to compare");
    return;
  }
  env_guard env;
  for (const char* v : {"RCCLX_DDA_FLAT_MAX_BYTES", "RCCLX_DDA_TREE_MAX_BYTES", "RCCL_DDA_ALL_REDUCE_FLAT_MAX_BYTES",
                        "RCCL_DDA_ALL_REDUCE_TREE_MAX_BYTES"})
    env.set(v, nullptr);
  using seq = std::make_index_sequence<15>;
  check_compile_time_choice<float, 2>(seq{});
  check_compile_time_choice<float, 3>(seq{});
  check_compile_time_choice<float, 4>(seq{});
  check_compile_time_choice<float, 8>(seq{});
  check_compile_time_choice<float, 16>(seq{});
  check_compile_time_choice<rcclx::bf16, 2>(seq{});
  check_compile_time_choice<rcclx::bf16, 5>(seq{});
  check_compile_time_choice<rcclx::bf16, 8>(seq{});
}

TEST_CASE("select: tables are monotonic and consistent", "[dda][select]") {
  for (const arch a : {arch::gfx90a, arch::gfx942, arch::gfx950, arch::sm_80, arch::sm_90, arch::sm_100, arch::host,
                       arch::unknown}) {
    std::size_t prev_flat = ~std::size_t{0};
    for (int n = 2; n <= 16; ++n) {
      CAPTURE(rcclx::gpu::to_string(a), n);
      const auto t = rcclx::dda::default_thresholds(a, n);
      REQUIRE(t.flat_max_bytes <= t.tree_max_bytes);
      REQUIRE(t.flat_max_bytes <= prev_flat);  // more ranks: flat's N-fold reads cost more
      prev_flat = t.flat_max_bytes;
    }
  }
  REQUIRE(rcclx::gpu::arch_from_gfx_name("gfx942:sramecc+:xnack-") == arch::gfx942);
  REQUIRE(rcclx::gpu::arch_from_gfx_name("gfx90a") == arch::gfx90a);
  REQUIRE(rcclx::gpu::arch_from_gfx_name("gfx950") == arch::gfx950);
  REQUIRE(rcclx::gpu::arch_from_gfx_name("gfx1100") == arch::unknown);
  REQUIRE(rcclx::gpu::arch_from_compute_capability(9, 0) == arch::sm_90);
}

TEST_CASE("num_blocks_for: deterministic, within the caps, every tile covered", "[dda][select]") {
  const auto cfg = rcclx::dda::default_launch_config(0, algorithm::tree);
  std::mt19937_64 g(3);
  for (int i = 0; i < 2000; ++i) {
    const std::size_t count = g() % (std::size_t{1} << (g() % 34));
    for (const int n : {2, 8, 16}) {
      const int f = rcclx::dda::num_blocks_for<rcclx::bf16>(count, algorithm::flat, n);
      const int t = rcclx::dda::num_blocks_for<rcclx::bf16>(count, algorithm::tree, n);
      REQUIRE(f >= 1);
      REQUIRE(f <= cfg.flat_max_blocks);
      REQUIRE(t >= 1);
      REQUIRE(t <= cfg.tree_max_blocks);
      REQUIRE(f == rcclx::dda::num_blocks_for<rcclx::bf16>(count, algorithm::flat, n));
    }
  }
}

TEST_CASE("launch defaults: a process per GPU in the library, the emulated shape in testing", "[dda][select]") {
  namespace dda = rcclx::dda;
  constexpr bool gpu = rcclx::current_backend != rcclx::backend::host;
  // The AllReduce on a GPU of its own (docs/performance.md): flat 128 threads up to 128 KiB, 256
  // above; tree 512; up to 128 blocks, never more than the pads hold (the same on every rank).
  REQUIRE(dda::default_launch_config(128 << 10, algorithm::flat).threads == (gpu ? 128 : 1));
  REQUIRE(dda::default_launch_config((128 << 10) + 1, algorithm::flat).threads == (gpu ? 256 : 1));
  REQUIRE(dda::default_launch_config(8, algorithm::tree).threads == (gpu ? 512 : 1));
  REQUIRE(dda::default_launch_config(8, algorithm::flat).flat_max_blocks == (gpu ? 128 : 4));
  REQUIRE(dda::default_launch_config(8, algorithm::flat, 32).flat_max_blocks == (gpu ? 32 : 4));
  REQUIRE(dda::default_launch_config(8, algorithm::tree, 2).tree_max_blocks == 2);
  REQUIRE(rcclx::lpc::default_launch_config(rcclx::lpc::collective::allreduce).max_blocks == (gpu ? 128 : 4));
  REQUIRE(rcclx::lpc::default_launch_config(rcclx::lpc::collective::allgather).max_blocks == (gpu ? 32 : 4));
  // The one-shot collectives keep their shape; emulated ranks keep theirs, in testing/.
  REQUIRE(dda::one_shot_launch_config().threads == (gpu ? 512 : 1));
  REQUIRE(dda::one_shot_launch_config().flat_max_blocks == (gpu ? 32 : 4));
  constexpr auto e = rcclx::testing::emulated_launch_config();
  REQUIRE(e.threads == (gpu ? 512 : 1));
  REQUIRE(e.flat_max_blocks == (gpu ? 32 : 4));
  REQUIRE(e.tree_max_blocks == (gpu ? 32 : 4));
  REQUIRE(rcclx::testing::emulated_lpc_launch_config().max_blocks == (gpu ? 32 : 4));
  // Threads per block: 0 or a multiple of 32 up to the kernels' bound, checked on every backend.
  REQUIRE_NOTHROW(dda::check_threads("t", 0));
  REQUIRE_NOTHROW(dda::check_threads("t", 512));
  REQUIRE_THROWS_AS(dda::check_threads("t", 544), rcclx::error);
  REQUIRE_THROWS_AS(dda::check_threads("t", 1024), rcclx::error);
  REQUIRE_THROWS_AS(dda::check_threads("t", 48), rcclx::error);
  REQUIRE(dda::launch_config_for("t", 8, algorithm::flat, 128, 256).threads == (gpu ? 256 : 1));
}

TEST_CASE("tiles: every element is owned by exactly one block, the same for any count", "[dda][ops]") {
  // Independent model of the partition: element i -> vector i/E -> tile (i/E)/G -> block tile % nb.
  for (const int g_size : {1, 4, 64}) {
    for (const int nb : {1, 3, 8}) {
      for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{1001},
                                      std::size_t{4096 + 5}}) {
        CAPTURE(g_size, nb, count);
        std::vector<int> owner(count, -1);
        for (int b = 0; b < nb; ++b) {
          const rcclx::kernel::layout<float> l(count, g_size, b, nb);
          for (int tid = 0; tid < g_size; ++tid) {
            auto mark = [&](std::size_t v, int elems) {
              for (int e = 0; e < elems; ++e) {
                const std::size_t i = v * 4 + static_cast<std::size_t>(e);
                REQUIRE(i < count);
                REQUIRE(owner[i] == -1);
                owner[i] = b;
              }
            };
            rcclx::kernel::for_each_owned<3>(
                l, tid, rcclx::kernel::tile_range{0, l.tiles},
                [&](const std::size_t(&vi)[3], const bool(&ok)[3]) {
                  for (int j = 0; j < 3; ++j)
                    if (ok[j]) mark(vi[j], 4);
                },
                [&](std::size_t v) { mark(v, l.partial_elems()); });
          }
        }
        for (std::size_t i = 0; i < count; ++i) {
          CAPTURE(i);
          REQUIRE(owner[i] == static_cast<int>(((i / 4) / static_cast<std::size_t>(g_size)) % static_cast<std::size_t>(nb)));
        }
      }
    }
  }
}
