// rcclx/fused/epilogue.hpp: composable epilogues for fused collectives (CUTLASS-style fusion
// callbacks): a chain of stages applied in order to the FP32 values of every 16-byte vector of a
// reduced tile, where a row-wide stage (RMSNorm) first gets a sum over the whole row.
//
//   namespace fz = rcclx::fused;
//   using epi_t = fz::epilogue<fz::residual_add<rcclx::bf16>, fz::rms_norm<rcclx::bf16, 512>,
//                              fz::fp8_out<rcclx::fp8::e4m3>>;
//   epi_t epi{{residual, residual, hidden}, {weight, 1e-6f, hidden, &tmp}, {out, hidden, scale}};
//   ar.reduce<2>(g, row, fz::row_tiles{tokens, hidden}, epi);            // fused/tile_allreduce.hpp
//
// Stage contract (every stage is trivially copyable: it travels inside kernel arguments):
//   template <int E> RCCLX_HOST_DEVICE void operator()(const position& p, float (&v)[E]) const;
//     v holds E consecutive elements of one output row, the first at (p.row, p.col); the stage may
//     rewrite v (the next stage sees the new values), read or write memory at those positions, or
//     both. It is called only for vectors inside the output. E = 16 / sizeof(T) of the tile type.
//   A row-wide stage also declares `static constexpr bool row_wide = true;` and has
//     template <int E> float row_partial(const position&, const float (&v)[E]) const;
//     template <class Group> float row_combine(const Group& g, float partial) const;
//     template <int E> void operator()(const position& p, float (&v)[E], float row_total) const;
//   The driver sums row_partial over every vector the thread holds, row_combine sums those over
//   the group (group-collective: every thread calls it), and each vector is then transformed with
//   the total. A group must then hold the whole row: one row per tile, and all of the tile's
//   vectors in registers (VecsPerThread x group size >= vectors per tile; see tile_allreduce).
//   It may declare row_identity() / row_accumulate(a, b) (default 0 / a + b): the driver then
//   folds row_partial with them (fp8_out_per_token's row maximum).
// Stages run one after another over all the vectors a thread holds (stage-major), so a stage sees
// the outputs of every earlier stage for the whole row.
// On a ragged map (ragged_tile_map, ragged_row_tiles: rows of any length) the stages are also
// called with E = 1 (pairs for `static constexpr int min_lanes = 2`), for a row's last partial
// vector and wherever a stage's check() finds its operands misaligned for E-wide calls.
// Checked mode: a stage may declare check(stage_context) and stage_id (fused/stage_check.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../config.hpp"
#include "../gpu/memory.hpp"
#include "stage_check.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {

// Where a vector lands in the output: row and first column (the vector covers [col, col + E)).
struct position {
  std::size_t row;
  std::size_t col;
};

// Row-major tiles of a row-major output matrix: tile t covers rows [tr * tile_rows, ...) and columns
// [tc * tile_cols, ...) with (tr, tc) = (t / tiles_per_row, t % tiles_per_row); inside its slot a
// tile is row-major too (element (i, j) at i * tile_cols + j). tile_cols must be a multiple of the
// vector width, and so must cols (a vector never straddles the edge of the output). Tiles at the
// bottom and right edges may stick out of the output: those vectors are not passed to the stages.
struct tile_map {
  std::size_t rows, cols;            // the output
  std::size_t tile_rows, tile_cols;  // one tile

  RCCLX_HOST_DEVICE constexpr std::size_t tile_elems() const { return tile_rows * tile_cols; }
  RCCLX_HOST_DEVICE constexpr std::size_t tiles_per_row() const { return (cols + tile_cols - 1) / tile_cols; }
  RCCLX_HOST_DEVICE constexpr std::size_t num_tiles() const {
    return (rows + tile_rows - 1) / tile_rows * tiles_per_row();
  }
  // Position of element `elem` of tile `tile`.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE position at(std::size_t tile, std::size_t elem) const {
    const std::size_t tpr = tiles_per_row();
    return position{(tile / tpr) * tile_rows + elem / tile_cols, (tile % tpr) * tile_cols + elem % tile_cols};
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool contains(const position& p) const { return p.row < rows && p.col < cols; }
};

// One tile per row of `cols` elements (the ready-made AllReduce + RMSNorm kernels): tile = row,
// element = column, no division on the way.
struct row_tiles {
  std::size_t rows, cols;

  RCCLX_HOST_DEVICE constexpr std::size_t tile_elems() const { return cols; }
  RCCLX_HOST_DEVICE constexpr std::size_t num_tiles() const { return rows; }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE position at(std::size_t tile, std::size_t elem) const {
    return position{tile, elem};
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool contains(const position& p) const { return p.row < rows && p.col < cols; }
};

// Rows of any length: the ragged maps. Like tile_map / row_tiles, but cols may be anything: a tile
// in the buffer is still whole vectors (tile_cols a multiple of E; a ragged_row_tiles row padded to
// padded_cols<T>(cols)), and the vector that straddles column `cols` is held with fewer lanes
// (held_vectors::lanes). The epilogue makes E-wide stage calls for whole vectors when every
// stage's operands are vector-aligned, and one call per element (E = 1; pairs for a stage with
// min_lanes = 2) otherwise and for the lanes of the straddling vector. The padding lanes of a
// tile are summed but never passed to a stage: they may hold anything.
struct ragged_tile_map {
  static constexpr bool ragged = true;
  std::size_t rows, cols;            // the output, cols any
  std::size_t tile_rows, tile_cols;  // one tile; tile_cols whole vectors

  RCCLX_HOST_DEVICE constexpr std::size_t tile_elems() const { return tile_rows * tile_cols; }
  RCCLX_HOST_DEVICE constexpr std::size_t tiles_per_row() const { return (cols + tile_cols - 1) / tile_cols; }
  RCCLX_HOST_DEVICE constexpr std::size_t num_tiles() const {
    return (rows + tile_rows - 1) / tile_rows * tiles_per_row();
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE position at(std::size_t tile, std::size_t elem) const {
    const std::size_t tpr = tiles_per_row();
    return position{(tile / tpr) * tile_rows + elem / tile_cols, (tile % tpr) * tile_cols + elem % tile_cols};
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool contains(const position& p) const { return p.row < rows && p.col < cols; }
};

// Row length padded to whole vectors of T: the tile (and tile_elems of the AllReduce) of a
// ragged_row_tiles row.
template <class T>
RCCLX_HOST_DEVICE constexpr std::size_t padded_cols(std::size_t cols) {
  return (cols + gpu::elems_per_vec16<T> - 1) / gpu::elems_per_vec16<T> * gpu::elems_per_vec16<T>;
}

// One tile per row of `cols` elements, cols any; the tile holds padded_cols<T>(cols) elements (the
// AllReduce's tile_elems), element j of the row at j.
struct ragged_row_tiles {
  static constexpr bool ragged = true;
  std::size_t rows, cols;

  RCCLX_HOST_DEVICE constexpr std::size_t tile_elems() const { return cols; }
  RCCLX_HOST_DEVICE constexpr std::size_t num_tiles() const { return rows; }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE position at(std::size_t tile, std::size_t elem) const {
    return position{tile, elem};
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool contains(const position& p) const { return p.row < rows && p.col < cols; }
};

template <class Map, class = void>
struct is_ragged_map : std::false_type {};
template <class Map>
struct is_ragged_map<Map, std::enable_if_t<Map::ragged>> : std::true_type {};
template <class Map>
inline constexpr bool is_ragged_map_v = is_ragged_map<Map>::value;

// The vectors of one tile a thread holds in one epilogue call: its k-th (k < VecsPerThread) is
// vector first + k * stride of the tile (vectors of E elements), if that is below `count` and
// inside the output. Positions are recomputed when asked for rather than kept in registers.
template <class Map, int E>
struct held_vectors {
  Map map;
  std::size_t tile;
  std::size_t first, stride, count;  // in vectors

  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE position at(int k) const {
    return map.at(tile, (first + static_cast<std::size_t>(k) * stride) * E);
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool holds(int k) const {
    return first + static_cast<std::size_t>(k) * stride < count && map.contains(at(k));
  }
  // Lanes of a held vector inside the output: E, or cols - col for a ragged map's last vector.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int lanes(int k) const {
    if constexpr (is_ragged_map_v<Map>) {
      const std::size_t left = map.cols - at(k).col;
      return left < static_cast<std::size_t>(E) ? static_cast<int>(left) : E;
    } else {
      (void)k;
      return E;
    }
  }
};

// How a stage's operand reaches it (the memory a stage reads per vector: residual_add's residual,
// rms_norm's weight). at_use: the stage loads it when it runs. preloaded: the kernel loads it into
// registers beforehand (operand_vectors::load), e.g. before it waits for a tile's flags, so the
// latency hides behind the wait and the peers' loads instead of following the reduction; it costs
// 4 registers per vector held. Either way the stage computes with its loaded form on the same
// 16-byte vector (residual_add::add_loaded, rms_norm::apply_loaded): the policy changes no bit.
enum class operand_loads { at_use, preloaded, default_loads = at_use };

// A stage's operand for a thread's VecsPerThread vectors under the policy Loads: get(k, p) is the
// 16-byte vector at p for the thread's k-th vector, loaded by load(k, p) beforehand (preloaded) or
// now (at_use: load() does nothing).
template <operand_loads Loads, int VecsPerThread>
struct operand_vectors {
  gpu::vec16 v[VecsPerThread];
  template <class T>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void load(int k, const T* p) {
    v[k] = gpu::load16(p);
  }
  template <class T>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE gpu::vec16 get(int k, const T*) const {
    return v[k];
  }
};
template <int VecsPerThread>
struct operand_vectors<operand_loads::at_use, VecsPerThread> {
  template <class T>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void load(int, const T*) {}
  template <class T>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE gpu::vec16 get(int, const T* p) const {
    return gpu::load16(p);
  }
};

namespace detail {

template <class S, class = void>
struct is_row_wide : std::false_type {};
template <class S>
struct is_row_wide<S, std::enable_if_t<S::row_wide>> : std::true_type {};

// Optional row-wide hooks: row_identity() / row_accumulate(a, b) (defaults 0 and a + b: a sum).
template <class S, class = void>
struct has_row_accumulate : std::false_type {};
template <class S>
struct has_row_accumulate<S, std::void_t<decltype(std::declval<const S&>().row_accumulate(0.0f, 0.0f))>>
    : std::true_type {};
template <class S>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float row_identity(const S& s) {
  if constexpr (has_row_accumulate<S>::value) {
    return s.row_identity();
  } else {
    (void)s;
    return 0.0f;
  }
}
template <class S>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float row_accumulate(const S& s, float a, float b) {
  if constexpr (has_row_accumulate<S>::value) {
    return s.row_accumulate(a, b);
  } else {
    (void)s;
    return a + b;
  }
}

// Lanes a stage takes at least per call on the element path (swiglu_store: gate/up pairs).
template <class S, class = void>
struct min_lanes_of : std::integral_constant<int, 1> {};
template <class S>
struct min_lanes_of<S, std::void_t<decltype(S::min_lanes)>> : std::integral_constant<int, S::min_lanes> {};

// One stage over every vector a thread holds.
template <class Stage, int VPT, int E, class Group, class Held>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void apply_stage(const Stage& s, const Group& g, float (&v)[VPT][E],
                                                     const Held& h) {
  if constexpr (is_row_wide<Stage>::value && has_row_accumulate<Stage>::value) {
    float partial = s.row_identity();  // in vector order: the same on every rank
    for (int k = 0; k < VPT; ++k)
      if (h.holds(k)) partial = s.row_accumulate(partial, s.row_partial(h.at(k), v[k]));
    const float total = s.row_combine(g, partial);
    for (int k = 0; k < VPT; ++k)
      if (h.holds(k)) s(h.at(k), v[k], total);
  } else if constexpr (is_row_wide<Stage>::value) {
    float partial = 0.0f;  // in vector order: the same on every rank
    for (int k = 0; k < VPT; ++k)
      if (h.holds(k)) partial += s.row_partial(h.at(k), v[k]);
    const float total = s.row_combine(g, partial);
    for (int k = 0; k < VPT; ++k)
      if (h.holds(k)) s(h.at(k), v[k], total);
  } else {
    (void)g;
    for (int k = 0; k < VPT; ++k)
      if (h.holds(k)) s(h.at(k), v[k]);
  }
}

// Lanes [i, i + N) of v (at p) as one N-wide stage call; the stage's new values go back to v.
template <int N, class Stage, int E, class... Total>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void call_lanes(const Stage& s, const position& p, float (&v)[E], int i,
                                                    Total... total) {
  float x[N];
  for (int j = 0; j < N; ++j) x[j] = v[i + j];
  s(position{p.row, p.col + static_cast<std::size_t>(i)}, x, total...);
  for (int j = 0; j < N; ++j) v[i + j] = x[j];
}

// apply_stage on a ragged map: E-wide calls for whole vectors when `vectors`, else (and for the
// lanes of a straddling vector) calls of min_lanes elements. A row-wide stage's partial takes each
// vector's lanes first (from row_identity), then accumulates that into the thread's partial: for
// a left-to-right sum such as rms_norm's the element path gives the E-wide bits.
template <class Stage, int VPT, int E, class Group, class Held>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void apply_stage_ragged(const Stage& s, const Group& g, float (&v)[VPT][E],
                                                            const Held& h, bool vectors) {
  constexpr int step = min_lanes_of<Stage>::value;
  if constexpr (is_row_wide<Stage>::value) {
    float partial = row_identity(s);
    for (int k = 0; k < VPT; ++k) {
      if (!h.holds(k)) continue;
      const position p = h.at(k);
      const int lanes = h.lanes(k);
      if (vectors && lanes == E) {
        partial = row_accumulate(s, partial, s.row_partial(p, v[k]));
      } else {
        float part = row_identity(s);
        for (int i = 0; i + step <= lanes; i += step) {
          float x[step];
          for (int j = 0; j < step; ++j) x[j] = v[k][i + j];
          part = row_accumulate(s, part, s.row_partial(position{p.row, p.col + static_cast<std::size_t>(i)}, x));
        }
        partial = row_accumulate(s, partial, part);
      }
    }
    const float total = s.row_combine(g, partial);
    for (int k = 0; k < VPT; ++k) {
      if (!h.holds(k)) continue;
      const int lanes = h.lanes(k);
      if (vectors && lanes == E) {
        s(h.at(k), v[k], total);
      } else {
        for (int i = 0; i + step <= lanes; i += step) call_lanes<step>(s, h.at(k), v[k], i, total);
      }
    }
  } else {
    (void)g;
    for (int k = 0; k < VPT; ++k) {
      if (!h.holds(k)) continue;
      const int lanes = h.lanes(k);
      if (vectors && lanes == E) {
        s(h.at(k), v[k]);
      } else {
        for (int i = 0; i + step <= lanes; i += step) call_lanes<step>(s, h.at(k), v[k], i);
      }
    }
  }
}

template <class S, class = void>
struct stage_id_of : std::integral_constant<std::uint32_t, 0> {};
template <class S>
struct stage_id_of<S, std::void_t<decltype(S::stage_id)>> : std::integral_constant<std::uint32_t, S::stage_id> {};

// A stage's checked-mode verdict with its place: stage = index | stage_id << 8; {} without check().
template <class Stage>
RCCLX_HOST_DEVICE stage_fault check_stage(const Stage& s, const stage_context& ctx, std::uint32_t index) {
  if constexpr (has_stage_check<Stage>::value) {
    stage_fault f = s.check(ctx);
    if (f) f.stage = index | stage_id_of<Stage>::value << 8;
    return f;
  } else {
    (void)s, (void)ctx, (void)index;
    return {};
  }
}

// The fault of a stage's layout (pointers, ld): check_layout() where the stage has one (a check()
// that also loads memory, e.g. fp8_out's scale), else check().
template <class S, class = void>
struct has_layout_check : std::false_type {};
template <class S>
struct has_layout_check<S, std::void_t<decltype(std::declval<const S&>().check_layout(std::declval<const stage_context&>()))>>
    : std::true_type {};
template <class Stage>
RCCLX_HOST_DEVICE stage_fault layout_fault(const Stage& s, const stage_context& ctx) {
  if constexpr (has_layout_check<Stage>::value) {
    return s.check_layout(ctx);
  } else if constexpr (has_stage_check<Stage>::value) {
    return s.check(ctx);
  } else {
    (void)s, (void)ctx;
    return {};
  }
}

// The first row-wide stage of Stages: its index | stage_id << 8 (the checked mode's records name
// it); 0 when none is.
template <class... Stages>
RCCLX_HOST_DEVICE constexpr std::uint32_t first_row_wide() {
  constexpr bool wide[] = {is_row_wide<Stages>::value..., false};
  constexpr std::uint32_t ids[] = {stage_id_of<Stages>::value..., 0u};
  for (std::uint32_t i = 0; i < sizeof...(Stages); ++i)
    if (wide[i]) return i | ids[i] << 8;
  return 0;
}

// An epilogue's row-wide stage as first_row_wide names it: its row_wide_stage where it declares
// one, else 0 (index 0 of a stage of your own).
template <class E, class = void>
struct row_wide_stage_of : std::integral_constant<std::uint32_t, 0> {};
template <class E>
struct row_wide_stage_of<E, std::void_t<decltype(E::row_wide_stage)>>
    : std::integral_constant<std::uint32_t, E::row_wide_stage> {};

template <class... Stages>
struct stage_list;

template <>
struct stage_list<> {
  RCCLX_HOST_DEVICE stage_fault check(const stage_context&, std::uint32_t) const { return {}; }
  RCCLX_HOST_DEVICE bool vectors_fit(const stage_context&) const { return true; }
  template <int VPT, int E, class Group, class Held>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void run_ragged(const Group&, float (&)[VPT][E], const Held&, bool) const {}
  template <int VPT, int E, class Group, class Held>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void run(const Group&, float (&)[VPT][E], const Held&) const {}
};

template <class S0, class... Rest>
struct stage_list<S0, Rest...> {
  S0 head;
  stage_list<Rest...> tail;

  stage_list() = default;
  RCCLX_HOST_DEVICE stage_list(const S0& h, const Rest&... t) : head(h), tail(t...) {}

  template <int VPT, int E, class Group, class Held>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void run(const Group& g, float (&v)[VPT][E], const Held& h) const {
    apply_stage(head, g, v, h);
    tail.run(g, v, h);
  }
  RCCLX_HOST_DEVICE stage_fault check(const stage_context& ctx, std::uint32_t index) const {
    if (stage_fault f = check_stage(head, ctx, index)) return f;
    return tail.check(ctx, index + 1);
  }
  // Are every stage's operands aligned for E-wide calls (ctx: vector path, no shape)?
  RCCLX_HOST_DEVICE bool vectors_fit(const stage_context& ctx) const {
    return layout_fault(head, ctx).what != core::misuse::stage_misaligned && tail.vectors_fit(ctx);
  }
  template <int VPT, int E, class Group, class Held>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void run_ragged(const Group& g, float (&v)[VPT][E], const Held& h,
                                                      bool vectors) const {
    apply_stage_ragged(head, g, v, h, vectors);
    tail.run_ragged(g, v, h, vectors);
  }
};

}  // namespace detail

// The stage_context of a call on `map` for tiles of T (fused/stage_check.hpp), without the
// forbidden ranges (the caller adds its region's): rows and cols of tile_map, row_tiles and the
// ragged maps (0, 0 for a map of your own: shapes unchecked); vector_path false on ragged maps (the
// epilogue makes E-wide calls there only where the operands are aligned: element alignment
// suffices).
template <class T, class Map>
RCCLX_HOST_DEVICE stage_context make_stage_context(const Map& map) {
  stage_context c;
  if constexpr (std::is_same<Map, tile_map>::value || std::is_same<Map, row_tiles>::value || is_ragged_map_v<Map>) {
    c.rows = map.rows;
    c.cols = map.cols;
  } else {
    (void)map;
  }
  c.vector_path = !is_ragged_map_v<Map>;
  c.vec_elems = gpu::elems_per_vec16<T>;
  return c;
}

// A chain of stages, applied in the order given. Trivially copyable when its stages are.
template <class... Stages>
class epilogue {
 public:
  static_assert(sizeof...(Stages) >= 1, "rcclx::fused::epilogue needs at least one stage");
  // True when some stage needs a row-wide sum: then a group must hold whole rows (see the header).
  static constexpr bool row_wide = (detail::is_row_wide<Stages>::value || ...);
  // The first such stage (checked-mode records): index | stage_id << 8.
  static constexpr std::uint32_t row_wide_stage = detail::first_row_wide<Stages...>();

  epilogue() = default;
  RCCLX_HOST_DEVICE epilogue(const Stages&... stages) : stages_(stages...) {}

  // Group-collective when row_wide (every thread of g calls it, also one that holds no vector).
  // v[k]: the values of the thread's k-th vector, at h.at(k), used where h.holds(k).
  template <int VPT, int E, class Group, class Map>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void operator()(const Group& g, float (&v)[VPT][E],
                                                      const held_vectors<Map, E>& h) const {
    if constexpr (is_ragged_map_v<Map>) {
      stages_.run_ragged(g, v, h, vectors_fit<E>());
    } else {
      stages_.run(g, v, h);
    }
  }

  // On a ragged map: are every stage's operands aligned for E-wide calls of whole vectors? (A
  // stage without check() is taken as fine; declare check() to get element calls when misaligned.)
  template <int E>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool vectors_fit() const {
    stage_context ctx;
    ctx.vec_elems = E;
    return stages_.vectors_fit(ctx);
  }

  // Checked mode (fused/stage_check.hpp): the first stage's fault, with stage = its index |
  // stage_id << 8; {} when every stage is fine (a stage without check() is).
  RCCLX_HOST_DEVICE stage_fault check(const stage_context& ctx) const { return stages_.check(ctx, 0); }

 private:
  detail::stage_list<Stages...> stages_;
};

}  // namespace fused
RCCLX_NAMESPACE_END
