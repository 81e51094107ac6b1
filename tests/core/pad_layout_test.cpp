// The signal pad's one layout and its protocol objects: every region where pad_layout puts it and
// every accessor inside its own region; the first error record wins; slot ranges handed out apart
// (and where the old hand arithmetic put them); and each protocol keeps to its own words: a tile-flag
// call and a barrier on the same pads touch only the tile control row, the flags of their slots and
// the barrier's counters.
#include <rcclx/core/barrier.hpp>
#include <rcclx/core/peer_table.hpp>
#include <rcclx/core/signal_pad.hpp>
#include <rcclx/core/slot_ranges.hpp>
#include <rcclx/core/tile_audit.hpp>
#include <rcclx/core/tile_flags.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../support/catch.hpp"

namespace {

namespace core = rcclx::core;
constexpr int max_r = 8;

// The sizes of one small layout, written out: the layout is a function of (slots, ll) alone, so
// the checked mode's build (tests/checks) asserts the same number.
static_assert(core::signal_pad_bytes<8>(4, core::ll_layout{2, 256}) == 4352, "one pad layout");

template <int R>
void check_layout(int slots, core::ll_layout ll) {
  CAPTURE(R, slots, ll.blocks, ll.block_bytes);
  const auto l = core::pad_layout<R>::of(slots, ll);
  const bool on = ll.blocks > 0 && ll.block_bytes > 0;
  const std::size_t s = static_cast<std::size_t>(slots), lb = on ? static_cast<std::size_t>(ll.blocks) : 0;
  REQUIRE(l.tile_control == 0);
  REQUIRE(l.flags % 256 == 0);
  REQUIRE(l.flags >= s * core::tile_control_words * 4);
  REQUIRE(l.counters == l.flags + s * R * 4);
  REQUIRE(l.ll_epochs == l.flags + 2 * s * R * 4);
  REQUIRE(l.error == l.ll_epochs + lb * 4);
  REQUIRE(l.check_epochs == l.error + sizeof(core::error_record));
  REQUIRE(l.check % 32 == 0);
  REQUIRE(l.check >= l.check_epochs + s * 4);
  REQUIRE(l.ll % 256 == 0);
  REQUIRE(l.ll >= l.check + 2 * s * core::check_packet_bytes);
  // The audit region comes after everything else: every offset before it is the one the layout had
  // without it (written out here), and the pad grows by the directory and a row of 8 words per slot.
  const std::size_t flags = (s * 4 * 4 + 255) / 256 * 256, cnt = s * R * 4, err = 2 * cnt + lb * 4;
  const std::size_t chk = (err + 32 + s * 4 + 31) / 32 * 32, llo = (chk + 2 * s * 32 + 255) / 256 * 256;
  const std::size_t old_bytes = flags + llo + (on ? 4 * lb * ll.block_bytes : 0);
  REQUIRE(l.flags == flags);
  REQUIRE(l.counters == flags + cnt);
  REQUIRE(l.error == flags + err);
  REQUIRE(l.check == flags + chk);
  REQUIRE(l.ll == flags + llo);
  REQUIRE(l.audit == old_bytes);
  REQUIRE(l.audit % 256 == 0);
  REQUIRE(l.bytes == old_bytes + (1024 + 40 * s + 255) / 256 * 256);
  REQUIRE(l.bytes % 256 == 0);
  REQUIRE(core::signal_pad_bytes<R>(slots, ll) == l.bytes);

  // The handle over pads in host memory: every accessor inside its region of the right pad.
  const int n = R < 3 ? R : 3, last = n - 1;
  std::vector<std::vector<unsigned char>> mem(n, std::vector<unsigned char>(l.bytes + 256));
  void* bases[R] = {};
  for (int p = 0; p < n; ++p)
    bases[p] = mem[p].data() + (256 - reinterpret_cast<std::uintptr_t>(mem[p].data()) % 256) % 256;
  const int rank = 1;
  const auto pads = core::signal_pads<R>::from_bases(bases, rank, n, slots, 0, ll);
  const auto at = [&](const void* p, int owner) {
    return static_cast<std::size_t>(static_cast<const unsigned char*>(p) - static_cast<unsigned char*>(bases[owner]));
  };
  REQUIRE(pads.layout().bytes == l.bytes);
  for (int b = 0; b < slots; ++b) {
    for (int q = 0; q < n; ++q) {
      REQUIRE(at(pads.inbox_slot(last, b, q), last) == l.flags + (static_cast<std::size_t>(b) * R + q) * 4);
      REQUIRE(at(pads.counter_slot(b, q), rank) == l.counters + (static_cast<std::size_t>(b) * R + q) * 4);
    }
    REQUIRE(at(pads.tile_control_slot(b), rank) == l.tile_control + static_cast<std::size_t>(b) * 16);
    REQUIRE(at(pads.check_epoch_slot(b), rank) == l.check_epochs + static_cast<std::size_t>(b) * 4);
    for (std::uint32_t parity = 0; parity < 2; ++parity)
      REQUIRE(at(pads.check_packet(0, parity, b), 0) == l.check + (parity * s + static_cast<std::size_t>(b)) * 32);
    REQUIRE(at(core::audit_row(pads, b), rank) == l.audit + 1024 + static_cast<std::size_t>(b) * 40);
  }
  REQUIRE(at(pads.audit_base(), rank) == l.audit);
  REQUIRE(at(core::audit_row(pads, slots - 1) + core::audit_row_words, rank) <= l.bytes);
  REQUIRE(at(pads.err, rank) == l.error);
  for (std::size_t b = 0; b < lb; ++b) {
    REQUIRE(at(pads.ll_epoch_slot(static_cast<int>(b)), rank) == l.ll_epochs + b * 4);
    for (std::uint32_t parity = 0; parity < 2; ++parity)
      REQUIRE(at(pads.ll_region(last, parity, static_cast<int>(b)), last) ==
              l.ll + (parity * lb + b) * 2 * ll.block_bytes);
  }
}

// Each block: a tile-flag call (tile b raised for every peer, every peer's tile b awaited, finish),
// then a barrier on its own block slot split into arrive and wait.
struct protocols_kernel {
  const core::peer_table<unsigned char, max_r>* tables;
  core::tile_slots slots;
  std::uint32_t* failures;

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, rcclx::testing::launch_index ix) const {
    const core::signal_pads<max_r>& s = tables[ix.rank].signals;
    bool ok = true;
    {
      const core::tile_flags<max_r> f(s, slots);
      g.sync();
      for (int p = g.thread_rank(); p < ix.num_ranks; p += g.size())
        if (p != ix.rank) f.raise(ix.block, p);
      bool failed = false;
      for (int p = g.thread_rank(); p < ix.num_ranks && !failed; p += g.size())
        if (p != ix.rank) failed = !f.wait(ix.block, p, ix.block);
      ok = !g.sync_or(failed);
      f.finish(g, ix.num_blocks);
    }
    const core::barrier_session<Group, max_r> b(g, s, ix.block);
    b.arrive();
    ok = b.wait(core::barrier_kind::end) && ok;
    if (!ok && g.thread_rank() == 0) rcclx::gpu::fetch_add_local(failures, 1u);
  }
};

std::vector<std::uint32_t> pad_words(const rcclx::testing::emulated_world<max_r>& w, int rank) {
  const std::size_t bytes = core::signal_pad_bytes<max_r>(w.max_blocks(), w.ll());
  std::vector<std::uint32_t> words(bytes / 4);
  rcclx::gpu::copy(words.data(), w.pad(rank), bytes);
  return words;
}

}  // namespace

TEST_CASE("pad_layout: every region where the one layout puts it, every accessor inside its own", "[pad]") {
  check_layout<8>(1, core::ll_layout{0, 0});
  check_layout<8>(4, core::ll_layout{2, 256});
  check_layout<8>(37, core::ll_layout{8, 8192});
  check_layout<8>(5, core::ll_layout{8, 0});  // either field 0: no LL region, no LL epochs
  check_layout<16>(130, core::default_ll_layout());
  check_layout<2>(3, core::ll_layout{1, 512});
}

TEST_CASE("record_error: the first failure of a rank is the one recorded", "[pad]") {
  const auto l = core::pad_layout<max_r>::of(2, core::ll_layout{0, 0});
  std::vector<std::uint32_t> mem0(l.bytes / 4), mem1(l.bytes / 4);
  void* bases[max_r] = {mem0.data(), mem1.data()};
  const auto pads = core::signal_pads<max_r>::from_bases(bases, 1, 2, 2, 0, core::ll_layout{0, 0});
  core::record_error(pads, rcclx::errc::timeout, 0, 4u, 7, 9u, 8u, 0u);
  core::record_error(pads, rcclx::errc::mismatch, 0, 1u, 1, 1u, 1u, 1u);  // later: ignored
  const core::error_record& r = *pads.err;
  CHECK(r.code == static_cast<std::uint32_t>(rcclx::errc::timeout));
  CHECK(r.waiting_rank == 1u);
  CHECK(r.missing_rank == 0u);
  CHECK(r.kind == 4u);
  CHECK(r.block == 7u);
  CHECK(r.call == 9u);
  CHECK(r.observed == 8u);
  CHECK(r.reserved == 0u);
}

TEST_CASE("slot_ranges: ranges handed out from the top, apart from each other and from recorded ones", "[pad]") {
  // The range the hand arithmetic gave: pads of pad_blocks_for(blocks, tiles) slots.
  for (int blocks : {0, 3, 32})
    for (int tiles : {0, 1, 64}) {
      core::slot_ranges r(core::pad_blocks_for(blocks, tiles));
      const core::tile_slots t = r.reserve_tiles(tiles, "kernel");
      CHECK(t.first == blocks);
      CHECK(t.max_tiles == tiles);
      CHECK(t.end() == r.slots());
    }
  core::slot_ranges r(100);
  r.record(0, 10, "the collectives");
  const core::tile_slots a = r.reserve_tiles(19, "a");  // [80, 100)
  const core::tile_slots b = r.reserve_tiles(9, "b");   // [70, 80)
  CHECK(a.first == 80);
  CHECK(b.first == 70);
  CHECK(b.end() == a.first);
  const int c = r.reserve(60, "c");  // [10, 70): exactly the gap
  CHECK(c == 10);
  std::string msg;
  try {
    r.reserve(1, "d");
  } catch (const rcclx::error& e) {
    msg = e.what();
    CHECK(e.code() == rcclx::errc::invalid_argument);
  }
  CHECK(msg.find("no 1 free pad slots") != std::string::npos);
  CHECK(msg.find("[0, 10) the collectives") != std::string::npos);
  msg.clear();
  core::slot_ranges q(16);
  q.reserve_tiles(3, "tiles");  // [12, 16)
  try {
    q.record(0, 13, "barrier grids");
  } catch (const rcclx::error& e) {
    msg = e.what();
  }
  CHECK(msg.find("overlap [12, 16) of tiles") != std::string::npos);
  CHECK_THROWS_AS(q.record(10, 7, "past the end"), rcclx::error);
  // A gap below a range is found even when the top is taken.
  core::slot_ranges g(20);
  g.record(15, 5, "top");
  g.record(0, 5, "bottom");
  CHECK(g.reserve(10, "middle") == 5);
}

TEST_CASE("tile flags and barriers on one pad keep to their own words", "[pad]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const int n = GENERATE(2, 5);
  CAPTURE(n);
#if RCCLX_BACKEND_HOST
  const int blocks = 3, threads = 1;
#else
  const int blocks = 4, threads = 64;
#endif
  rcclx::testing::emulated_world<max_r> world(n, 256, core::pad_blocks_for(blocks, blocks), 2ull * 1000 * 1000 * 1000,
                                              core::ll_layout{2, 256});
  world.reserve_blocks(blocks);
  const core::tile_slots slots = world.reserve_tile_slots(blocks);
  REQUIRE(slots.first == blocks);
  auto* failures = static_cast<std::uint32_t*>(rcclx::gpu::device_malloc(sizeof(std::uint32_t)));
  rcclx::gpu::memset_zero(failures, sizeof(std::uint32_t));
  const protocols_kernel k{world.device_tables<unsigned char>(), slots, failures};
  const int calls = 3;
  for (int c = 0; c < calls; ++c) {
    rcclx::testing::launch_emulated(n, blocks, threads, k);
    rcclx::gpu::device_synchronize();
  }
  std::uint32_t failed = 1;
  rcclx::gpu::copy(&failed, failures, sizeof failed);
  rcclx::gpu::device_free(failures);
  REQUIRE(failed == 0);
  REQUIRE_NOTHROW(world.throw_if_error());

  const auto l = core::pad_layout<max_r>::of(world.max_blocks(), world.ll());
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    const std::vector<std::uint32_t> w = pad_words(world, r);
    const auto word = [&](std::size_t byte_offset) { return w[byte_offset / 4]; };
    for (int slot = 0; slot < world.max_blocks(); ++slot) {
      CAPTURE(slot);
      const bool barrier_slot = slot < blocks, control = slot == slots.first;
      const int tile = slot - slots.first - 1;
      for (int p = 0; p < max_r; ++p) {
        const std::size_t i = (static_cast<std::size_t>(slot) * max_r + p) * 4;
        const bool peer = p < n && p != r;
        // Flags: barrier slots carry `calls` barriers, tile slots the last call's epoch, the
        // control slot nothing.
        const std::uint32_t flag = !peer || control ? 0u : barrier_slot ? calls : tile < blocks ? calls : 0u;
        CHECK(word(l.flags + i) == flag);
        CHECK(word(l.counters + i) == (barrier_slot && peer ? static_cast<std::uint32_t>(calls) : 0u));
      }
      const std::size_t row = l.tile_control + static_cast<std::size_t>(slot) * 16;
      CHECK(word(row + 0) == (control ? static_cast<std::uint32_t>(calls) : 0u));              // calls completed
      CHECK(word(row + 4) == (control ? static_cast<std::uint32_t>(calls * blocks) : 0u));     // blocks arrived
      CHECK(word(row + 8) == (control ? static_cast<std::uint32_t>(calls * blocks) : 0u));     // at the call's start
      CHECK(word(l.check_epochs + static_cast<std::size_t>(slot) * 4) == 0u);                  // the check's own
    }
    for (int b = 0; b < 2; ++b) CHECK(word(l.ll_epochs + static_cast<std::size_t>(b) * 4) == 0u);
  }
  // reset(value) sets every protocol's words, the tile control rows included.
  world.reset(7);
  const std::vector<std::uint32_t> w = pad_words(world, 0);
  CHECK(w[(l.tile_control + static_cast<std::size_t>(slots.first) * 16) / 4] == 7u);
  CHECK(w[(l.tile_control + static_cast<std::size_t>(slots.first) * 16 + 12) / 4] == 7u);
  CHECK(w[l.counters / 4] == 7u);
  CHECK(w[l.error / 4] == 0u);
  CHECK(w[l.check_epochs / 4] == 7u);
}
