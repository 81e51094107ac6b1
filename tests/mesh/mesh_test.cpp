// Mesh schedules: coverage (every (peer, chunk) pair of each collective exactly once per rank) and
// load balance (rotating / xor_pairs never read one rank twice in a step), for N in [1, 16],
// checked by brute-force enumeration independent of the schedules' own property functions.
#include <rcclx/mesh/schedule.hpp>

#include <set>
#include <utility>
#include <vector>

#include "../support/catch.hpp"

namespace {

enum class coll { reduce_scatter, all_gather, all_to_all };

template <class S>
rcclx::mesh::step at(coll c, int r, int s, int n) {
  switch (c) {
    case coll::reduce_scatter: return rcclx::mesh::reduce_scatter<S>(r, s, n);
    case coll::all_gather: return rcclx::mesh::all_gather<S>(r, s, n);
    default: return rcclx::mesh::all_to_all<S>(r, s, n);
  }
}

// What each collective needs rank r to read, as a set of (peer, chunk) pairs.
std::set<std::pair<int, int>> required(coll c, int r, int n) {
  std::set<std::pair<int, int>> need;
  for (int p = 0; p < n; ++p) {
    if (c == coll::all_gather) need.insert({p, p});  // chunk p lives on its owner p
    else need.insert({p, r});                        // RS: chunk r from all; A2A: block r from all
  }
  return need;
}

template <class S>
void check_schedule(bool balanced) {
  for (int n = 1; n <= 16; ++n) {
    if (!S::supports(n)) continue;
    CAPTURE(n);
    for (coll c : {coll::reduce_scatter, coll::all_gather, coll::all_to_all}) {
      for (int r = 0; r < n; ++r) {
        std::multiset<std::pair<int, int>> got;
        for (int s = 0; s < n; ++s) {
          const auto st = at<S>(c, r, s, n);
          got.insert({st.peer, st.chunk});
        }
        const auto need = required(c, r, n);
        REQUIRE(got.size() == need.size());
        REQUIRE(std::set<std::pair<int, int>>(got.begin(), got.end()) == need);  // exactly once
      }
      if (balanced) {
        for (int s = 0; s < n; ++s) {
          std::set<int> peers;
          for (int r = 0; r < n; ++r) peers.insert(at<S>(c, r, s, n).peer);
          REQUIRE(static_cast<int>(peers.size()) == n);  // every rank read by exactly one rank
        }
      }
    }
    REQUIRE(rcclx::mesh::visits_every_peer_once<S>(n));
    REQUIRE(rcclx::mesh::is_permutation_at_every_step<S>(n) == (balanced || n == 1));  // one rank: trivially
  }
}

}  // namespace

TEST_CASE("mesh: rotating covers every chunk once and balances every step", "[mesh]") {
  check_schedule<rcclx::mesh::rotating>(true);
  for (int n = 1; n <= 16; ++n)
    for (int r = 0; r < n; ++r) REQUIRE(rcclx::mesh::starts_at_self<rcclx::mesh::rotating>(r, n));
}

TEST_CASE("mesh: xor_pairs covers every chunk once, a matching at every step", "[mesh]") {
  check_schedule<rcclx::mesh::xor_pairs>(true);
  for (int n : {2, 4, 8, 16})
    for (int r = 0; r < n; ++r)
      for (int s = 0; s < n; ++s) {
        const int p = rcclx::mesh::xor_pairs::peer(r, s, n);
        REQUIRE(rcclx::mesh::xor_pairs::peer(p, s, n) == r);  // r reads p while p reads r
      }
  REQUIRE_FALSE(rcclx::mesh::xor_pairs::supports(6));
}

TEST_CASE("mesh: linear covers every chunk once but is a hot spot", "[mesh]") {
  check_schedule<rcclx::mesh::linear>(false);
}

TEST_CASE("mesh: schedules are usable in constant expressions", "[mesh]") {
  constexpr auto st = rcclx::mesh::all_gather<>(3, 2, 8);
  static_assert(st.peer == 5 && st.chunk == 5, "rotating: rank 3, step 2 -> peer 5");
  STATIC_REQUIRE(rcclx::mesh::reduce_scatter<rcclx::mesh::xor_pairs>(5, 3, 8).peer == 6);
}
