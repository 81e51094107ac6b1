// tests/lpc/common.hpp: inputs, calls and checks shared by the LPC tests (emulated ranks).
#pragma once

#include <rcclx/testing/emulated_peers.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../support/catch.hpp"
#include "reference.hpp"

namespace lpc_test {

namespace lpc = rcclx::lpc;
using rcclx::algorithm;
using rcclx::reduce_op;

// MaxRanks of the emulated peers: 8 (every test up to 8 ranks; smaller kernels and builds), 16 where
// a test needs more ranks (peers_t<T, 16>).
constexpr int max_r = 8;
template <class T, int MaxR = max_r>
using peers_t = rcclx::testing::emulated_peers<T, MaxR>;

#if defined(__SANITIZE_THREAD__)
constexpr bool tsan = true;
#else
constexpr bool tsan = false;
#endif
// ThreadSanitizer (host) and compute-sanitizer (GPU, RCCLX_TEST_QUICK=1) runs are much slower: a
// smaller matrix, the same kinds of cases.
inline const bool small_matrix = tsan || rcclx_test::quick();

inline constexpr lpc::collective all_collectives[] = {lpc::collective::allreduce, lpc::collective::allgather,
                                                      lpc::collective::reduce_scatter, lpc::collective::alltoall};

template <class Config>
quant_model model_of() {
  return {info<typename Config::format>(), Config::scale == rcclx::fp8::scale_kind::e8m0, Config::block_size};
}

// Input values of three kinds:
//   0: uniform in [-1, 1)
//   1: wide range: random sign, magnitude 2^U(-40, 40), some zeros (blocks with tiny and huge values)
//   2: extreme: zeros, float denormals, 1e-30, ordinary values, 1e30, and values up to 3e38 / N
//      (far beyond every FP8 range; their sum over N ranks stays finite), mixed within blocks
template <class T>
T value_of(std::mt19937_64& g, int kind, int num_ranks) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double sign = (g() & 1) ? -1.0 : 1.0;
  double x = 0;
  if (kind == 0) {
    x = 2.0 * u(g) - 1.0;
  } else if (kind == 1) {
    x = (g() % 16 == 0) ? 0.0 : sign * std::ldexp(1.0 + u(g), static_cast<int>(g() % 81) - 40);
  } else {
    switch (g() % 7) {
      case 0: x = 0.0; break;
      case 1: x = sign * 1e-40 * (1.0 + u(g)); break;
      case 2: x = sign * 1e-30 * (1.0 + u(g)); break;
      case 3: x = sign * u(g); break;
      case 4: x = sign * 1e30 * (1.0 + u(g)); break;
      default: x = sign * 3e38 / num_ranks * (0.5 + 0.5 * u(g)); break;
    }
  }
  return T(static_cast<float>(x));
}

template <class T, int MaxR>
void fill_all(peers_t<T, MaxR>& peers, int kind, std::uint64_t salt) {
  for (int r = 0; r < peers.num_ranks(); ++r) {
    std::mt19937_64 g(salt * 1000003u + static_cast<std::uint64_t>(r) * 7919u + peers.count() * 31u +
                      static_cast<std::uint64_t>(kind));
    for (auto& x : peers.input(r)) x = value_of<T>(g, kind, peers.num_ranks());
  }
}

template <class T, int MaxR>
std::vector<std::vector<T>> inputs_of(const peers_t<T, MaxR>& peers) {
  std::vector<std::vector<T>> in;
  for (int r = 0; r < peers.num_ranks(); ++r) in.push_back(peers.input(r));
  return in;
}

template <class Config, class T, int MaxR>
void run_lpc(peers_t<T, MaxR>& peers, lpc::collective c, reduce_op op) {
  switch (c) {
    // The algorithm fixed at compile time: only the LPC kernels of Config are compiled.
    case lpc::collective::allreduce: peers.template allreduce<algorithm::low_precision, Config>(op); break;
    case lpc::collective::allgather: peers.template allgather<algorithm::low_precision, Config>(); break;
    case lpc::collective::reduce_scatter: peers.template reduce_scatter<algorithm::low_precision, Config>(op); break;
    case lpc::collective::alltoall: peers.template alltoall<algorithm::low_precision, Config>(); break;
  }
  REQUIRE(peers.last_algorithm() == algorithm::low_precision);
}

// Every rank's output against the model; AllReduce and AllGather outputs bit-identical everywhere.
template <class T, int MaxR>
void check_lpc(const peers_t<T, MaxR>& peers, lpc::collective c, reduce_op op, const quant_model& m,
               double* worst = nullptr) {
  const auto in = inputs_of(peers);
  const int n = peers.num_ranks();
  if (c == lpc::collective::allreduce || c == lpc::collective::allgather) {
    const auto want = c == lpc::collective::allreduce ? allreduce(in, m, op) : allgather(in, m);
    const std::string first = first_violation(peers.output(0), want, worst);
    CAPTURE(first);
    REQUIRE(first.empty());
    for (int r = 1; r < n; ++r) {
      CAPTURE(r);
      REQUIRE(rcclx_test::bitwise_equal(peers.output(r), peers.output(0)));
    }
    return;
  }
  for (int r = 0; r < n; ++r) {
    const auto want = c == lpc::collective::reduce_scatter ? reduce_scatter(in, r, m, op) : alltoall(in, r, m);
    const std::string first = first_violation(peers.output(r), want, worst);
    CAPTURE(r, first);
    REQUIRE(first.empty());
  }
}

}  // namespace lpc_test
