// rcclx/fused/detail/map_check.hpp: a tile map as the checked mode (RCCLX_CHECKS) compares it
// between ranks and against the call: its fingerprint and whether its columns are known.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../core/call_check.hpp"
#include "../epilogue.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {
namespace detail {

// A map's shape for the checked mode: {tiles, tile rows, tile columns, output columns}; a map type
// of your own is described by its tile count and tile size only.
RCCLX_HOST_DEVICE inline core::call_fingerprint map_fingerprint(const tile_map& m) {
  return {{static_cast<std::uint32_t>(m.num_tiles()), static_cast<std::uint32_t>(m.tile_rows),
           static_cast<std::uint32_t>(m.tile_cols), static_cast<std::uint32_t>(m.cols)}};
}
RCCLX_HOST_DEVICE inline core::call_fingerprint map_fingerprint(const row_tiles& m) {
  return {{static_cast<std::uint32_t>(m.rows), 1u, static_cast<std::uint32_t>(m.cols), static_cast<std::uint32_t>(m.cols)}};
}
// Ragged maps (rows of any length) carry their true cols.
RCCLX_HOST_DEVICE inline core::call_fingerprint map_fingerprint(const ragged_tile_map& m) {
  return {{static_cast<std::uint32_t>(m.num_tiles()), static_cast<std::uint32_t>(m.tile_rows),
           static_cast<std::uint32_t>(m.tile_cols), static_cast<std::uint32_t>(m.cols)}};
}
RCCLX_HOST_DEVICE inline core::call_fingerprint map_fingerprint(const ragged_row_tiles& m) {
  return {{static_cast<std::uint32_t>(m.rows), 1u, static_cast<std::uint32_t>(m.cols), static_cast<std::uint32_t>(m.cols)}};
}
template <class Map>
RCCLX_HOST_DEVICE inline core::call_fingerprint map_fingerprint(const Map& m) {
  return {{static_cast<std::uint32_t>(m.num_tiles()), 0u, static_cast<std::uint32_t>(m.tile_elems()), 0u}};
}
// Are the map's columns (words 2 and 3 of its fingerprint) known to be whole vectors?
RCCLX_HOST_DEVICE constexpr bool map_columns_checked(const tile_map&) { return true; }
RCCLX_HOST_DEVICE constexpr bool map_columns_checked(const row_tiles&) { return true; }
template <class Map>
RCCLX_HOST_DEVICE constexpr bool map_columns_checked(const Map&) { return false; }  // ragged maps too
// A ragged_tile_map's tile columns must still be whole vectors of E: the offending tile_cols, or 0.
RCCLX_HOST_DEVICE constexpr std::uint32_t ragged_tile_cols_misfit(const ragged_tile_map& m, int e) {
  return m.tile_cols % static_cast<std::size_t>(e) != 0 ? static_cast<std::uint32_t>(m.tile_cols) : 0u;
}
template <class Map>
RCCLX_HOST_DEVICE constexpr std::uint32_t ragged_tile_cols_misfit(const Map&, int) { return 0u; }

// tile_map or ragged_tile_map: tiles of tile_rows x tile_cols placed row-major over the output.
template <class Map>
inline constexpr bool is_tiled_map_v = std::is_same<Map, tile_map>::value || std::is_same<Map, ragged_tile_map>::value;

// Does the map's tile misfit the call's tile of tile_elems elements? Larger never fits; a
// tile_map's (ragged or not) must fill it exactly, since the slot's elements past the map's tile
// would land in the rows below (row maps place them past the row's end, where nothing is held).
template <class Map>
RCCLX_HOST_DEVICE constexpr bool map_tile_misfit(const Map& m, std::size_t tile_elems) {
  if (static_cast<std::size_t>(m.tile_elems()) > tile_elems) return true;
  if constexpr (is_tiled_map_v<Map>) return m.tile_elems() < tile_elems;
  return false;
}

// A row-wide epilogue (rms_norm's row sum) on `map` with a group holding `held` vectors of E at
// once (VecsPerThread x threads): each tile must be one whole output row (stage_row_map: tile rows,
// tiles per output row) whose vectors the group holds at once (stage_row_split: the row's
// vectors, held). A map of your own: its tile's vectors against held. {} when it fits.
template <int E, class Map>
RCCLX_HOST_DEVICE stage_fault row_wide_fault(const Map& m, std::size_t held) {
  std::size_t vecs = 0;
  if constexpr (is_tiled_map_v<Map>) {
    if (m.tile_rows != 1 || m.tiles_per_row() != 1)
      return {core::misuse::stage_row_map, 0, saturate_u32(m.tile_rows), saturate_u32(m.tiles_per_row())};
    vecs = (m.cols + E - 1) / E;
  } else if constexpr (std::is_same<Map, row_tiles>::value || std::is_same<Map, ragged_row_tiles>::value) {
    vecs = (m.cols + E - 1) / E;
  } else {
    vecs = (static_cast<std::size_t>(m.tile_elems()) + E - 1) / E;
  }
  if (vecs > held) return {core::misuse::stage_row_split, 0, saturate_u32(vecs), saturate_u32(held)};
  return {};
}

}  // namespace detail
}  // namespace fused
RCCLX_NAMESPACE_END
