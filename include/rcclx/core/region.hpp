// rcclx/core/region.hpp: one collective call's share of a symmetric buffer and of the signal pads,
// so that several collectives of one kernel never touch each other's bytes or flags.
//
//   rcclx::fused::region_plan plan;                      // host, the same calls on every rank
//   auto h = plan.add(fz::tile_allreduce<bf16, 8>::need(tile_elems, max_tiles), "o_proj");
//   ... allocate plan.bytes() per rank and plan.slots() pad slots, plan.place(owner) ...
//   fz::tile_allreduce<bf16, 8> ar(table, plan[h], tile_elems, num_tiles);   // device
//
// A region is a kernel argument (trivially copyable, 32 bytes): the byte range [offset, offset +
// bytes) of every rank's symmetric buffer and the pad slot range `slots`. Regions of one plan never
// overlap (fused/region_plan.hpp); the checked mode (RCCLX_CHECKS) refuses, on the device and before
// any output, a call whose region is smaller than its algorithm needs, lies outside the buffer, or
// overlaps another call's region in flight.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../config.hpp"
#include "peer_table.hpp"
#include "slot_ranges.hpp"

RCCLX_NAMESPACE_BEGIN
namespace core {

// What `bytes` of a region was computed for (region::sized_for, region_need::sized_for).
enum sized_for_bits : std::uint32_t { sized_for_flat = 1u, sized_for_tree = 2u, sized_for_any = 3u };

struct region {
  std::size_t offset;       // from the start of every rank's buffer (a multiple of 256)
  std::size_t bytes;        // the region's bytes (both halves of a tile call, tree results included)
  tile_slots slots;         // {first, max_tiles}: a control slot and one slot per tile; max_tiles < 0: none
  std::uint32_t id;         // 1.. inside its plan; 0: the whole buffer (the constructors without a region)
  std::uint32_t sized_for;  // sized_for_bits: the algorithms `bytes` was computed for

  RCCLX_HOST_DEVICE constexpr std::size_t end() const { return offset + bytes; }
};

// What one call needs: bytes of every rank's buffer, tiles (pad slots: 1 + max_tiles), and the
// algorithms the byte count covers.
struct region_need {
  std::size_t bytes;
  int max_tiles;
  std::uint32_t sized_for;
};

// The whole buffer as one region (id 0): what the constructors without a region use.
RCCLX_HOST_DEVICE constexpr region whole_buffer(std::size_t capacity_bytes, tile_slots s) {
  return region{0, capacity_bytes, s, 0u, sized_for_any};
}

// A 16-bit digest of the bytes a region names (its offset and size), which a checked tile call's
// fingerprint carries (core/call_check.hpp, the blocks field, unused by tile calls): ranks that pass
// one call different regions, or buffers of different capacity without one (the second half then
// starts elsewhere), are refused with a mismatch instead of reading each other's wrong bytes.
RCCLX_HOST_DEVICE constexpr std::uint32_t region_digest(const region& r) {
  std::uint64_t x = static_cast<std::uint64_t>(r.offset) * 0x9E3779B97F4A7C15ull;
  x ^= static_cast<std::uint64_t>(r.bytes) + 0x632BE59BD9B4E019ull + (x << 6) + (x >> 2);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<std::uint32_t>(x >> 48) & 0xFFFFu;
}

// `t` narrowed to region `r`: every rank's pointer advanced by r.offset, capacity r.bytes. For the
// dda device templates (which take a table) inside a kernel that also runs other calls.
template <class T, int MaxRanks>
RCCLX_HOST_DEVICE peer_table<T, MaxRanks> region_table(const peer_table<T, MaxRanks>& t, const region& r) {
  peer_table<T, MaxRanks> out = t;
  for (int p = 0; p < MaxRanks; ++p)
    out.data[p] = t.data[p] == nullptr
                      ? nullptr
                      : reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(t.data[p]) + r.offset);
  out.capacity_bytes = r.bytes;
  return out;
}

}  // namespace core
RCCLX_NAMESPACE_END
