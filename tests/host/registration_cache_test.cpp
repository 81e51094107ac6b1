// multinode::registration_cache (engine registrations keyed on the allocation) with a counting
// registrar and a fake allocation table: one registration per allocation, hits for interior
// buffers, LRU eviction of unpinned entries, a freed-and-reused address range (a new allocation
// identity) never a stale hit, forget before free, failures that change nothing. Then
// multinode::hierarchical with one node of one rank over a loopback engine that registers: every
// buffer an engine operation touches is registered, repeated calls register nothing, and
// register_buffers = false registers nothing (host backend: no MPI needed).
#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

#include <rcclx/multinode/hierarchical.hpp>
#include <rcclx/multinode/registration.hpp>

#include "../support/catch.hpp"

namespace {

namespace mn = rcclx::multinode;

struct counting_registrar {
  std::map<void*, int>* live;  // base -> registrations alive
  int* registrations;
  bool* fail_next;
  void* register_memory(void* base, std::size_t) {
    if (*fail_next) {
      *fail_next = false;
      throw rcclx::error(rcclx::errc::runtime, "cannot register");
    }
    ++(*live)[base];
    ++*registrations;
    return base;
  }
  void deregister_memory(void* h) {
    if ((*live)[h]-- < 1) throw std::runtime_error("deregistered while not registered");
  }
};

// Allocations of a pretend runtime: [base, base + size) with an identity that changes when the
// range is freed and handed out again.
struct fake_allocations {
  struct alloc {
    std::uintptr_t base;
    std::size_t size;
    std::uint64_t id;
  };
  std::vector<alloc>* table;
  mn::allocation_key operator()(const void* p, std::size_t) const {
    const auto x = reinterpret_cast<std::uintptr_t>(p);
    for (const auto& a : *table)
      if (x >= a.base && x < a.base + a.size) return {a.base, a.size, a.id};
    throw rcclx::error(rcclx::errc::invalid_argument, "not an allocation");
  }
};

void* at(std::uintptr_t x) { return reinterpret_cast<void*>(x); }

}  // namespace

TEST_CASE("registration_cache: one registration per allocation, LRU, identity, forget", "[host][multinode][registration]") {
  std::map<void*, int> live;
  int registrations = 0;
  bool fail_next = false;
  std::vector<fake_allocations::alloc> table{{0x10000, 0x1000, 1}, {0x20000, 0x1000, 2}, {0x30000, 0x1000, 3}};
  {
    mn::registration_cache<counting_registrar, fake_allocations> cache(
        1, counting_registrar{&live, &registrations, &fail_next}, fake_allocations{&table});
    {
      mn::registration a = cache.acquire(at(0x10010), 64);
      mn::registration b = cache.acquire(at(0x10800), 128);  // the same allocation: a hit
      REQUIRE(registrations == 1);
      REQUIRE(a.active());
      REQUIRE(a.handle() == at(0x10000));
      REQUIRE(b.allocation().base == 0x10000);
      REQUIRE(cache.stats().hits == 1);
      REQUIRE(cache.is_registered(at(0x10fff)));
      REQUIRE_FALSE(cache.is_registered(at(0x20000)));
      mn::registration c = cache.acquire(at(0x20000), 16);  // 2 pinned entries, capacity 1: kept
      REQUIRE(cache.size() == 2);
      REQUIRE_THROWS_AS(cache.forget(at(0x10020)), rcclx::error);  // pinned: in use
      mn::registration moved = std::move(c);
      REQUIRE_FALSE(c.active());
      REQUIRE(moved.active());
    }  // all unpinned; over capacity: the least recently released one is deregistered
    REQUIRE(cache.size() == 1);
    REQUIRE(cache.stats().evictions == 1);
    // Allocation 1 freed and its range handed out again: a new identity, a new registration.
    const int before = registrations;
    table[0].id = 11;
    { auto r = cache.acquire(at(0x10010), 64); }
    REQUIRE(registrations == before + 1);
    // forget: deregistered now (before the memory is freed); a second forget is a no-op.
    cache.forget(at(0x10010));
    REQUIRE_FALSE(cache.is_registered(at(0x10010)));
    cache.forget(at(0x10010));
    // Failures change nothing: a buffer past its allocation's end, a failed registration.
    const auto s = cache.stats();
    REQUIRE_THROWS_AS(cache.acquire(at(0x30ff0), 64), rcclx::error);
    REQUIRE_THROWS_AS(cache.acquire(nullptr, 64), rcclx::error);
    fail_next = true;
    REQUIRE_THROWS_AS(cache.acquire(at(0x30000), 64), rcclx::error);
    REQUIRE(cache.stats().opens == s.opens);
    REQUIRE(cache.size() == s.open_now);
    { auto r = cache.acquire(at(0x30000), 64); }  // retried: registered
    REQUIRE(cache.stats().opens == s.opens + 1);
  }  // teardown deregisters the rest
  for (const auto& kv : live) REQUIRE(kv.second == 0);
}

#if RCCLX_BACKEND_HOST
namespace {

// One node: the engine's operations are copies. Registers through a cache (the host backend keys
// the range itself) and checks that every operation's buffers lie in a live registration.
class loopback_engine final : public mn::engine {
 public:
  loopback_engine() : cache_(8, counting_registrar{&live_, &registrations_, &fail_}) {}
  int rank() const override { return 0; }
  int num_ranks() const override { return 1; }
  const char* name() const override { return "loopback"; }
  bool registers_buffers() const override { return true; }
  mn::registration register_buffer(void* p, std::size_t bytes) override {
    auto r = cache_.acquire(p, bytes);
    ranges_[p] = bytes;
    return r;
  }
  void forget_buffer(const void* p) override { cache_.forget(p); }
  mn::registration_stats registrations() const override { return cache_.stats(); }
  void allreduce(const void* in, void* out, std::size_t count, mn::data_type t, rcclx::gpu::stream_t) override {
    check(in, count * mn::size_of(t));
    check(out, count * mn::size_of(t));
    std::memmove(out, in, count * mn::size_of(t));
  }
  void allgather(const void* in, void* out, std::size_t bytes, rcclx::gpu::stream_t) override {
    if (bytes != 256) {  // the call descriptors are not registered
      check(in, bytes);
      check(out, bytes);
    }
    std::memmove(out, in, bytes);
  }
  bool expect_registered = true;
  int unregistered = 0;

 private:
  void check(const void* p, std::size_t bytes) {
    if (!expect_registered) return;
    const auto x = reinterpret_cast<std::uintptr_t>(p);
    for (const auto& kv : ranges_) {
      const auto b = reinterpret_cast<std::uintptr_t>(kv.first);
      if (x >= b && x + bytes <= b + kv.second && cache_.is_registered(kv.first)) return;
    }
    ++unregistered;
  }
  std::map<void*, int> live_;
  std::map<void*, std::size_t> ranges_;
  int registrations_ = 0;
  bool fail_ = false;
  mn::registration_cache<counting_registrar> cache_;
};

}  // namespace

TEST_CASE("hierarchical, one node of one rank: every engine buffer registered, once", "[host][multinode][registration]") {
  loopback_engine eng;
  mn::hierarchical_options o;
  o.chunk_bytes = 4096;  // several chunks
  std::vector<float> x(5000), y(5000), g(5000);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 97) * 0.0625f - 3.0f;  // in [-3, 3]
  {
    mn::hierarchical<> h(eng, mn::node_topology{0, 1, 0, 1}, o);
    REQUIRE(h.intra_node() == nullptr);
    REQUIRE(h.registers_buffers());
    for (auto hop : {mn::inter_node::exact, mn::inter_node::engine_reduce}) {
      h.allreduce(x.data(), y.data(), x.size(), hop);
      REQUIRE(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);  // one node: the input
      h.allgather(x.data(), g.data(), x.size(), hop);
      REQUIRE(std::memcmp(x.data(), g.data(), x.size() * sizeof(float)) == 0);
      h.reduce_scatter(x.data(), y.data(), x.size(), hop);
      REQUIRE(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
    }
    h.allreduce(x.data(), y.data(), x.size(), mn::inter_node::low_precision);  // FP8 once: within 1/28 of the block amax
    for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(std::fabs(y[i] - x[i]) <= 3.0f / 28 + 1e-6f);
    h.allreduce(x.data() + 1, y.data(), x.size() - 1, mn::inter_node::low_precision);  // unaligned input: copied first
    for (std::size_t i = 0; i + 1 < x.size(); ++i) REQUIRE(std::fabs(y[i] - x[i + 1]) <= 3.0f / 28 + 1e-6f);
    REQUIRE(eng.unregistered == 0);
    const auto pass = [&] {
      for (auto hop : {mn::inter_node::exact, mn::inter_node::engine_reduce, mn::inter_node::low_precision}) {
        h.allreduce(x.data(), y.data(), x.size(), hop);
        h.allgather(x.data(), g.data(), x.size(), hop);
      }
    };
    pass();  // the first calls of each kind may grow (and register) scratch
    const auto before = eng.registrations();
    for (int rep = 0; rep < 3; ++rep) pass();
    REQUIRE(eng.registrations().opens == before.opens);  // repeated calls register nothing
    REQUIRE(eng.registrations().hits > before.hits);
    REQUIRE(eng.unregistered == 0);
  }
  // Destroyed: its scratch buffers were deregistered before they were freed.
  {
    o.register_buffers = false;
    eng.expect_registered = false;
    const auto before = eng.registrations().opens;
    mn::hierarchical<> h(eng, mn::node_topology{0, 1, 0, 1}, o);
    REQUIRE_FALSE(h.registers_buffers());
    h.allreduce(x.data(), y.data(), x.size(), mn::inter_node::exact);
    h.allgather(x.data(), g.data(), x.size(), mn::inter_node::low_precision);
    REQUIRE(eng.registrations().opens == before);
  }
  // A topology of several ranks per node needs their communicator.
  REQUIRE_THROWS_WITH((mn::hierarchical<>(eng, mn::node_topology{0, 1, 0, 2})), RCCLX_CONTAINS("no intra-node communicator"));
}
#endif
