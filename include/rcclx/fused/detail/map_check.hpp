// rcclx/fused/detail/map_check.hpp: a tile map as the checked mode (RCCLX_CHECKS) compares it
// between ranks and against the call: its fingerprint and whether its columns are known.
#pragma once

#include <cstddef>
#include <cstdint>

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

}  // namespace detail
}  // namespace fused
RCCLX_NAMESPACE_END
