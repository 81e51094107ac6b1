// The four low-precision collectives on emulated ranks, for every FP8 format and both element types,
// ranks 2..8, counts with tails (not multiples of the block size, of 16 or of N): every element
// within the documented bound of a float64 reference (tests/lpc/reference.hpp, independent of the
// code under test), NaN nowhere, AllReduce and AllGather outputs bit-identical on every rank, and
// every output element written (outputs are poisoned before each call). The same source runs on the
// host backend (a rank's block is a std::thread) and on a GPU (all ranks in one launch).
#include <rcclx/testing/emulated_peers.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../support/catch.hpp"
#include "common.hpp"

namespace {

using namespace lpc_test;

template <class T, class F>
struct case_ {
  using type = T;
  using format = F;
};

// Counts: tails of every kind; fewer under ThreadSanitizer and compute-sanitizer.
std::vector<std::size_t> any_counts(int n) {
  std::mt19937_64 g(static_cast<std::uint64_t>(n) * 977u);
  std::vector<std::size_t> c{1, 5, 33, 4099};
  if (!small_matrix) {
    c.push_back(16);
    c.push_back(static_cast<std::size_t>(32 * n + 3));
    c.push_back(1 + g() % 20000);
  }
  return c;
}
std::vector<std::size_t> divisible_counts(int n) {
  std::mt19937_64 g(static_cast<std::uint64_t>(n) * 1291u);
  const std::size_t nn = static_cast<std::size_t>(n);
  std::vector<std::size_t> c{nn, 33 * nn, 250 * nn};
  if (!small_matrix) {
    c.push_back(7 * nn);
    c.push_back(32 * nn);
    c.push_back((1 + g() % 2500) * nn);
  }
  return c;
}

std::vector<int> rank_counts() {
  if (rcclx_test::quick()) return {2, 8};
  if (small_matrix) return {2, 3, 8};
  return {2, 3, 4, 5, 6, 7, 8};
}

}  // namespace

TEMPLATE_TEST_CASE("lpc: every collective, format and element type, ranks 2..8, tails, within the bound", "[lpc]",
                   (case_<float, rcclx::fp8::e4m3>), (case_<float, rcclx::fp8::e5m2>),
                   (case_<float, rcclx::fp8::e4m3_fnuz>), (case_<float, rcclx::fp8::e5m2_fnuz>),
                   (case_<rcclx::bf16, rcclx::fp8::e4m3>), (case_<rcclx::bf16, rcclx::fp8::e5m2>),
                   (case_<rcclx::bf16, rcclx::fp8::e4m3_fnuz>), (case_<rcclx::bf16, rcclx::fp8::e5m2_fnuz>)) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = typename TestType::type;
  using C = rcclx::lpc::config<typename TestType::format>;
  const quant_model m = model_of<C>();
  for (const int n : rank_counts()) {
    for (const lpc::collective c : all_collectives) {
      const bool divisible = c == lpc::collective::reduce_scatter || c == lpc::collective::alltoall;
      int kind = n % 3;
      for (const std::size_t count : divisible ? divisible_counts(n) : any_counts(n)) {
        kind = (kind + 1) % 3;  // uniform, wide range, extreme values: each in turn
        CAPTURE(n, lpc::to_string(c), count, kind, m.f.name, rcclx::core::type_name<T>());
        peers_t<T> peers(n, count);
        fill_all(peers, kind, 17);
        run_lpc<C>(peers, c, reduce_op::sum);
        check_lpc(peers, c, reduce_op::sum, m);
      }
    }
  }
}

TEST_CASE("lpc: large messages, several tiles and blocks per rank", "[lpc][large]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  // GPU: 8 ranks x 2^20 elements is 128 tiles of 512 x 16 elements per chunk; the host backend has
  // one quantization block per tile, so far fewer elements give many tiles per block there.
  const std::size_t count = small_matrix ? (std::size_t{1} << 16) + 37
                            : rcclx::current_backend == rcclx::backend::host ? (std::size_t{1} << 18) + 37
                                                                            : (std::size_t{1} << 20) + 37;
  const int n = 8;
  for (const lpc::collective c : all_collectives) {
    const std::size_t cnt = c == lpc::collective::reduce_scatter || c == lpc::collective::alltoall
                                ? count / n * n
                                : count;
    CAPTURE(lpc::to_string(c), cnt);
    SECTION(std::string("float ") + lpc::to_string(c)) {
      peers_t<float> peers(n, cnt);
      fill_all(peers, 1, 3);
      run_lpc<rcclx::lpc::default_config>(peers, c, reduce_op::sum);
      check_lpc(peers, c, reduce_op::sum, model_of<rcclx::lpc::default_config>());
    }
    SECTION(std::string("bf16 ") + lpc::to_string(c)) {
      peers_t<rcclx::bf16> peers(n, cnt);
      fill_all(peers, 0, 4);
      run_lpc<rcclx::lpc::default_config>(peers, c, reduce_op::sum);
      check_lpc(peers, c, reduce_op::sum, model_of<rcclx::lpc::default_config>());
    }
  }
}
