// rcclx/fused/merge_entries.hpp: the selection merge of ranks' sorted lists (topk): where each
// entry of each list lands in the merged result, by counting, with no sort. What
// fused::combine::reduce_entries runs per record, for an unfused merge that wants its bits.
//
//   // `list(s)`: rank s's record (any memory); a Combine with entries, entry, load_entry, before:
//   const int place = rcclx::fused::place_among<topk, 8>(op, e, r, p, n, list);    // one entry
//   rcclx::fused::merge_entries<topk, 8>(g, op, n, storage, list, sink);           // a group, staged
//
// The order is (entry, rank, position): a tie between ranks keeps the lower rank's entry first, as
// a rank-order merge does (topk::merge). Lists must be sorted by Combine::before (ties in any
// order); Combine::key (optional) is the order as one unsigned integer (fused/combine.hpp lists the
// members a selection declares).
#pragma once

#include <type_traits>
#include <utility>

#include "../config.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {

// The place in a selection combine's result of entry `e`, entry p of rank r's list, among the
// lists of ranks 0..n-1 (`list(s)`: rank s's record, in any memory): p plus, for every other rank
// s, the entries of s's list that come before e in the order (entry, rank, position) (rank s < r:
// the entries before or tied with e; s > r: those strictly before). Places are distinct, and the
// first Combine::entries of them are those of the merged result. What reduce_entries runs, for an
// unfused merge that wants the same bits. A sorted list of K entries is searched in two rounds of
// loads: the last entry of every 8 (which 8 holds the boundary), then those 8; the lists of up to
// 4 ranks at a time, all their loads in flight together. Stops counting at Combine::entries.
template <class Combine, int MaxRanks, class Lists>
RCCLX_HOST_DEVICE int place_among(const Combine& op, const typename Combine::entry& e, int r, int p, int n,
                                  const Lists& list) {
  using entry = typename Combine::entry;
  constexpr int k = Combine::entries, span = 8, buckets = (k + span - 1) / span;
  constexpr int batch = MaxRanks < 4 ? MaxRanks : 4;
  static_assert(k >= 1, "rcclx::fused::place_among: Combine::entries must be positive");
  int place = p;
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
  for (int s0 = 0; s0 < MaxRanks; s0 += batch) {
    if (s0 >= n || place >= k) break;
    const auto precedes = [&](const entry& x, int s) { return s < r ? !Combine::before(e, x) : Combine::before(x, e); };
    int whole[batch];  // buckets of rank s0 + b entirely before e
    {
      entry last[batch][buckets];
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
      for (int b = 0; b < batch; ++b)
        if (s0 + b < n && s0 + b != r)
          for (int c = 0; c < buckets; ++c)
            last[b][c] = op.load_entry(list(s0 + b), c * span + span - 1 < k ? c * span + span - 1 : k - 1);
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
      for (int b = 0; b < batch; ++b) {
        whole[b] = 0;
        if (s0 + b < n && s0 + b != r)
          for (int c = 0; c < buckets; ++c) whole[b] += precedes(last[b][c], s0 + b);
      }
    }
    entry in[batch][span];
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
    for (int b = 0; b < batch; ++b)
      if (s0 + b < n && s0 + b != r && whole[b] < buckets)
        for (int q = 0; q < span; ++q)
          if (whole[b] * span + q < k) in[b][q] = op.load_entry(list(s0 + b), whole[b] * span + q);
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
    for (int b = 0; b < batch; ++b) {
      if (s0 + b >= n || s0 + b == r) continue;
      if (whole[b] == buckets) {
        place += k;
        continue;
      }
      int count = whole[b] * span;
      for (int q = 0; q < span; ++q) count += whole[b] * span + q < k && precedes(in[b][q], s0 + b);
      place += count;
    }
  }
  return place;
}

namespace detail {
// What merge_entries stages and compares: a selection's `key(entry)` where it declares one (an
// unsigned integer, larger first: before(a, b) exactly when key(a) > key(b); one compare instead
// of before()'s), otherwise the entry itself, compared with before().
template <class Combine, class = void>
struct sort_key {
  using entry = typename Combine::entry;
  using type = entry;
  static constexpr bool keyed = false;
  RCCLX_HOST_DEVICE static type of(const entry& e) { return e; }
  RCCLX_HOST_DEVICE static bool before(const type& a, const type& b) { return Combine::before(a, b); }
};
template <class Combine>
struct sort_key<Combine, std::void_t<decltype(Combine::key(std::declval<const typename Combine::entry&>()))>> {
  using entry = typename Combine::entry;
  using type = decltype(Combine::key(std::declval<const entry&>()));
  static_assert(std::is_unsigned<type>::value, "rcclx::fused: a selection's key(entry) must be an unsigned integer");
  static constexpr bool keyed = true;
  RCCLX_HOST_DEVICE static type of(const entry& e) { return Combine::key(e); }
  RCCLX_HOST_DEVICE static bool before(type a, type b) { return a > b; }
};
}  // namespace detail

// Where a group stages the lists of one record for merge_entries / combine::reduce_entries: every
// rank's K keys, and where the Combine is keyed its K entries too (what the sink is given, so no
// list is read twice): MaxRanks x K x 16 bytes for topk (8 KiB for topk<64> on 8 ranks). Memory
// the group shares, e.g. a block's `rcclx::gpu::block_shared<entries_storage<...>, struct my_tag>()`.
template <class Combine, int MaxRanks>
struct entries_storage {
  static constexpr bool keyed = detail::sort_key<Combine>::keyed;
  typename detail::sort_key<Combine>::type list[MaxRanks][Combine::entries];
  typename Combine::entry entry[keyed ? MaxRanks : 1][keyed ? Combine::entries : 1];
  int bound[MaxRanks];  // candidates per list
};

namespace detail {
// Entries of a sorted list of K before e (tied_too: before or tied; else strictly before): a
// binary search with a fixed trip count (log2 K + 1 steps), selects instead of branches.
template <class Combine, class Key>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int count_before(const Key (&list)[Combine::entries], const Key& e, bool tied_too) {
  using order = sort_key<Combine>;
  constexpr int k = Combine::entries;
  int step = 1;
  while (step * 2 <= k) step *= 2;
  int count = 0;
  for (; step > 0; step /= 2) {
    const bool in = count + step <= k;
    const Key& x = list[in ? count + step - 1 : 0];
    const bool precedes = tied_too ? !order::before(e, x) : order::before(x, e);
    count += in && precedes ? step : 0;
  }
  return count;
}

// Is (a, ra, pa) after (b, rb, pb) in the order (entry, rank, position)? `before` orders entries.
template <class Before, class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool after(const Before& before, const T& a, int ra, int pa, const T& b, int rb,
                                               int pb) {
  if (before(b, a)) return true;
  if (before(a, b)) return false;
  return ra != rb ? ra > rb : pa > pb;
}

// The selection's bound: with q = ceil(K / n) - 1, the rank whose entry q (`at(s)`, read once per
// rank) comes last, returned, and that entry in `tau`; every rank's entries 0..q come at or before
// (tau, rank, q), so the n (q + 1) >= K of them leave no place in the result for an entry after it.
template <class Before, class At, class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int tau_rank(const Before& before, int n, int q, const At& at, T& tau) {
  int tr = 0;
  tau = at(0);
  for (int s = 1; s < n; ++s) {
    const T x = at(s);
    if (after(before, x, s, q, tau, tr, q)) {
      tr = s;
      tau = x;
    }
  }
  return tr;
}
}  // namespace detail

// Group-collective: the selection of ranks 0..n-1's sorted lists (`list(s)`: rank s's record, in
// any memory) with the lists staged in `st` (one coalesced pass: a thread per entry, keyed where
// the Combine declares key()), then every entry that can be in the result placed by its own
// thread (the order and the places of place_among): `sink(place, entry)` once per place below
// Combine::entries, by the thread that placed it (keyed: the entry staged beside its key). Which
// entries can: with q = ceil(K / n) - 1, every rank's entries 0..q come at or before the worst of
// the ranks' entries q (tau), so the n (q + 1) >= K of them leave no place for an entry after tau.
// The entries at or before tau (the candidates; random lists: some K + n of the n K) are a prefix
// of each list, found by one binary search per list; every entry before a candidate is one, so a
// candidate's place is the number of candidates before it, counted by comparing it with each
// other list's prefix. Entries are taken position-major (position 0 of every rank first), so the
// candidates sit in the first threads. Starts with a group sync
// (a previous use of `st` is done); the group must share `st`. What reduce_entries(g, tile, st,
// sink) runs per record, for an unfused merge that wants its bits.
template <class Combine, int MaxRanks, class Group, class Lists, class Sink>
RCCLX_HOST_DEVICE void merge_entries(const Group& g, const Combine& op, int n, entries_storage<Combine, MaxRanks>& st,
                                     const Lists& list, Sink&& sink) {
  using order = detail::sort_key<Combine>;
  using key = typename order::type;
  constexpr int k = Combine::entries;
  const int items = n * k;
  g.sync();
  // A thread's entries loaded `batch` at a time, all in flight together, then staged.
  constexpr int batch = 4;
  for (int x0 = g.thread_rank(); x0 < items; x0 += batch * g.size()) {
    typename Combine::entry in[batch];
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
    for (int b = 0; b < batch; ++b) {
      const int x = x0 + b * g.size();
      if (x < items) in[b] = op.load_entry(list(x / k), x % k);
    }
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
    for (int b = 0; b < batch; ++b) {
      const int x = x0 + b * g.size();
      if (x < items) {
        st.list[x / k][x % k] = order::of(in[b]);
        if constexpr (order::keyed) st.entry[x / k][x % k] = in[b];
      }
    }
  }
  g.sync();
  const auto before = [](const key& a, const key& b) { return order::before(a, b); };
  const int q = (k + n - 1) / n - 1;
  key tau;
  const int tr = detail::tau_rank(before, n, q, [&](int s) { return st.list[s][q]; }, tau);
  // Rank s's entries at or before (tau, tr, q): a prefix of its list, its candidates.
  for (int s = g.thread_rank(); s < n; s += g.size())
    st.bound[s] = s == tr ? q + 1 : detail::count_before<Combine>(st.list[s], tau, s < tr);
  g.sync();
  // A candidate's place: the candidates before it (every entry before it is one), each list's
  // prefix compared in turn (independent compares, no search).
  for (int x = g.thread_rank(); x < items; x += g.size()) {
    const int r = x % n, p = x / n;
    if (p >= st.bound[r]) continue;
    const key e = st.list[r][p];
    int place = p;
    for (int s = 0; s < n; ++s) {
      if (s == r) continue;
      const int b = st.bound[s];
      const bool tied_too = s < r;
      if constexpr (order::keyed) {  // one integer compare: x > e, or x > e - 1 (x >= e) for ties too
        if (tied_too && e == 0) {
          place += b;
          continue;
        }
        const key t = tied_too ? static_cast<key>(e - 1) : e;
#if RCCLX_DEVICE_COMPILE
#  pragma unroll 4
#endif
        for (int j = 0; j < b; ++j) place += st.list[s][j] > t;
      } else {
        for (int j = 0; j < b; ++j) place += tied_too ? !before(e, st.list[s][j]) : before(st.list[s][j], e);
      }
    }
    if (place < k) {
      if constexpr (order::keyed) sink(place, st.entry[r][p]);
      else sink(place, e);
    }
  }
}

}  // namespace fused
RCCLX_NAMESPACE_END
