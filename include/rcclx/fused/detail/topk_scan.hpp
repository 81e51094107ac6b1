// rcclx/fused/detail/topk_scan.hpp: fused::shard_scan<topk<K>> (fused/shard_scan.hpp says what it
// computes and how): a block's K best (value, index) pairs of one row of its rank's shard.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../config.hpp"
#include "../../gpu/atomic.hpp"
#include "../../gpu/bits.hpp"
#include "../../gpu/memory.hpp"
#include "../../gpu/warp_sort.hpp"
#include "../combine_ops.hpp"
#include "../shard_walk.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {
namespace detail {

// A block keeps, in shared memory, every element seen so far whose value is at or above a
// threshold value tv (NaN counts as above everything), where at least K elements are, so the
// row's K best are all kept. A chunk (`unroll` 16-byte vectors per thread, in flight together) is
// loaded and each element that passes one compare against tv is appended. tv comes from the
// first chunk: every thread's largest value, sorted across its warp; the warp's q-th (q =
// ceil(K / warps) - 1) is at or below q + 1 of them, so the smallest of the warps' q-th values has
// at least K elements at or above it (on the host, a single thread: the K-th of its K best). When
// the kept ones pass half the slots they are compacted the same way, from every thread's largest
// kept value. At the end each kept element's rank among them (the exact order, by key) is its
// place. A row whose chunk overflows the slots restarts in the safe mode: one element per thread
// between checks, thresholds exact entries (ties broken by index), so a step can never overflow.
template <int K, int BlockThreads, class Policy>
struct topk_scan {
  using op = topk<K>;
  using record = typename op::record;
  using policy = Policy;
  using entry = argmax::record;  // (value, index), in the combine's order (argmax::before)
  static constexpr bool on_host = current_backend == backend::host && !RCCLX_EMULATE_THREADS;  // one-thread blocks
  static constexpr int threads = on_host ? 1 : BlockThreads;
  static constexpr int per_thread = (K + threads - 1) / threads;  // B, for the exact thresholds
  using few = topk<per_thread>;
  static constexpr int warp = RCCLX_WARP_SIZE, warps = threads / warp;
  static constexpr bool by_warps = !on_host;  // the value thresholds by warp sorts (else exact)
  static constexpr int unroll = Policy::unroll;  // vectors per thread per chunk (a 64-bit mask)
  static constexpr int cap = Policy::slots;
  static constexpr int check_every = Policy::check_every;
  static constexpr int slice = cap / threads;                     // a thread's slots in a compaction
  static_assert(cap % threads == 0 && 2 * threads <= cap,
                "rcclx::fused::shard_scan<topk<K>>: Policy::slots must be a multiple of the block's threads and at "
                "least twice them");
  // The safe mode's compaction must bring the slots below half (see safe()).
  static_assert(threads == 1 ? 2 * K <= cap : K * ((cap / 2 + 2 * threads - 1) / threads) <= cap / 2,
                "rcclx::fused::shard_scan<topk<K>>: too few Policy::slots for K");
  static_assert(unroll <= 16, "rcclx::fused::shard_scan<topk<K>>: Policy::unroll must be at most 16");
  static_assert(!by_warps || (threads % warp == 0 && (K + warps - 1) / warps <= warp),
                "rcclx::fused::shard_scan<topk<K>>: BlockThreads must be a multiple of the warp and at least K");
  struct storage_type {
    entry slot[cap];
    std::uint64_t key[cap];  // op::key: one compare per ranking step
    float warp_value[warps > 0 ? warps : 1];
    std::uint32_t count;     // slots taken (may pass cap: then overflow)
    int overflow;
    entry t;
  };

  RCCLX_HOST_DEVICE static bool before(const entry& a, const entry& b) { return argmax::before(a, b); }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE static float above_all_nan(float v) { return v != v ? __builtin_huge_valf() : v; }

  // Appends e to the slots. True if its slot is past half.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE static bool append(storage_type& sh, const entry& e) {
    const std::uint32_t s = gpu::fetch_add_local(&sh.count, 1u);
    if (s < cap) sh.slot[s] = e;
    else sh.overflow = 1;
    return s >= cap / 2;
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE static bool keep(storage_type& sh, float tv, const entry& e) {
    return !(e.value < tv) && append(sh, e);  // NaN passes
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE static bool keep_exact(storage_type& sh, const entry& t, const entry& e) {
    return !(e.value < t.value) && !before(t, e) && append(sh, e);
  }

  // Group-collective: a value with at least K of the values the threads saw at or above it (NaN
  // above all), or -inf. `m`: this thread's largest (NaN as +inf; -inf if none); `best`: its B
  // best entries (used on the host only).
  template <class G>
  RCCLX_HOST_DEVICE static float value_threshold(const G& g, storage_type& sh, float m, const typename few::record& best,
                                                 bool reset) {
    if constexpr (by_warps) {
      (void)best;
      m = gpu::warp_sort<float, warp>().descending(m);
      const int lane = g.thread_rank() % warp, w = g.thread_rank() / warp;
      g.sync();  // earlier readers of warp_value are done
      if (lane == (K + warps - 1) / warps - 1) sh.warp_value[w] = m;
      if (reset && g.thread_rank() == 0) sh.count = 0;
      g.sync();
      float tv = sh.warp_value[0];
      for (int u = 1; u < warps; ++u) tv = fminf(tv, sh.warp_value[u]);
      return tv;
    } else {
      (void)m;
      return threshold(g, sh, best, reset).value;
    }
  }

  // Group-collective: the entry ranked K - 1 among every thread's best B (`best`) (an empty entry
  // if there are fewer than K). If `reset`, the slots are emptied too (every thread has read the
  // count before the call).
  template <class G>
  RCCLX_HOST_DEVICE static entry threshold(const G& g, storage_type& sh, const typename few::record& best, bool reset) {
    const int tid = g.thread_rank();
    g.sync();  // earlier readers of sh.key and sh.t are done
    for (int b = 0; b < per_thread; ++b) sh.key[tid * per_thread + b] = op::key({best.value[b], best.index[b]});
    if (reset && tid == 0) sh.count = 0;
    g.sync();
    const int all = g.size() * per_thread;
    for (int b = 0; b < per_thread; ++b) {
      const int me = tid * per_thread + b;
      const std::uint64_t e = sh.key[me];
      int rank = 0;
      for (int u = 0; u < all; ++u) rank += sh.key[u] > e || (sh.key[u] == e && u < me);
      if (rank == K - 1) sh.t = {best.value[b], best.index[b]};
    }
    g.sync();
    return sh.t;
  }

  // Group-collective, after a sync that follows the last append: keeps only the slots at or above
  // a new threshold from them (exact: at or before an entry, as the safe mode needs; else a value).
  // Returns the entry (exact) or {value, 0}.
  template <bool Exact, class G>
  RCCLX_HOST_DEVICE static entry compact(const G& g, storage_type& sh) {
    const int tid = g.thread_rank(), gs = g.size();
    const int n = static_cast<int>(sh.count < cap ? sh.count : cap);
    entry mine[slice];
    typename few::record best = few::empty();
    float m = -__builtin_huge_valf();
    for (int s = 0; s < slice; ++s) {
      const int i = tid + s * gs;
      if (i < n) {
        mine[s] = sh.slot[i];
        if (Exact || !by_warps) few::push(best, mine[s].value, mine[s].index);
        else m = fmaxf(m, above_all_nan(mine[s].value));
      }
    }
    if constexpr (Exact) {
      const entry t = threshold(g, sh, best, true);
      for (int s = 0; s < slice; ++s)
        if (tid + s * gs < n) (void)keep_exact(sh, t, mine[s]);
      return t;
    } else {
      const float tv = value_threshold(g, sh, m, best, true);
      int passing = 0;
      for (int s = 0; s < slice; ++s) passing += tid + s * gs < n && !(mine[s].value < tv);
      if (passing > 0) {  // one reservation (no overflow: the slots kept are among those read)
        std::uint32_t at = gpu::fetch_add_local(&sh.count, static_cast<std::uint32_t>(passing));
        for (int s = 0; s < slice; ++s)
          if (tid + s * gs < n && !(mine[s].value < tv)) sh.slot[at++] = mine[s];
      }
      return {tv, 0};
    }
  }

  template <class G>
  RCCLX_HOST_DEVICE static void run(const G& g, storage_type& sh, const float* x, std::size_t len, std::size_t begin,
                                    record* dst) {
    const std::size_t gs = static_cast<std::size_t>(g.size()), tid = static_cast<std::size_t>(g.thread_rank());
    const shard_split sp = split_shard(x, len);
    const std::size_t head = sp.head, vecs = sp.vecs, chunk = unroll * gs;
    const float* xv = x + head;
    g.sync();  // the previous row's reads of the slots are done
    if (tid == 0) {
      sh.count = 0;
      sh.overflow = 0;
    }
    const auto at = [&](std::size_t c, int u) { return c + static_cast<std::size_t>(u) * gs + tid; };
    gpu::vec16 w[unroll];
    const auto load = [&](std::size_t c) {
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
      for (int u = 0; u < unroll; ++u)
        if (at(c, u) < vecs) w[u] = gpu::load16(xv + 4 * at(c, u));
    };
    // f(value, index, bit) for every element of the loaded chunk; bit = 4u + k for element k of
    // vector u (a constant once unrolled).
    const auto each = [&](std::size_t c, auto&& f) {
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
      for (int u = 0; u < unroll; ++u)
        if (at(c, u) < vecs) {
          const auto e = gpu::bit_cast<shard_vec4>(w[u]);
          for (int k = 0; k < 4; ++k)
            f(e.x[k], static_cast<std::uint32_t>(begin + head + 4 * at(c, u) + k), 4 * u + k);
        }
    };
    // The first chunk sets tv.
    load(0);
    typename few::record best = few::empty();
    float m = -__builtin_huge_valf();
    each(0, [&](float v, std::uint32_t i, int) {
      if constexpr (by_warps) m = fmaxf(m, above_all_nan(v));
      else few::push(best, v, i);
    });
    float tv = value_threshold(g, sh, m, best, false);
    // A chunk's passing elements: marked in a mask (a compare per element), one slot reservation
    // per thread, then each one read again (from the L1 cache: it was just loaded) and stored.
    const auto keep_chunk = [&](std::size_t c) {
      using mask_t = std::conditional_t<unroll * 4 <= 32, std::uint32_t, std::uint64_t>;
      mask_t mask = 0;
      each(c, [&](float v, std::uint32_t, int bit) { mask |= !(v < tv) ? mask_t{1} << bit : mask_t{0}; });  // NaN passes
      if (mask == 0) return false;
      const auto passing = static_cast<std::uint32_t>(gpu::popcount(mask));
      std::uint32_t s = gpu::fetch_add_local(&sh.count, passing);
      const bool past_half = s + passing > cap / 2;
      if (s + passing > cap) sh.overflow = 1;
      for (; mask != 0; mask &= mask - 1, ++s) {
        const int b = gpu::lowest_set_bit(mask);
        const std::size_t j = head + 4 * at(c, b / 4) + static_cast<std::size_t>(b % 4);
        if (s < cap) sh.slot[s] = {x[j], static_cast<std::uint32_t>(begin + j)};
      }
      return past_half;
    };
    bool half = keep_chunk(0);
    for_each_shard_edge(g, x, len, sp, [&](std::size_t j, float v) { half |= keep(sh, tv, {v, static_cast<std::uint32_t>(begin + j)}); });
    // The block checks the slots (a group sync) every `check_every` chunks and after the last.
    for (std::size_t c = chunk, k = 1;; c += chunk, ++k) {
      if (c >= vecs || k % check_every == 0) {
        if (g.sync_or(half)) {
          if (sh.overflow) return safe(g, sh, x, len, begin, dst);
          tv = compact<false>(g, sh).value;
        }
        half = false;
      }
      if (c >= vecs) break;
      load(c);
      half |= keep_chunk(c);
    }
    finish(g, sh, dst);
  }

  // The safe mode: the row again, one element per thread between checks (a step appends at most
  // G <= cap / 2), compacting by exact entries while more than half the slots are taken.
  template <class G>
  RCCLX_HOST_DEVICE static void safe(const G& g, storage_type& sh, const float* x, std::size_t len, std::size_t begin,
                                     record* dst) {
    const std::size_t gs = static_cast<std::size_t>(g.size()), tid = static_cast<std::size_t>(g.thread_rank());
    g.sync();  // every thread has seen the overflow
    if (tid == 0) {
      sh.count = 0;
      sh.overflow = 0;
    }
    g.sync();
    entry t = argmax::empty();  // at or after every element
    for (std::size_t j0 = 0; j0 < len; j0 += gs) {
      const std::size_t j = j0 + tid;
      const bool half = j < len && keep_exact(sh, t, {x[j], static_cast<std::uint32_t>(begin + j)});
      if (g.sync_or(half)) {
        // One compaction is enough here: it keeps at most K * ceil(n / G) <= cap / 2 entries with
        // B = 1 (n <= cap / 2 + G), exactly K with G = 1.
        do {
          t = compact<true>(g, sh);
          g.sync();
        } while (sh.count > cap / 2);
      }
    }
    finish(g, sh, dst);
  }

  // After the last append: the kept entries' places (compacted first while more than G are kept,
  // at most twice: ties may keep more), empty entries after them.
  template <class G>
  RCCLX_HOST_DEVICE static void finish(const G& g, storage_type& sh, record* dst) {
    const int tid = g.thread_rank(), gs = g.size();
    g.sync();
    for (int round = 0; round < 2 && static_cast<int>(sh.count) > gs; ++round) {
      (void)compact<false>(g, sh);
      g.sync();
    }
    const int n = static_cast<int>(sh.count);
    for (int c = tid; c < n; c += gs) sh.key[c] = op::key(sh.slot[c]);
    g.sync();
    for (int k = tid; k < K; k += gs)
      if (k >= n) {  // fewer elements than K: empty entries after them
        dst->value[k] = -__builtin_huge_valf();
        dst->index[k] = 0xFFFFFFFFu;
      }
    for (int c = tid; c < n; c += gs) {  // kept entries are distinct elements: distinct ranks
      const std::uint64_t kc = sh.key[c];
      int rank = 0;
      for (int u = 0; u < n; ++u) rank += sh.key[u] > kc;
      if (rank < K) {
        dst->value[rank] = sh.slot[c].value;
        dst->index[rank] = sh.slot[c].index;
      }
    }
  }
};

}  // namespace detail
}  // namespace fused
RCCLX_NAMESPACE_END
