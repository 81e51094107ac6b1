// reduce_op::product, avg and premul_sum through dda::allreduce (flat and tree, both table forms) and
// dda::reduce_scatter; dda::broadcast, dda::reduce and dda::barrier (dda/rooted.hpp); one launcher
// call per emulated rank (tests/support/rank_runner.hpp). Each
// output element is checked twice against references computed here without rcclx code: bit for bit
// against the documented fp32 rank-order computation (this file's own float arithmetic and its own
// rounding to bf16 / fp16), and within a float64 tolerance of the exact result. Every rank must hold
// the same bits, flat and tree must agree, and a ReduceScatter's block r is the AllReduce's block r.
#include <rcclx/dda/allgather.hpp>
#include <rcclx/dda/allreduce.hpp>
#include <rcclx/dda/alltoall.hpp>
#include <rcclx/dda/reduce_scatter.hpp>
#include <rcclx/dda/rooted.hpp>
#include <rcclx/testing/emulated_world.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../support/catch.hpp"
#include "../support/rank_runner.hpp"
#include "op_reference.hpp"

namespace op_ext_test {

using rcclx::algorithm;
using rcclx::reduce_op;
using rcclx::reduce_spec;
constexpr int max_r = 8;

using op_ref::check_element;
using op_ref::make_input;
using op_ref::host_vec;

// The device-table launchers are instantiated for float and bf16 only (each form is a kernel of its
// own per type and op: the build time of the GPU test trees).
template <class T>
inline constexpr bool with_device_tables = std::is_same<T, float>::value || std::is_same<T, rcclx::bf16>::value;

template <class T>
struct buffers {
  std::vector<host_vec<T>> host_in;
  std::vector<T*> in, out;
  std::size_t out_count;
  buffers(int n, std::size_t count, std::size_t out_elems, std::uint64_t seed, reduce_op op)
      : host_in(n), in(n), out(n), out_count(out_elems) {
    for (int r = 0; r < n; ++r) {
      host_in[r] = make_input<T>(count, seed + 101 * r, op);
      in[r] = static_cast<T*>(rcclx::gpu::device_malloc(count * sizeof(T) + 16));
      out[r] = static_cast<T*>(rcclx::gpu::device_malloc(out_elems * sizeof(T) + 16));
      rcclx::gpu::copy(in[r], host_in[r].data(), count * sizeof(T));
      std::vector<unsigned char> poison(out_elems * sizeof(T), 0x5A);
      rcclx::gpu::copy(out[r], poison.data(), poison.size());
    }
  }
  ~buffers() {
    for (auto p : in) rcclx::gpu::device_free(p);
    for (auto p : out) rcclx::gpu::device_free(p);
  }
  host_vec<T> result(int r) const {
    host_vec<T> o(out_count);
    rcclx::gpu::copy(o.data(), out[r], out_count * sizeof(T));
    return o;
  }
};

template <class E>
bool same_bits(const std::vector<E>& a, const std::vector<E>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(E)) == 0);
}

// AllReduce of every op of `specs` with flat and tree on n ranks: each rank's output against the
// references, every rank the same bits, flat == tree; then the ReduceScatter against block r.
template <class T>
void sweep(int n, std::size_t count, const std::vector<reduce_spec>& specs) {
  rcclx::testing::emulated_world<max_r> world(n, (count + 64) * sizeof(T), 32);
  rcclx_test::rank_runner runner(n);
  const int blocks = rcclx_test::launcher_blocks_per_rank();
  for (const reduce_spec& spec : specs) {
    CAPTURE(n, count, rcclx::to_string(spec.op), spec.factor, rcclx::core::type_name<T>());
    buffers<T> d(n, count, count, count * 7 + n, spec.op);
    host_vec<T> flat_bits;
    for (const algorithm a : {algorithm::flat, algorithm::tree}) {
      for (const bool device_table : {false, with_device_tables<T>}) {
        CAPTURE(rcclx::to_string(a), device_table);
        runner.run([&](int r, rcclx::gpu::stream_t s) {
          if constexpr (with_device_tables<T>) {
            if (device_table)
              return rcclx::dda::allreduce(world.template device_tables<T>() + r, n, d.in[r], d.out[r], count, spec, a, s,
                                           blocks);
          }
          rcclx::dda::allreduce(world.template table<T>(r), d.in[r], d.out[r], count, spec, a, s, blocks);
        });
        world.throw_if_error();
        const host_vec<T> r0 = d.result(0);
        for (std::size_t i = 0; i < count; ++i) {
          const std::string e = check_element<T>(d.host_in, i, spec, r0[i]);
          if (!e.empty()) FAIL(e);
        }
        for (int r = 1; r < n; ++r) REQUIRE(same_bits(d.result(r), r0));
        if (flat_bits.empty()) flat_bits = r0;
        else REQUIRE(same_bits(r0, flat_bits));
      }
    }
    // ReduceScatter over the first whole multiple of n: block r of rank r is the AllReduce's block r
    // of those elements (the fold of each element is the same).
    const std::size_t rs_count = count / static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
    const std::size_t c = rs_count / static_cast<std::size_t>(n);
    if (c == 0) continue;
    buffers<T> rs(n, rs_count, c, count * 7 + n, spec.op);  // the same inputs (same seeds)
    runner.run([&](int r, rcclx::gpu::stream_t s) {
      rcclx::dda::reduce_scatter(world.template table<T>(r), rs.in[r], rs.out[r], rs_count, spec, s, blocks);
    });
    world.throw_if_error();
    for (int r = 0; r < n; ++r) {
      const host_vec<T> got = rs.result(r);
      for (std::size_t j = 0; j < c; ++j) {
        const std::string e = check_element<T>(rs.host_in, static_cast<std::size_t>(r) * c + j, spec, got[j]);
        if (!e.empty()) FAIL("reduce_scatter rank " + std::to_string(r) + ": " + e);
        REQUIRE(std::memcmp(&got[j], &flat_bits[static_cast<std::size_t>(r) * c + j], sizeof(T)) == 0);
      }
    }
  }
}

const std::vector<reduce_spec> float_specs = {reduce_spec{reduce_op::product}, reduce_spec{reduce_op::avg},
                                              reduce_spec{reduce_op::premul_sum, 0.3f},
                                              reduce_spec{reduce_op::premul_sum, -1.0f / 3.0f}};
const std::vector<reduce_spec> int_specs = {reduce_spec{reduce_op::product}, reduce_spec{reduce_op::avg}};

// Broadcast from each of a few roots and Reduce to them, flat and tree: broadcast bit copies on
// every rank; reduce on the root against the references, other ranks' outputs untouched.
template <class T>
void rooted_sweep(int n, std::size_t count, const std::vector<reduce_spec>& specs) {
  rcclx::testing::emulated_world<max_r> world(n, (count + 64) * sizeof(T), 32);
  rcclx_test::rank_runner runner(n);
  const int blocks = rcclx_test::launcher_blocks_per_rank();
  for (const int root : {0, n - 1, n / 2}) {
    for (const algorithm a : {algorithm::flat, algorithm::tree, algorithm::automatic}) {
      CAPTURE(n, count, root, rcclx::to_string(a), rcclx::core::type_name<T>());
      {
        buffers<T> d(n, count, count, count * 5 + root, reduce_op::sum);
        for (const bool device_table : {false, with_device_tables<T>}) {
          CAPTURE(device_table);
          runner.run([&](int r, rcclx::gpu::stream_t s) {
            const T* in = r == root ? d.in[r] : nullptr;
            if constexpr (with_device_tables<T>) {
              if (device_table)
                return rcclx::dda::broadcast(world.template device_tables<T>() + r, n, in, d.out[r], count, root, a, s,
                                             blocks);
            }
            rcclx::dda::broadcast(world.template table<T>(r), in, d.out[r], count, root, a, s, blocks);
          });
          world.throw_if_error();
          for (int r = 0; r < n; ++r) REQUIRE(same_bits(d.result(r), d.host_in[root]));
        }
        // In place on the root (input == output), the other ranks' outputs receive it.
        runner.run([&](int r, rcclx::gpu::stream_t s) {
          rcclx::dda::broadcast(world.template table<T>(r), r == root ? d.in[r] : nullptr, r == root ? d.in[r] : d.out[r],
                                count, root, a, s, blocks);
        });
        world.throw_if_error();
        for (int r = 0; r < n; ++r) REQUIRE(same_bits(d.result(r), d.host_in[root]));
      }
      for (const reduce_spec& spec : specs) {
        CAPTURE(rcclx::to_string(spec.op), spec.factor);
        buffers<T> d(n, count, count, count * 3 + root, spec.op);
        runner.run([&](int r, rcclx::gpu::stream_t s) {
          rcclx::dda::reduce(world.template table<T>(r), d.in[r], r == root ? d.out[r] : nullptr, count, root, spec, a, s,
                             blocks);
        });
        world.throw_if_error();
        const host_vec<T> got = d.result(root);
        for (std::size_t i = 0; i < count; ++i) {
          const std::string e = check_element<T>(d.host_in, i, spec, got[i]);
          if (!e.empty()) FAIL(e);
        }
        const std::vector<unsigned char> poison(count * sizeof(T), 0x5A);
        for (int r = 0; r < n; ++r) {
          if (r == root) continue;
          const host_vec<T> o = d.result(r);
          REQUIRE(std::memcmp(o.data(), poison.data(), poison.size()) == 0);
        }
      }
    }
  }
}

// AllGather and AlltoAll of T: bit copies on every rank.
template <class T>
void copy_sweep(int n, std::size_t count) {
  rcclx::testing::emulated_world<max_r> world(n, (count * n + 64) * sizeof(T), 32);
  rcclx_test::rank_runner runner(n);
  const int blocks = rcclx_test::launcher_blocks_per_rank();
  CAPTURE(n, count, rcclx::core::type_name<T>());
  const std::size_t nn = static_cast<std::size_t>(n);
  buffers<T> g(n, count, count * nn, count + 3, reduce_op::sum);
  runner.run([&](int r, rcclx::gpu::stream_t s) {
    rcclx::dda::allgather(world.template table<T>(r), g.in[r], g.out[r], count, s, blocks);
  });
  world.throw_if_error();
  host_vec<T> want;
  for (const auto& v : g.host_in) want.insert(want.end(), v.begin(), v.end());
  for (int r = 0; r < n; ++r) REQUIRE(same_bits(g.result(r), want));
  const std::size_t total = count * nn, c = count;
  buffers<T> a(n, total, total, count + 4, reduce_op::sum);
  runner.run([&](int r, rcclx::gpu::stream_t s) {
    rcclx::dda::alltoall(world.template table<T>(r), a.in[r], a.out[r], total, s, blocks);
  });
  world.throw_if_error();
  for (int r = 0; r < n; ++r) {
    host_vec<T> w;
    for (int p = 0; p < n; ++p)
      w.insert(w.end(), a.host_in[p].begin() + static_cast<std::ptrdiff_t>(r * c),
               a.host_in[p].begin() + static_cast<std::ptrdiff_t>((r + 1) * c));
    REQUIRE(same_bits(a.result(r), w));
  }
}

// premul_sum with its factor in device memory (one T): AllReduce flat and tree, ReduceScatter, Reduce
// against the references with the factor's exact value; the host factor is ignored.
template <class T>
void device_factor_sweep(int n, std::size_t count) {
  rcclx::testing::emulated_world<max_r> world(n, (count + 64) * sizeof(T), 32);
  rcclx_test::rank_runner runner(n);
  const int blocks = rcclx_test::launcher_blocks_per_rank();
  const T f = T(-0.3f);
  T* f_dev = static_cast<T*>(rcclx::gpu::device_malloc(16));
  rcclx::gpu::copy(f_dev, &f, sizeof(T));
  const reduce_spec dev{reduce_op::premul_sum, 1e30, f_dev}, ref{reduce_op::premul_sum, rcclx_test::exact(f)};
  CAPTURE(n, count, rcclx::core::type_name<T>());
  buffers<T> d(n, count, count, count + 11, reduce_op::premul_sum);
  for (const algorithm a : {algorithm::flat, algorithm::tree}) {
    runner.run([&](int r, rcclx::gpu::stream_t s) {
      rcclx::dda::allreduce(world.template table<T>(r), d.in[r], d.out[r], count, dev, a, s, blocks);
    });
    world.throw_if_error();
    for (int r = 0; r < n; ++r) {
      const host_vec<T> got = d.result(r);
      for (std::size_t i = 0; i < count; ++i) {
        const std::string e = check_element<T>(d.host_in, i, ref, got[i]);
        if (!e.empty()) FAIL(e);
      }
    }
    runner.run([&](int r, rcclx::gpu::stream_t s) {
      rcclx::dda::reduce(world.template table<T>(r), d.in[r], d.out[r], count, n - 1, dev, a, s, blocks);
    });
    world.throw_if_error();
    const host_vec<T> got = d.result(n - 1);
    for (std::size_t i = 0; i < count; ++i) {
      const std::string e = check_element<T>(d.host_in, i, ref, got[i]);
      if (!e.empty()) FAIL("reduce: " + e);
    }
  }
  const std::size_t c = count / static_cast<std::size_t>(n);
  if (c > 0) {
    runner.run([&](int r, rcclx::gpu::stream_t s) {
      rcclx::dda::reduce_scatter(world.template table<T>(r), d.in[r], d.out[r], c * n, dev, s, blocks);
    });
    world.throw_if_error();
    for (int r = 0; r < n; ++r) {
      const host_vec<T> got = d.result(r);
      for (std::size_t j = 0; j < c; ++j) {
        const std::string e = check_element<T>(d.host_in, static_cast<std::size_t>(r) * c + j, ref, got[j]);
        if (!e.empty()) FAIL("reduce_scatter: " + e);
      }
    }
  }
  rcclx::gpu::device_free(f_dev);
}

}  // namespace op_ext_test

TEST_CASE("dda allreduce / reduce_scatter: product, avg, premul_sum against references, flat and tree",
          "[dda][ops]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  if (!rcclx_test::concurrent_kernels_possible()) {
    WARN("kernels are serialised under compute-sanitizer: per-rank launches cannot meet; skipped");
    return;
  }
  using namespace op_ext_test;
  const int n = GENERATE(2, 3, 5, 8);
  for (const std::size_t count : {std::size_t{1}, std::size_t{37}, std::size_t{4099}}) {
    device_factor_sweep<float>(n, count);
    device_factor_sweep<rcclx::bf16>(n, count);
    sweep<float>(n, count, float_specs);
    sweep<rcclx::bf16>(n, count, float_specs);
    sweep<rcclx::fp16>(n, count, float_specs);
    sweep<std::int32_t>(n, count, int_specs);
  }
}

TEST_CASE("dda allreduce / reduce_scatter: the new ops' invalid uses are named errors", "[dda][ops]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using op_ext_test::max_r;
  using rcclx::reduce_op;
  const int n = 2;
  rcclx::testing::emulated_world<max_r> world(n, 4096, 32);
  std::int32_t* ii = static_cast<std::int32_t*>(rcclx::gpu::device_malloc(64));
  float* f = static_cast<float*>(rcclx::gpu::device_malloc(64));
  float* g = static_cast<float*>(rcclx::gpu::device_malloc(64));
  const auto code_and_text = [](auto fn) -> std::pair<rcclx::errc, std::string> {
    try {
      fn();
    } catch (const rcclx::error& e) {
      return {e.code(), e.what()};
    }
    return {rcclx::errc{}, "no error"};
  };
  auto r = code_and_text([&] {
    rcclx::dda::allreduce(world.table<std::int32_t>(0), ii, ii, 4, rcclx::reduce_spec{reduce_op::premul_sum, 2.0f});
  });
  REQUIRE(r.first == rcclx::errc::unsupported);
  REQUIRE(r.second.find("op = premul_sum is not defined for int32 elements (int32: sum, min, max, product, avg; premul_sum: float, bf16, fp16, float64)") != std::string::npos);
  r = code_and_text([&] {
    rcclx::dda::reduce_scatter(world.table<float>(0), f, g, 4,
                               rcclx::reduce_spec{reduce_op::premul_sum, std::numeric_limits<float>::infinity()});
  });
  REQUIRE(r.first == rcclx::errc::invalid_argument);
  REQUIRE(r.second.find("is not finite") != std::string::npos);
  r = code_and_text([&] {
    rcclx::dda::allreduce(world.table<float>(0), f, world.table<float>(0).data[0], 4, reduce_op::avg,
                          rcclx::algorithm::flat);
  });
  REQUIRE(r.first == rcclx::errc::invalid_argument);
  REQUIRE(r.second.find("use algorithm::tree") != std::string::npos);
  rcclx::gpu::device_free(ii);
  rcclx::gpu::device_free(f);
  rcclx::gpu::device_free(g);
}

TEST_CASE("dda broadcast / reduce / barrier against references, flat and tree, every root kind", "[dda][rooted]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  if (!rcclx_test::concurrent_kernels_possible()) {
    WARN("kernels are serialised under compute-sanitizer: per-rank launches cannot meet; skipped");
    return;
  }
  using namespace op_ext_test;
  const int n = GENERATE(2, 3, 5, 8);
  const std::vector<reduce_spec> f_specs = {reduce_spec{reduce_op::sum}, reduce_spec{reduce_op::max},
                                            reduce_spec{reduce_op::avg}, reduce_spec{reduce_op::premul_sum, 0.7f}};
  const std::vector<reduce_spec> i_specs = {reduce_spec{reduce_op::sum}, reduce_spec{reduce_op::min},
                                            reduce_spec{reduce_op::product}};
  for (const std::size_t count : {std::size_t{1}, std::size_t{37}, std::size_t{4099}}) {
    rooted_sweep<float>(n, count, f_specs);
    rooted_sweep<rcclx::bf16>(n, count, {reduce_spec{reduce_op::sum}, reduce_spec{reduce_op::avg}});
    rooted_sweep<std::int32_t>(n, count, i_specs);
  }
  // The barrier: repeated, with one and several blocks.
  rcclx::testing::emulated_world<max_r> world(n, 1024, 32);
  rcclx_test::rank_runner runner(n);
  runner.run([&](int r, rcclx::gpu::stream_t s) {
    for (int k = 0; k < 20; ++k) rcclx::dda::barrier(world.table<float>(r), s, 1 + k % 3);
  });
  world.throw_if_error();
}

TEST_CASE("dda broadcast / reduce: bad roots and algorithms are named errors", "[dda][rooted]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using op_ext_test::max_r;
  using rcclx::reduce_op;
  const int n = 3;
  rcclx::testing::emulated_world<max_r> world(n, 4096, 32);
  float* f = static_cast<float*>(rcclx::gpu::device_malloc(64));
  float* g = static_cast<float*>(rcclx::gpu::device_malloc(64));
  const auto what = [](auto fn) -> std::pair<rcclx::errc, std::string> {
    try {
      fn();
    } catch (const rcclx::error& e) {
      return {e.code(), e.what()};
    }
    return {rcclx::errc{}, "no error"};
  };
  auto r = what([&] { rcclx::dda::broadcast(world.table<float>(0), f, g, 4, 3); });
  REQUIRE(r.first == rcclx::errc::invalid_argument);
  REQUIRE(r.second.find("root = 3 is outside [0, 3)") != std::string::npos);
  r = what([&] { rcclx::dda::reduce(world.table<float>(1), f, g, 4, -1); });
  REQUIRE(r.second.find("root = -1 is outside [0, 3)") != std::string::npos);
  r = what([&] { rcclx::dda::reduce(world.table<float>(1), f, g, 4, 0, reduce_op::sum, rcclx::algorithm::low_precision); });
  REQUIRE(r.first == rcclx::errc::unsupported);
  r = what([&] { rcclx::dda::broadcast(world.table<float>(0), f, static_cast<float*>(nullptr), 4, 0); });
  REQUIRE(r.second.find("output must not be null") != std::string::npos);
  r = what([&] { rcclx::dda::reduce(world.table<float>(0), f, static_cast<float*>(nullptr), 4, 0); });
  REQUIRE(r.second.find("output must not be null") != std::string::npos);
  r = what([&] { rcclx::dda::reduce(world.table<float>(0), f, f + 1, 4, 0); });
  REQUIRE(r.second.find("overlap partially") != std::string::npos);
  rcclx::gpu::device_free(f);
  rcclx::gpu::device_free(g);
}

TEST_CASE("dda collectives of int8, uint8, int64, float64 and bool: copies and the ops each takes",
          "[dda][dtypes]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  if (!rcclx_test::concurrent_kernels_possible()) {
    WARN("kernels are serialised under compute-sanitizer: per-rank launches cannot meet; skipped");
    return;
  }
  using namespace op_ext_test;
  const int n = GENERATE(2, 3, 5, 8);
  const std::vector<reduce_spec> small_int = {reduce_spec{reduce_op::sum}, reduce_spec{reduce_op::min},
                                              reduce_spec{reduce_op::max}, reduce_spec{reduce_op::product}};
  const std::vector<reduce_spec> int64_specs = {reduce_spec{reduce_op::sum}, reduce_spec{reduce_op::max},
                                                reduce_spec{reduce_op::product}, reduce_spec{reduce_op::avg}};
  const std::vector<reduce_spec> f64_specs = {reduce_spec{reduce_op::sum}, reduce_spec{reduce_op::min},
                                              reduce_spec{reduce_op::product}, reduce_spec{reduce_op::avg},
                                              reduce_spec{reduce_op::premul_sum, 0.1}};
  for (const std::size_t count : {std::size_t{1}, std::size_t{37}, std::size_t{4099}}) {
    sweep<std::int8_t>(n, count, small_int);
    sweep<std::uint8_t>(n, count, small_int);
    sweep<bool>(n, count, small_int);
    sweep<std::int64_t>(n, count, int64_specs);
    sweep<double>(n, count, f64_specs);
    rooted_sweep<std::int8_t>(n, count, {reduce_spec{reduce_op::sum}});
    rooted_sweep<bool>(n, count, {reduce_spec{reduce_op::product}, reduce_spec{reduce_op::max}});
    rooted_sweep<double>(n, count, {reduce_spec{reduce_op::avg}});
    copy_sweep<std::int8_t>(n, count);
    copy_sweep<bool>(n, count);
    copy_sweep<std::int64_t>(n, count);
    copy_sweep<double>(n, count);
  }
}

TEST_CASE("dda: ops an element type does not take are named errors", "[dda][dtypes]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using op_ext_test::max_r;
  using rcclx::reduce_op;
  rcclx::testing::emulated_world<max_r> world(2, 4096, 32);
  auto* b = static_cast<bool*>(rcclx::gpu::device_malloc(64));
  auto* i8 = static_cast<std::int8_t*>(rcclx::gpu::device_malloc(64));
  auto* i64 = static_cast<std::int64_t*>(rcclx::gpu::device_malloc(64));
  const auto what = [](auto fn) -> std::pair<rcclx::errc, std::string> {
    try {
      fn();
    } catch (const rcclx::error& e) {
      return {e.code(), e.what()};
    }
    return {rcclx::errc{}, "no error"};
  };
  auto r = what([&] { rcclx::dda::allreduce(world.table<bool>(0), b, b, 16, reduce_op::avg); });
  REQUIRE(r.first == rcclx::errc::unsupported);
  REQUIRE(r.second.find("op = avg is not defined for bool elements (bool: sum (or), min (and), max (or), product (and)") !=
          std::string::npos);
  r = what([&] { rcclx::dda::reduce_scatter(world.table<std::int8_t>(0), i8, i8 + 32, 32, reduce_op::avg); });
  REQUIRE(r.second.find("op = avg is not defined for int8 elements") != std::string::npos);
  r = what([&] { rcclx::dda::reduce(world.table<std::int64_t>(0), i64, i64, 4, 0, rcclx::reduce_spec{reduce_op::premul_sum, 2.0}); });
  REQUIRE(r.second.find("op = premul_sum is not defined for int64 elements") != std::string::npos);
  r = what([&] {
    rcclx::dda::allreduce(world.table<std::int64_t>(0), i64, i64, 4, rcclx::reduce_spec{reduce_op::sum, 1.0, i64 + 5});
  });
  REQUIRE(r.second.find("a device factor (reduce_spec::factor_device) is for premul_sum, not sum") != std::string::npos);
  rcclx::gpu::device_free(b);
  rcclx::gpu::device_free(i8);
  rcclx::gpu::device_free(i64);
}

#if RCCLX_CHECKS
TEST_CASE("dda broadcast / reduce, checked mode: ranks that name different roots fail with a mismatch naming the root",
          "[dda][rooted][checks]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  if (!rcclx_test::concurrent_kernels_possible()) return;
  using op_ext_test::max_r;
  const int n = 3;
  rcclx::testing::emulated_world<max_r> world(n, 4096, 32);
  std::vector<float*> in(n), out(n);
  for (int r = 0; r < n; ++r) {
    in[r] = static_cast<float*>(rcclx::gpu::device_malloc(256));
    out[r] = static_cast<float*>(rcclx::gpu::device_malloc(256));
  }
  rcclx_test::rank_runner runner(n);
  std::string what;
  try {
    runner.run([&](int r, rcclx::gpu::stream_t s) {
      rcclx::dda::broadcast(world.table<float>(r), in[r], out[r], 64, r == 2 ? 1 : 0, rcclx::algorithm::flat, s, 1);
    });
    world.throw_if_error();
  } catch (const rcclx::error& e) {
    what = e.what();
  }
  CAPTURE(what);
  REQUIRE(what.find("mismatch") != std::string::npos);
  REQUIRE(what.find("called Broadcast with different root: rank 0 passed 0, rank 2 passed 1") != std::string::npos);
  for (int r = 0; r < n; ++r) {
    rcclx::gpu::device_free(in[r]);
    rcclx::gpu::device_free(out[r]);
  }
}
#endif
