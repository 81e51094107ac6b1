// rcclx/testing/emulated_world.hpp: N ranks in one process sharing one device (or host memory):
// a symmetric buffer and a signal pad per rank, and the per-rank device handles over them.
// The building block of emulated_peers and of users' tests of their own fused kernels.
//
//   rcclx::testing::emulated_world<8> world(num_ranks, buffer_bytes, max_blocks);
//   // optional: timeout_ns, and the LL regions of the pads (core::ll_layout, core/ll.hpp)
//   auto t = world.table<float>(rank);          // rcclx::core::peer_table<float, 8>
//   auto slots = world.reserve_tile_slots(64);   // pad slots of a tile-flag kernel (core/tile_flags.hpp)
//   ... launch ...
//   world.throw_if_error();                      // recorded errors become rcclx::error, root cause first
//
// The world owns the pads, so it hands their slot ranges out (core/slot_ranges.hpp): barrier-based
// grids take slots from 0 up (reserve_blocks records them), tile-flag users get theirs from the top.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../core/peer_table.hpp"
#include "../core/slot_ranges.hpp"
#include "../core/tile_audit.hpp"
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

  // Every recorded error as one message, the root cause first: invalid_argument and mismatch
  // records (a rank that refused its call) before other errors, timeouts last, a timeout whose
  // missing rank has its own record followed by "rank N failed first: ...". Every rank's text stays
  // in the message. Empty when no record is set. All ranks are this program and ran in one launch
  // (describe_context{one_binary, one_launch}); *code (if given): the root cause's code.
  std::string describe_errors(errc* code = nullptr) const {
    return describe_records(audited_errors(), core::describe_context{true, true}, code);
  }
  // errors(), and in checked builds, for a rank without a record, the audit of the last call of
  // every tile slot range (core::audit_last_calls): tiles a call never published or never reduced,
  // which the device names only when a next call on the range runs.
  std::vector<core::error_record> audited_errors() const {
    std::vector<core::error_record> recs = errors();
#if RCCLX_CHECKS
    // Only the words the audit reads: the tile control rows and the audit region.
    const auto l = core::pad_layout<MaxRanks>::of(max_blocks_, ll_);
    const std::size_t control_bytes = core::audit_control_bytes(max_blocks_);
    const std::size_t audit_bytes = core::audit_region_bytes(max_blocks_);
    std::vector<std::uint32_t> control(control_bytes / sizeof(std::uint32_t));
    std::vector<std::uint32_t> audit(audit_bytes / sizeof(std::uint32_t));
    for (int r = 0; r < num_ranks_; ++r) {
      if (recs[static_cast<std::size_t>(r)].code != 0) continue;
      const char* base = static_cast<const char*>(pad(r));
      gpu::copy(control.data(), base + l.tile_control, control_bytes);
      gpu::copy(audit.data(), base + l.audit, audit_bytes);
      recs[static_cast<std::size_t>(r)] = core::audit_last_calls(control.data(), audit.data(), max_blocks_, r);
    }
#endif
    return recs;
  }
  static std::string describe_records(const std::vector<core::error_record>& recs, const core::describe_context& ctx,
                                      errc* code = nullptr) {
    const auto rank_of = [&](std::uint32_t rank) -> const core::error_record* {
      for (const auto& e : recs)
        if (e.code != 0 && e.waiting_rank == rank) return &e;
      return nullptr;
    };
    const auto order = [&](const core::error_record& e) {
      const auto c = static_cast<errc>(e.code);
      if (c == errc::invalid_argument || c == errc::mismatch || c == errc::misaligned || c == errc::unsupported)
        return 0;
      if (c != errc::timeout) return 1;
      return rank_of(e.missing_rank) == nullptr ? 2 : 3;  // a timeout with no other cause before one that has
    };
    std::vector<const core::error_record*> set;
    for (const auto& e : recs)
      if (e.code != 0) set.push_back(&e);
    std::stable_sort(set.begin(), set.end(),
                     [&](const core::error_record* a, const core::error_record* b) { return order(*a) < order(*b); });
    std::string m;
    for (const core::error_record* e : set) {
      if (!m.empty()) m += "; also ";
      m += core::describe(*e, ctx);
      if (e->code == static_cast<std::uint32_t>(errc::timeout) && e->missing_rank != e->waiting_rank)
        if (const core::error_record* cause = rank_of(e->missing_rank))
          if (cause->code != static_cast<std::uint32_t>(errc::timeout) || order(*cause) == 2)  // not a cycle
            m += " (rank " + std::to_string(e->missing_rank) + " failed first: " + core::describe(*cause, ctx) + ")";
    }
    if (code) *code = set.empty() ? errc::ok : static_cast<errc>(set.front()->code);
    return m;
  }

  // Throws every recorded error as one rcclx::error with the root cause's code (describe_errors).
  void throw_if_error() const {
    errc code = errc::ok;
    const std::string m = describe_errors(&code);
    if (code != errc::ok) throw error(code, m);
  }

  // Throws invalid_argument, naming the records, when any pad still holds an error record: a launch
  // on such pads would fail on the state the error left behind, not on its own (call before launching).
  void check_clean(const std::string& who) const {
    const std::string m = describe_errors();
    if (!m.empty())
      throw error(errc::invalid_argument, who + ": the pads still hold an earlier error (" + m +
                                              "): reset them (emulated_world::reset()) before the next launch");
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
