// rcclx/testing/emulated_world.hpp: N ranks in one process sharing one device (or host memory):
// a symmetric buffer and a signal pad per rank, and the per-rank device handles over them.
// The building block of emulated_peers and of users' tests of their own fused kernels.
//
//   rcclx::testing::emulated_world<8> world(num_ranks, buffer_bytes, max_blocks);
//   // optional: timeout_ns, and the LL regions of the pads (core::ll_layout, core/ll.hpp)
//   auto t = world.table<float>(rank);          // rcclx::core::peer_table<float, 8>
//   auto slots = world.reserve_tile_slots(64);   // pad slots of a tile-flag kernel (core/tile_flags.hpp)
//   ... launch ...
//   world.throw_if_error();                      // a timed-out barrier becomes rcclx::error
//
// The world owns the pads, so it hands their slot ranges out (core/slot_ranges.hpp): barrier-based
// grids take slots from 0 up (reserve_blocks records them), tile-flag users get theirs from the top.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../core/peer_table.hpp"
#include "../core/slot_ranges.hpp"
#include "../gpu/runtime.hpp"

RCCLX_NAMESPACE_BEGIN
namespace testing {

template <int MaxRanks = max_ranks>
class emulated_world {
 public:
  emulated_world(int num_ranks, std::size_t buffer_bytes, int max_blocks,
                 std::uint64_t timeout_ns = core::default_timeout_ns, core::ll_layout ll = core::default_ll_layout())
      : num_ranks_(num_ranks), buffer_bytes_(buffer_bytes), max_blocks_(max_blocks), timeout_ns_(timeout_ns),
        ll_(ll), slots_(max_blocks > 0 ? max_blocks : 0) {
    if (num_ranks < 2 || num_ranks > MaxRanks)
      throw error(errc::invalid_argument, "emulated_world: num_ranks = " + std::to_string(num_ranks) +
                                              " is outside [2, " + std::to_string(MaxRanks) + "]");
    if (max_blocks < 1) throw error(errc::invalid_argument, "emulated_world: max_blocks must be >= 1");
    core::check_ll_layout(ll);
    pad_bytes_ = core::signal_pad_bytes<MaxRanks>(max_blocks, ll);
    pads_ = static_cast<char*>(gpu::signal_malloc(pad_bytes_ * num_ranks));
    buffers_.resize(num_ranks, nullptr);
    for (int r = 0; r < num_ranks; ++r) buffers_[r] = gpu::device_malloc(buffer_bytes);
    // Every rank's table in device memory: emulated kernels index it by rank, so the kernel
    // argument stays small whatever the rank count (16 tables would not fit in 4 KiB).
    std::vector<core::peer_table<unsigned char, MaxRanks>> tables(num_ranks);
    for (int r = 0; r < num_ranks; ++r) tables[r] = table<unsigned char>(r);
    device_tables_ = gpu::device_malloc(sizeof(tables[0]) * num_ranks);
    gpu::copy(device_tables_, tables.data(), sizeof(tables[0]) * num_ranks);
  }
  emulated_world(const emulated_world&) = delete;
  emulated_world& operator=(const emulated_world&) = delete;
  ~emulated_world() {
    for (void* b : buffers_) gpu::device_free(b);
    gpu::device_free(pads_);
    gpu::device_free(device_tables_);
  }

  int num_ranks() const { return num_ranks_; }
  int max_blocks() const { return max_blocks_; }
  std::size_t buffer_bytes() const { return buffer_bytes_; }
  core::ll_layout ll() const { return ll_; }
  void* buffer(int rank) const { return buffers_.at(rank); }
  void* pad(int rank) const { return pads_ + pad_bytes_ * rank; }

  core::signal_pads<MaxRanks> signals(int rank) const {
    void* bases[MaxRanks] = {};
    for (int r = 0; r < num_ranks_; ++r) bases[r] = pad(r);
    return core::signal_pads<MaxRanks>::from_bases(bases, rank, num_ranks_, max_blocks_, timeout_ns_, ll_);
  }

  template <class T>
  core::peer_table<T, MaxRanks> table(int rank) const {
    core::peer_table<T, MaxRanks> t{};
    for (int r = 0; r < num_ranks_; ++r) t.data[r] = static_cast<T*>(buffers_[r]);
    t.capacity_bytes = buffer_bytes_;
    t.signals = signals(rank);
    return t;
  }

  // All ranks' tables in device memory, indexed by rank. peer_table<T> has the same layout for
  // every T (pointers, a byte capacity and the signal pads).
  template <class T>
  const core::peer_table<T, MaxRanks>* device_tables() const {
    static_assert(sizeof(core::peer_table<T, MaxRanks>) == sizeof(core::peer_table<unsigned char, MaxRanks>),
                  "peer_table layout must not depend on T");
    return static_cast<const core::peer_table<T, MaxRanks>*>(device_tables_);
  }

  // A slot range of the pads for a tile-flag user of up to max_tiles tiles (fused::tile_allreduce,
  // fused::combine): the highest free slots, apart from every range recorded or handed out before.
  // Throws invalid_argument when the pads (max_blocks) have no room.
  core::tile_slots reserve_tile_slots(int max_tiles, const std::string& owner = "a tile-flag kernel") {
    return slots_.reserve_tiles(max_tiles, owner);
  }
  // Gives a range from reserve_tile_slots back (its pad words are left as they are).
  void release_tile_slots(core::tile_slots s, const std::string& owner = {}) { slots_.release_tiles(s, owner); }
  // Records slots [0, blocks) as used by barrier-based grids of up to `blocks` blocks (block b uses
  // slot b), so no tile range is handed out over them.
  void reserve_blocks(int blocks, const std::string& owner = "barrier-based grids") { slots_.record(0, blocks, owner); }
  const core::slot_ranges& slot_ranges() const { return slots_; }

  // Error records of every rank (copied to the host).
  std::vector<core::error_record> errors() const {
    std::vector<core::error_record> out(num_ranks_);
    for (int r = 0; r < num_ranks_; ++r) {
      const auto s = signals(r);
      gpu::copy(&out[r], s.err, sizeof(core::error_record));
    }
    return out;
  }

  // Throws the first recorded error (a timed-out barrier names the missing rank).
  void throw_if_error() const {
    for (const auto& e : errors()) core::throw_if_error(e);
  }

  // Sets every counter and flag word (barrier flags and counters, LL epochs, tile control words,
  // check epochs) to `value`, clears the error records, the LL packets and the check packets: the
  // state after `value` calls of every protocol. reset() (value 0) is required after an error; tests
  // use other values to exercise counter wrap-around. Slot ranges handed out stay handed out.
  void reset(std::uint32_t value = 0) {
    gpu::device_synchronize();
    const auto l = core::pad_layout<MaxRanks>::of(max_blocks_, ll_);
    std::vector<std::uint32_t> host(pad_bytes_ / sizeof(std::uint32_t), 0u);
    const auto fill = [&](std::size_t from, std::size_t to) {
      for (std::size_t i = from / sizeof(std::uint32_t); i < to / sizeof(std::uint32_t); ++i) host[i] = value;
    };
    const std::size_t slots = static_cast<std::size_t>(max_blocks_);
    fill(l.tile_control, l.tile_control + slots * core::tile_control_words * sizeof(std::uint32_t));
    fill(l.flags, l.error);  // flags, counters, LL epochs
    fill(l.check_epochs, l.check_epochs + slots * sizeof(std::uint32_t));
    for (int r = 0; r < num_ranks_; ++r) gpu::copy(pad(r), host.data(), pad_bytes_);
  }

 private:
  int num_ranks_;
  std::size_t buffer_bytes_;
  int max_blocks_;
  std::uint64_t timeout_ns_;
  core::ll_layout ll_;
  std::size_t pad_bytes_ = 0;
  char* pads_ = nullptr;
  std::vector<void*> buffers_;
  void* device_tables_ = nullptr;
  core::slot_ranges slots_;
};

}  // namespace testing
RCCLX_NAMESPACE_END
