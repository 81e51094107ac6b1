// rcclx/mesh/schedule.hpp: which peer and which chunk each rank touches at each step of a
// direct-access collective over a fully connected mesh (MI300X: 7 xGMI links per GPU; NVLink).
//
//   using S = rcclx::mesh::rotating;                       // the default
//   for (int s = 0; s < n; ++s) {
//     auto st = S::reduce_scatter(rank, s, n);            // read chunk st.chunk from rank st.peer
//   }
//   static_assert(rcclx::mesh::is_permutation_at_every_step<S>(8));
//
// A collective on N ranks is N steps (step 0 is the rank itself, a local access). At each step a
// rank reads one chunk from one peer; "chunk" indexes the count/N partition of the message.
//
//   rotating (default): step s reads from peer (r + s) mod N. At every step the N reads form a
//   permutation of the ranks: every rank is read by exactly one other rank, so every link carries
//   one chunk per step in each direction and no GPU is a hot spot.
//
//        step:   0     1     2     3            (N = 4; entry = peer read by rank r)
//     rank 0:    0     1     2     3
//     rank 1:    1     2     3     0
//     rank 2:    2     3     0     1
//     rank 3:    3     0     1     2
//
//   linear: step s reads from peer s. Every rank reads the same peer at the same time: all N-1
//   readers hit one GPU's links while the others idle (the hot spot of a naive loop). Kept as
//   a baseline for benchmarks and to test that collectives are correct under any schedule.
//
//   xor_pairs (N a power of two): step s reads from peer r xor s. Every step is a perfect matching
//   (r reads p while p reads r), which suits bidirectional links; same coverage as rotating.
//
// Per collective (chunk c of rank p's buffer, S = message bytes, N ranks):
//   reduce_scatter: rank r reads chunk r from every peer           -> (N-1)/N * S read per rank
//   all_gather:     rank r reads chunk p from its owner p          -> (N-1)/N * S read per rank
//   all_to_all:     rank r reads block r of peer p's send buffer   -> (N-1)/N * S read per rank
// Every schedule must visit each (peer, chunk) pair of a collective exactly once per rank; the
// tests check that for all N in [1, 16] and every schedule.
//
// Users: the gathers of dda::flat_allgather / flat_alltoall and of every lpc collective visit
// peers in schedule order, skipping the step whose peer is the rank itself (step 0 for rotating
// and xor_pairs, step r for linear). Reductions (reduce-scatter phases) load all N ranks at once
// and combine them in rank order, so no result depends on the schedule (tested bit for bit).
#pragma once

#include "../config.hpp"

RCCLX_NAMESPACE_BEGIN
namespace mesh {

// One access: read `chunk` of rank `peer`'s buffer.
struct step {
  int peer;
  int chunk;
};

// Peer order policies. Each provides `static constexpr int peer(int rank, int s, int n)`.
struct rotating {
  RCCLX_HOST_DEVICE static constexpr int peer(int rank, int s, int n) { return (rank + s) % n; }
  RCCLX_HOST_DEVICE static constexpr bool supports(int n) { return n >= 1; }
};

struct linear {
  RCCLX_HOST_DEVICE static constexpr int peer(int, int s, int) { return s; }
  RCCLX_HOST_DEVICE static constexpr bool supports(int n) { return n >= 1; }
};

struct xor_pairs {
  RCCLX_HOST_DEVICE static constexpr int peer(int rank, int s, int) { return rank ^ s; }
  RCCLX_HOST_DEVICE static constexpr bool supports(int n) { return n >= 1 && (n & (n - 1)) == 0; }
};

using default_schedule = rotating;

// The step-s access of rank `rank` in each collective, under schedule S.
template <class S = default_schedule>
RCCLX_HOST_DEVICE constexpr step reduce_scatter(int rank, int s, int n) {
  return step{S::peer(rank, s, n), rank};
}
template <class S = default_schedule>
RCCLX_HOST_DEVICE constexpr step all_gather(int rank, int s, int n) {
  const int p = S::peer(rank, s, n);
  return step{p, p};
}
template <class S = default_schedule>
RCCLX_HOST_DEVICE constexpr step all_to_all(int rank, int s, int n) {
  return step{S::peer(rank, s, n), rank};
}

// ---- properties (constexpr, used by static_asserts and tests) -----------------------------------

// Step 0 is the local access (rotating, xor_pairs), so implementations can treat it as a plain
// load of their own buffer.
template <class S>
constexpr bool starts_at_self(int r, int n) {
  return S::peer(r, 0, n) == r;
}

namespace detail {
// Is every row of S's n x n table of peers (indexed [rank][step], or [step][rank] when by_step) a
// permutation of 0..n-1?
template <class S>
constexpr bool rows_are_permutations(int n, bool by_step) {
  if (!S::supports(n)) return false;
  for (int a = 0; a < n; ++a) {
    unsigned seen = 0;
    for (int b = 0; b < n; ++b) {
      const int p = by_step ? S::peer(b, a, n) : S::peer(a, b, n);
      if (p < 0 || p >= n || (seen >> p & 1u)) return false;
      seen |= 1u << p;
    }
  }
  return true;
}
}  // namespace detail

// Every rank visits every peer exactly once over the N steps.
template <class S>
constexpr bool visits_every_peer_once(int n) {
  return detail::rows_are_permutations<S>(n, false);
}

// At every step the peers read by ranks 0..N-1 are all different (no rank is read twice).
template <class S>
constexpr bool is_permutation_at_every_step(int n) {
  return detail::rows_are_permutations<S>(n, true);
}

static_assert(is_permutation_at_every_step<rotating>(8), "rotating spreads the load at every step");
static_assert(is_permutation_at_every_step<xor_pairs>(8), "xor_pairs is a matching at every step");
static_assert(!is_permutation_at_every_step<linear>(8), "linear is the hot-spot baseline");

}  // namespace mesh
RCCLX_NAMESPACE_END
