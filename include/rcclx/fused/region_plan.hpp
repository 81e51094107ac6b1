// rcclx/fused/region_plan.hpp: the regions (core/region.hpp) of the collectives of one kernel,
// planned once on the host: each call adds what it needs, the plan says how many buffer bytes and
// pad slots the owner must provide, and place() gives every call bytes and slots of its own.
//
//   rcclx::fused::region_plan plan;                          // the same calls on every rank
//   const auto ar1 = plan.add(fz::tile_allreduce<bf16, 8>::need(tile_elems, max_tiles), "o_proj");
//   const auto ar2 = plan.add(fz::tile_allreduce<bf16, 8>::need(tile_elems, max_tiles), "down_proj");
//   rcclx::testing::emulated_world<8> world(n, plan.bytes(), plan.slots());
//   plan.place(world);                                       // reserves the slots on the world
//   my_kernel k{world.device_tables<bf16>(), plan[ar1], plan[ar2]};   // regions: kernel arguments
//
// Host bookkeeping only: regions follow each other in the order they were added, each rounded up to
// 256 bytes, so that regions of one plan never share a byte or a slot. Every rank must make the same
// calls in the same order (the regions are then the same on every rank, as the device checks need).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "../config.hpp"
#include "../core/error.hpp"
#include "../core/region.hpp"
#include "../core/slot_ranges.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {

class region_plan {
 public:
  using handle = int;
  static constexpr std::size_t alignment = 256;  // every region's offset and byte count

  // A tile-flag call (tile_allreduce / combine ::need()): bytes rounded up to 256, 1 + max_tiles
  // pad slots (a control slot and one per tile).
  handle add(const core::region_need& n, std::string name) {
    const std::string who = "region_plan::add(\"" + name + "\")";
    refuse_after_place(who);
    if (n.max_tiles < 0)
      throw error(errc::invalid_argument, who + ": max_tiles = " + std::to_string(n.max_tiles) + " must be >= 0");
    if (n.sized_for == 0 || n.sized_for > core::sized_for_any)
      throw error(errc::invalid_argument, who + ": sized_for = " + std::to_string(n.sized_for) +
                                              " is not 1 (flat), 2 (tree) or 3 (both)");
    if (n.max_tiles > std::numeric_limits<int>::max() - 1 - slots_)
      throw error(errc::invalid_argument, who + ": 1 + max_tiles = 1 + " + std::to_string(n.max_tiles) +
                                              " slots overflow the plan's " + std::to_string(slots_) + " slots");
    return push(who, n.bytes, core::tile_slots{slots_, n.max_tiles}, 1 + n.max_tiles, n.sized_for, std::move(name));
  }

  // Bytes without pad slots: a dda device template's buffer (core::region_table), scratch.
  handle add_bytes(std::size_t bytes, std::string name) {
    const std::string who = "region_plan::add_bytes(\"" + name + "\")";
    refuse_after_place(who);
    return push(who, bytes, core::tile_slots{0, -1}, 0, core::sized_for_any, std::move(name));
  }

  // What the owner must provide: bytes of every rank's buffer (from `base`), pad slots.
  std::size_t bytes() const { return bytes_; }
  int slots() const { return slots_; }
  int size() const { return static_cast<int>(entries_.size()); }
  bool placed() const { return placed_; }
  // The slots the plan was placed on ({first, slots() - 1}; {0, -1} when it has none).
  core::tile_slots slot_block() const { return block_; }
  std::size_t base() const { return base_; }
  const std::string& name(handle h) const { return at(h, "region_plan::name").name; }

  // Places the plan on the owner of the buffers and pads (testing::emulated_world,
  // host::communicator, anything with buffer_bytes() and reserve_tile_slots(max_tiles, owner)): the
  // plan's regions start at `base` of every rank's buffer and its slots are reserved on the owner
  // (give them back with release(owner)). Throws invalid_argument, reserving nothing, when
  // base + bytes() exceeds the owner's buffer; the owner's own error when its pads lack the slots.
  template <class Owner>
  void place(Owner& owner, std::size_t base = 0) {
    check_place("region_plan::place", owner.buffer_bytes(), base);
    const core::tile_slots block =
        slots_ > 0 ? owner.reserve_tile_slots(slots_ - 1, owner_name()) : core::tile_slots{0, -1};
    place(block, owner.buffer_bytes(), base);
  }

  // Places the plan by hand: on slots [block.first, block.end()) (block.max_tiles = slots() - 1,
  // e.g. from slot_ranges::reserve_tiles(slots() - 1)) and bytes [base, base + bytes()) of buffers
  // of buffer_bytes each. The caller keeps the slots apart from every other user of the pads.
  void place(core::tile_slots block, std::size_t buffer_bytes, std::size_t base = 0) {
    check_place("region_plan::place", buffer_bytes, base);
    if (slots_ > 0 && (block.first < 0 || block.max_tiles != slots_ - 1))
      throw error(errc::invalid_argument, "region_plan::place: the slot block {first " + std::to_string(block.first) +
                                              ", max_tiles " + std::to_string(block.max_tiles) +
                                              "} does not hold the plan's " + std::to_string(slots_) +
                                              " slots (max_tiles must be " + std::to_string(slots_ - 1) + ")");
    block_ = slots_ > 0 ? block : core::tile_slots{0, -1};
    base_ = base;
    for (entry& e : entries_) {
      e.r.offset = base + e.offset;
      if (e.r.slots.max_tiles >= 0) e.r.slots.first = block_.first + e.first_slot;
    }
    placed_ = true;
  }

  // Gives the plan's slots back to the owner (host::communicator, testing::emulated_world:
  // release_tile_slots) and makes the plan unplaced: it may then be placed again.
  template <class Owner>
  void release(Owner& owner) {
    if (!placed_) throw error(errc::invalid_argument, "region_plan::release: the plan is not placed");
    if (slots_ > 0) owner.release_tile_slots(block_, owner_name());
    unplace();
  }
  // Forgets the placement (slots placed by hand are the caller's to give back).
  void unplace() {
    placed_ = false;
    block_ = core::tile_slots{0, -1};
    base_ = 0;
  }

  // The region of call `h` (a kernel argument). Throws invalid_argument before place().
  const core::region& operator[](handle h) const {
    const entry& e = at(h, "region_plan[]");
    if (!placed_)
      throw error(errc::invalid_argument, "region_plan[" + std::to_string(h) + "] (\"" + e.name +
                                              "\"): the plan is not placed yet: call place(owner) first");
    return e.r;
  }

  // One line per region: id, name, bytes, slots, what the bytes were sized for.
  std::string describe() const {
    std::string s = "region plan: " + std::to_string(entries_.size()) + " regions, " + std::to_string(bytes_) +
                    " bytes, " + std::to_string(slots_) + " pad slots";
    if (placed_)
      s += " (placed at byte " + std::to_string(base_) +
           (slots_ > 0 ? ", slot " + std::to_string(block_.first) : std::string(", no slots")) + ")";
    else
      s += " (not placed: offsets and slots relative to the plan)";
    for (const entry& e : entries_) {
      const std::size_t off = placed_ ? e.r.offset : e.offset;
      s += "\n  " + std::to_string(e.r.id) + " \"" + e.name + "\": bytes [" + std::to_string(off) + ", " +
           std::to_string(off + e.r.bytes) + ")";
      if (e.r.slots.max_tiles >= 0) {
        const int first = placed_ ? e.r.slots.first : e.first_slot;
        s += ", slots [" + std::to_string(first) + ", " + std::to_string(first + 1 + e.r.slots.max_tiles) + ") (" +
             std::to_string(e.r.slots.max_tiles) + " tiles)";
      } else {
        s += ", no slots";
      }
      s += ", sized for " + std::string(e.r.sized_for == core::sized_for_flat   ? "flat"
                                        : e.r.sized_for == core::sized_for_tree ? "tree"
                                                                                : "flat and tree");
    }
    return s;
  }

 private:
  struct entry {
    core::region r;       // as placed (offset and slots absolute once placed)
    std::size_t offset;   // from the plan's base
    int first_slot;       // from the plan's first slot
    std::string name;
  };

  handle push(const std::string& who, std::size_t bytes, core::tile_slots s, int slot_count, std::uint32_t sized_for,
              std::string name) {
    const std::size_t max = std::numeric_limits<std::size_t>::max() - alignment;
    if (bytes > max - bytes_)
      throw error(errc::invalid_argument,
                  who + ": bytes = " + std::to_string(bytes) + " overflow the plan's " + std::to_string(bytes_));
    const std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    if (entries_.size() >= std::numeric_limits<std::uint32_t>::max() - 1u)
      throw error(errc::invalid_argument, who + ": too many regions");
    entry e{};
    e.r = core::region{bytes_, rounded, s, static_cast<std::uint32_t>(entries_.size() + 1), sized_for};
    e.offset = bytes_;
    e.first_slot = slots_;
    e.name = std::move(name);
    entries_.push_back(std::move(e));
    bytes_ += rounded;
    slots_ += slot_count;
    return static_cast<handle>(entries_.size() - 1);
  }

  const entry& at(handle h, const char* who) const {
    if (h < 0 || h >= static_cast<handle>(entries_.size()))
      throw error(errc::invalid_argument, std::string(who) + ": handle " + std::to_string(h) +
                                              " is not one of this plan's " + std::to_string(entries_.size()) +
                                              " regions");
    return entries_[static_cast<std::size_t>(h)];
  }

  void refuse_after_place(const std::string& who) const {
    if (placed_)
      throw error(errc::invalid_argument, who + ": the plan is already placed; add every region before place()");
  }

  void check_place(const char* who, std::size_t buffer_bytes, std::size_t base) const {
    if (placed_)
      throw error(errc::invalid_argument, std::string(who) + ": the plan is already placed (release it first)");
    if (base % alignment != 0)
      throw error(errc::invalid_argument, std::string(who) + ": base = " + std::to_string(base) +
                                              " is not a multiple of " + std::to_string(alignment));
    if (base > buffer_bytes || bytes_ > buffer_bytes - base)
      throw error(errc::invalid_argument, std::string(who) + ": base + bytes() = " + std::to_string(base) + " + " +
                                              std::to_string(bytes_) + " exceeds the buffer's " +
                                              std::to_string(buffer_bytes) + " bytes");
  }

  std::string owner_name() const {
    std::string s = "region plan (";
    for (std::size_t i = 0; i < entries_.size(); ++i) s += (i ? ", " : "") + entries_[i].name;
    return s + ")";
  }

  std::vector<entry> entries_;
  std::size_t bytes_ = 0;
  int slots_ = 0;
  bool placed_ = false;
  core::tile_slots block_{0, -1};
  std::size_t base_ = 0;
};

}  // namespace fused
RCCLX_NAMESPACE_END
