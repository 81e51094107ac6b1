// The checked mode's audit words (core/tile_audit.hpp) on pads in host memory: where the rows lie,
// what a publish mark says, and the directory's verdicts when slot ranges bind bytes (apart,
// sharing bytes, sharing slots, the same range rebound to other bytes, after a reset).
#include <rcclx/core/signal_pad.hpp>
#include <rcclx/core/tile_audit.hpp>

#include <cstdint>
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
