// rcclx/core/slot_ranges.hpp: which slots of a rank's signal pads are whose. The side that owns the
// pads (host::communicator, testing::emulated_world, the Python communicator's kernel handles)
// keeps one and hands ranges out, so two users of one pad are never given the same slot.
//
//   rcclx::core::slot_ranges r(max_blocks);
//   r.record(0, 32, "the collectives");                       // block b of a barrier grid: slot b
//   rcclx::core::tile_slots t = r.reserve_tiles(64, "my kernel");   // the highest 65 free slots
//
// Host bookkeeping: the pads hold nothing of it, and it is the same on every rank when every rank
// records and reserves the same ranges in the same order. Barrier-based grids take slots from 0 up
// (block b uses slot b), so ranges are handed out from the top: on pads of
// pad_blocks_for(blocks, tiles) slots, reserve_tiles(tiles) is tile_slots{blocks, tiles}, the range
// the same arithmetic gave by hand.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "../config.hpp"
#include "error.hpp"

RCCLX_NAMESPACE_BEGIN
namespace core {

// The pad slots of one tile-flag protocol user (core/tile_flags.hpp): `first` is its control slot,
// tile t uses slot first + 1 + t. The pads need max_blocks >= end(). Handed out by the pads' owner
// (slot_ranges::reserve_tiles); a range written by hand must not overlap any other user's.
struct tile_slots {
  int first;      // control slot
  int max_tiles;  // tiles a call may have

  RCCLX_HOST_DEVICE constexpr int end() const { return first + 1 + max_tiles; }
};

// Pad slots (max_blocks) for barrier-based grids of up to barrier_blocks blocks plus one tile-flag
// user of up to max_tiles tiles (at tile_slots{barrier_blocks, max_tiles}).
RCCLX_HOST_DEVICE constexpr int pad_blocks_for(int barrier_blocks, int max_tiles) {
  return barrier_blocks + 1 + max_tiles;
}

class slot_ranges {
 public:
  struct range {
    int first;
    int count;
    std::string owner;
  };

  slot_ranges() = default;
  explicit slot_ranges(int slots) : slots_(slots) {
    if (slots < 0)
      throw error(errc::invalid_argument, "slot_ranges: slots = " + std::to_string(slots) + " must be >= 0");
  }

  int slots() const { return slots_; }
  const std::vector<range>& ranges() const { return ranges_; }

  // Records [first, first + count) as `owner`'s. Throws invalid_argument (naming both owners) if it
  // leaves the pads or overlaps a range recorded or handed out before.
  void record(int first, int count, const std::string& owner) {
    if (count < 1 || first < 0 || first > slots_ - count)
      throw error(errc::invalid_argument, owner + ": pad slots [" + std::to_string(first) + ", " +
                                              std::to_string(first + count) + ") are outside the pads' " +
                                              std::to_string(slots_) + " slots (max_blocks)");
    for (const range& r : ranges_)
      if (first < r.first + r.count && r.first < first + count)
        throw error(errc::invalid_argument, owner + ": pad slots [" + std::to_string(first) + ", " +
                                                std::to_string(first + count) + ") overlap [" +
                                                std::to_string(r.first) + ", " + std::to_string(r.first + r.count) +
                                                ") of " + r.owner);
    ranges_.push_back(range{first, count, owner});
  }

  // Hands out the highest `count` free slots as `owner`'s and returns the first. Throws
  // invalid_argument, listing who holds what, when no gap is that large.
  int reserve(int count, const std::string& owner) {
    if (count < 1) throw error(errc::invalid_argument, owner + ": a slot range needs at least one slot");
    for (int end = slots_; end >= count;) {
      const int first = end - count;
      int below = end;  // lowest start of a range overlapping [first, end)
      for (const range& r : ranges_)
        if (first < r.first + r.count && r.first < end && r.first < below) below = r.first;
      if (below == end) {
        ranges_.push_back(range{first, count, owner});
        return first;
      }
      end = below;
    }
    std::string held;
    for (const range& r : ranges_)
      held += (held.empty() ? "" : ", ") + ("[" + std::to_string(r.first) + ", " + std::to_string(r.first + r.count) +
                                            ") " + r.owner);
    throw error(errc::invalid_argument, owner + ": no " + std::to_string(count) + " free pad slots among the pads' " +
                                            std::to_string(slots_) + " (max_blocks; taken: " +
                                            (held.empty() ? std::string("none") : held) + ")");
  }

  // Gives back the range starting at `first` recorded or handed out before (owner, if not empty,
  // must be the name it was taken under): its slots may be handed out again. The pads' words of
  // those slots are not touched. Throws invalid_argument when no such range is held.
  void release(int first, const std::string& owner = {}) {
    for (auto it = ranges_.begin(); it != ranges_.end(); ++it) {
      if (it->first != first) continue;
      if (!owner.empty() && it->owner != owner)
        throw error(errc::invalid_argument, owner + ": pad slots from " + std::to_string(first) + " are held by " +
                                                it->owner + ", not by " + owner);
      ranges_.erase(it);
      return;
    }
    throw error(errc::invalid_argument, (owner.empty() ? std::string("slot_ranges::release") : owner) +
                                            ": no pad slot range starts at " + std::to_string(first));
  }

  // release() of a range from reserve_tiles(); its size must match.
  void release_tiles(tile_slots s, const std::string& owner = {}) {
    for (const range& r : ranges_)
      if (r.first == s.first && r.count != 1 + s.max_tiles)
        throw error(errc::invalid_argument, (owner.empty() ? r.owner : owner) + ": the pad slots [" +
                                                std::to_string(r.first) + ", " + std::to_string(r.first + r.count) +
                                                ") held are not the " + std::to_string(1 + s.max_tiles) +
                                                " slots given back");
    release(s.first, owner);
  }

  // reserve() of a tile-flag range of up to max_tiles tiles (1 + max_tiles slots).
  tile_slots reserve_tiles(int max_tiles, const std::string& owner) {
    if (max_tiles < 0)
      throw error(errc::invalid_argument, owner + ": max_tiles = " + std::to_string(max_tiles) + " must be >= 0");
    return tile_slots{reserve(1 + max_tiles, owner), max_tiles};
  }

 private:
  int slots_ = 0;
  std::vector<range> ranges_;
};

}  // namespace core
RCCLX_NAMESPACE_END
