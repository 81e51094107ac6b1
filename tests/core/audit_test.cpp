// The checked mode's audit words (core/tile_audit.hpp) on pads in host memory: where the rows lie,
// what a publish mark says, and the directory's verdicts when slot ranges bind bytes (apart,
// sharing bytes, sharing slots, the same range rebound to other bytes, after a reset), and one
// verdict per launch when several threads of it bind a range.
#include <rcclx/core/signal_pad.hpp>
#include <rcclx/core/tile_audit.hpp>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "../support/catch.hpp"

namespace {

namespace core = rcclx::core;
constexpr int max_r = 8;

struct host_pads {
  explicit host_pads(int slots) : l(core::pad_layout<max_r>::of(slots, core::ll_layout{0, 0})) {
    for (auto& m : mem) m.assign(l.bytes / 4 + 64, 0u);
    void* bases[max_r] = {};
    for (int p = 0; p < 2; ++p) bases[p] = mem[p].data();
    pads = core::signal_pads<max_r>::from_bases(bases, 0, 2, slots, 0, core::ll_layout{0, 0});
  }
  void reset() {
    for (auto& m : mem) m.assign(m.size(), 0u);
  }
  core::pad_layout<max_r> l;
  std::vector<std::uint32_t> mem[2];
  core::signal_pads<max_r> pads{};
};

}  // namespace

TEST_CASE("tile audit: publish marks carry the call and the block, never 0", "[pad][audit]") {
  for (std::uint32_t epoch : {1u, 2u, 0x7FFFu, 0x8000u, 0x10000u, 0xFFFFFFFFu, 0u}) {
    CAPTURE(epoch);
    for (int block : {0, 1, 65535, 65536 + 3}) {
      const std::uint32_t m = core::audit_mark(epoch, block);
      CHECK(m != 0u);
      CHECK(core::audit_mark_of(m, epoch));
      CHECK(!core::audit_mark_of(m, epoch + 1u));
      CHECK(!core::audit_mark_of(m, epoch - 1u));
      CHECK((m & 0xFFFFu) == (static_cast<std::uint32_t>(block) & 0xFFFFu));
    }
    CHECK(!core::audit_mark_of(0u, epoch));  // a row never written (or reset)
  }
}

TEST_CASE("tile audit: rows after the directory, one per slot, inside the pad", "[pad][audit]") {
  host_pads h(37);
  const auto* base = reinterpret_cast<const unsigned char*>(h.mem[0].data());
  CHECK(reinterpret_cast<const unsigned char*>(h.pads.audit_base()) - base == static_cast<std::ptrdiff_t>(h.l.audit));
  for (int s = 0; s < 37; ++s)
    CHECK(reinterpret_cast<const unsigned char*>(core::audit_row(h.pads, s)) - base ==
          static_cast<std::ptrdiff_t>(h.l.audit + core::audit_directory_bytes + 40 * static_cast<std::size_t>(s)));
  CHECK(h.l.audit + core::audit_directory_bytes + 37 * 40 <= h.l.bytes);
}

TEST_CASE("tile audit: the directory refuses ranges that share bytes or slots with a bound range", "[pad][audit]") {
  host_pads h(64);
  const std::uint64_t b = 0x100000;
  // [0, 9) bound to [b, b + 4096): alone, fine; binding it again costs nothing and stays fine.
  auto v = core::audit_bind(h.pads, core::tile_slots{0, 8}, b, b + 4096);
  CHECK(v.what == core::misuse{});
  v = core::audit_bind(h.pads, core::tile_slots{0, 8}, b, b + 4096);
  CHECK(v.what == core::misuse{});
  // Apart in slots and bytes.
  v = core::audit_bind(h.pads, core::tile_slots{9, 8}, b + 4096, b + 8192);
  CHECK(v.what == core::misuse{});
  // Sharing bytes with [0, 9)'s.
  v = core::audit_bind(h.pads, core::tile_slots{20, 4}, b + 1024, b + 2048);
  CHECK(v.what == core::misuse::region_overlap_bytes);
  CHECK(v.other == 0u);
  CHECK(v.mine == 20u);
  // Refused ranges are unbound: the next try compares again and is refused again.
  CHECK(core::audit_row(h.pads, 20)[core::audit_end_word] == 0u);
  v = core::audit_bind(h.pads, core::tile_slots{20, 4}, b + 1024, b + 2048);
  CHECK(v.what == core::misuse::region_overlap_bytes);
  // Sharing slots with [9, 18) (bytes apart).
  v = core::audit_bind(h.pads, core::tile_slots{12, 8}, b + 65536, b + 70000);
  CHECK(v.what == core::misuse::region_overlap_slots);
  CHECK(v.other == 9u);
  CHECK(v.mine == 12u);
  // A bound range rebound to other bytes (a buffer that moved) is fine while apart.
  v = core::audit_bind(h.pads, core::tile_slots{9, 8}, b + 1 * 65536 + 8192, b + 65536 + 12288);
  CHECK(v.what == core::misuse{});
  // [0, 9) unbound on the host (its bytes freed): a range over them is fine.
  core::audit_unbind(h.mem[0].data(), h.l, 0);
  v = core::audit_bind(h.pads, core::tile_slots{30, 4}, b, b + 4096);
  CHECK(v.what == core::misuse{});
  // The pads reset: nothing bound, the range that shared bytes is fine alone.
  h.reset();
  v = core::audit_bind(h.pads, core::tile_slots{20, 4}, b + 1024, b + 2048);
  CHECK(v.what == core::misuse{});
  // Ranges past the directory's slots are not compared.
  host_pads big(core::audit_directory_slots + 16);
  CHECK(core::audit_bind(big.pads, core::tile_slots{0, 8}, b, b + 4096).what == core::misuse{});
  CHECK(core::audit_bind(big.pads, core::tile_slots{core::audit_directory_slots + 2, 4}, b, b + 4096).what ==
        core::misuse{});
}

// Launch identities are the host backend's (a GPU build's host code has none).
#if !RCCLX_BACKEND_GPU
namespace {
// The host backend's launch identity of the calling thread (what gpu::launch_id() returns).
void set_launch(std::uint32_t id) { rcclx::gpu::detail::host_launch_id() = id; }
}  // namespace

TEST_CASE("tile audit: one thread of a launch decides a range, the launch's others take its verdict", "[pad][audit]") {
  host_pads h(64);
  const std::uint64_t b = 0x100000;
  const core::tile_slots a{0, 8}, o{6, 8};  // o shares slots 6..8 with a
  set_launch(5);
  REQUIRE(core::audit_bind(h.pads, a, b, b + 4096).what == core::misuse{});
  // A thread of launch 5 that loaded o's words before any decision, as a block's constructor does.
  const core::bound_words early = core::audit_bound_words(h.pads, o);
  auto v = core::audit_bind(h.pads, o, b + 8192, b + 12288);
  CHECK(v.what == core::misuse::region_overlap_slots);
  CHECK(!v.follows);
  CHECK(core::audit_row(h.pads, 6)[core::audit_end_word] == core::bind_word(core::bind_refused, 5, 15));
  // The early thread refuses too, without deciding again (its decider recorded why).
  v = core::audit_bind(h.pads, o, b + 8192, b + 12288, early);
  CHECK(v.refused());
  CHECK(v.follows);
  // So does a thread that finds the range refused when it loads the words.
  CHECK(core::audit_bind(h.pads, o, b + 8192, b + 12288).follows);
  // The next launch decides again, and is refused again while `a` is bound.
  set_launch(6);
  v = core::audit_bind(h.pads, o, b + 8192, b + 12288, early);
  CHECK(v.what == core::misuse::region_overlap_slots);
  CHECK(!v.follows);
  // `a` unbound on the host: the launch after binds `o`, and its threads with early words agree.
  core::audit_unbind(h.mem[0].data(), h.l, 0);
  set_launch(7);
  CHECK(!core::audit_bind(h.pads, o, b + 8192, b + 12288, early).refused());
  CHECK(core::audit_row(h.pads, 6)[core::audit_end_word] == core::bind_word(0u, 7, 15));
  CHECK(!core::audit_bind(h.pads, o, b + 8192, b + 12288, early).refused());
  // And a range over `a`'s slots is refused now.
  set_launch(8);
  CHECK(core::audit_bind(h.pads, a, b, b + 4096).what == core::misuse::region_overlap_slots);
  set_launch(0);
}

TEST_CASE("tile audit: a thread whose words predate its launch's decision takes it, never decides again", "[pad][audit]") {
  host_pads h(64);
  const std::uint64_t b = 0x100000;
  const core::tile_slots o{6, 8};
  set_launch(10);
  REQUIRE(!core::audit_bind(h.pads, o, b, b + 4096).refused());
  // Launch 11 rebinds `o` to other bytes (its buffer moved); one thread loaded the words before
  // another of the launch decided.
  set_launch(11);
  const core::bound_words early = core::audit_bound_words(h.pads, o);
  REQUIRE(!core::audit_bind(h.pads, o, b + 65536, b + 69632).refused());
  CHECK(core::audit_row(h.pads, 6)[core::audit_end_word] == core::bind_word(0u, 11, 15));
  // Then a range over `o`'s bytes starts its own decision: a second decision on `o` would see it
  // and refuse `o` in a launch whose other thread uses it. The early thread takes the decision made.
  std::uint32_t* q = core::audit_row(h.pads, 30);
  q[core::audit_lo_word] = static_cast<std::uint32_t>(b + 65536);
  q[core::audit_lo_word + 1] = static_cast<std::uint32_t>((b + 65536) >> 32);
  q[core::audit_hi_word] = static_cast<std::uint32_t>(b + 65536 + 100);
  q[core::audit_hi_word + 1] = static_cast<std::uint32_t>((b + 65536 + 100) >> 32);
  q[core::audit_end_word] = core::bind_word(core::bind_deciding, 11, 35);
  h.pads.audit_base()[0] |= 1u << 30;
  const core::bind_verdict v = core::audit_bind(h.pads, o, b + 65536, b + 69632, early);
  CHECK(!v.refused());
  CHECK(core::audit_row(h.pads, 6)[core::audit_end_word] == core::bind_word(0u, 11, 15));
  // A new decision would have refused it (what the next launch's does).
  set_launch(12);
  CHECK(core::audit_bind(h.pads, o, b + 65536, b + 69632, early).what == core::misuse::region_overlap_bytes);
  set_launch(0);
}

TEST_CASE("tile audit: a thread that finds its range being decided waits for the verdict (bounded)", "[pad][audit]") {
  const std::uint64_t b = 0x100000;
  const core::tile_slots o{6, 8};
  for (const std::uint32_t verdict : {core::bind_word(0u, 9, 15), core::bind_word(core::bind_refused, 9, 15), 0u}) {
    CAPTURE(verdict);
    host_pads h(64);
    h.pads.timeout_ns = verdict == 0u ? 20ull * 1000 * 1000 : 0u;  // no verdict comes: 20 ms
    std::uint32_t* end = &core::audit_row(h.pads, 6)[core::audit_end_word];
    *end = core::bind_word(core::bind_deciding, 9, 15);  // another thread of launch 9 decides
    core::bind_verdict v{};
    std::thread waiter([&] {
      set_launch(9);
      v = core::audit_bind(h.pads, o, b, b + 4096);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (verdict != 0u) __atomic_store_n(end, verdict, __ATOMIC_RELEASE);
    waiter.join();
    // The waiter took the verdict: it made no decision of its own (a decision sets the directory bit).
    CHECK((h.pads.audit_base()[0] & (1u << 6)) == 0u);
    if (verdict == core::bind_word(0u, 9, 15)) {
      CHECK(!v.refused());
    } else {
      CHECK(v.follows);
      CHECK(v.what == core::misuse{});
    }
    const core::error_record& e = *h.pads.err;
    if (verdict == 0u) {
      CHECK(e.code == static_cast<std::uint32_t>(rcclx::errc::timeout));
      CHECK(e.kind == static_cast<std::uint32_t>(core::barrier_kind::check));
    } else {
      CHECK(e.code == 0u);
    }
  }
}
#endif  // !RCCLX_BACKEND_GPU
