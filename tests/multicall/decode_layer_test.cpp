// Several collectives in one kernel: example 09's decode layer (the attention merge, o_proj's
// AllReduce + residual + RMSNorm and down_proj's AllReduce + residual, one region each of one
// plan) on 2, 3, 5 and 8 emulated ranks, bf16 and float, every call flat, tree or automatic (and a
// mix), hidden 64 and 1001 (a ragged row), three launches back to back (each call alternating its
// buffer halves): every element within the float64 bound of the whole layer, every rank the same
// bits, and every choice of algorithms the same bits.
#include <vector>

#include "../support/catch.hpp"
#include "decode_runs.hpp"

TEST_CASE("decode layer: three collectives in one kernel against float64, ranks and algorithms bit-identical",
          "[multicall]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using multicall_test::algos;
  for (int n : {2, 3, 5, 8})
    for (bool bf16 : {true, false})
      for (std::size_t hidden : {std::size_t{64}, std::size_t{1001}}) {
        std::vector<std::uint32_t> first;
        for (algos a : {algos::flat, algos::tree, algos::automatic, algos::mixed}) {
          const auto r = multicall_test::run_layer(n, bf16, a, hidden, 3);
          INFO(n << " ranks, " << (bf16 ? "bf16" : "float") << ", hidden " << hidden << ", "
                 << multicall_test::name(a) << ": " << r.error << " max |error| " << r.max_err);
          REQUIRE(r.error.empty());
          CHECK(r.checked > 0);
          CHECK(r.out_of_bound == 0);
          CHECK(r.rank_differ == 0);
          if (first.empty()) first = r.bits;
          REQUIRE(r.bits.size() == first.size());
          std::size_t differ = 0;  // flat, tree, automatic and the mix: the same bits
          for (std::size_t i = 0; i < first.size(); ++i) differ += r.bits[i] != first[i];
          CHECK(differ == 0);
        }
      }
}

TEST_CASE("AllReduce + RMSNorm block and a tile AllReduce in one kernel, one region each", "[multicall]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  for (int n : {2, 3, 8})
    for (bool tree : {false, true}) {
      const auto r = multicall_test::run_rmsnorm_and_tile(n, tree, 2);
      INFO(n << " ranks, " << (tree ? "tree" : "flat") << ": " << r.error);
      REQUIRE(r.error.empty());
      CHECK(r.checked > 0);
      CHECK(r.out_of_bound == 0);
      CHECK(r.tile_wrong == 0);
      CHECK(r.rank_differ == 0);
    }
}
