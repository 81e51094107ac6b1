// ipc_cache (LRU of opened peer handles) with a counting mapper, and the host backend's shared
// memory: export of interior pointers, mapping, unlink_when_mapped, stale-segment sweep. No GPU
// needed; on GPU builds the shareable-memory cases skip.
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <string>

#include <rcclx/host/ipc_cache.hpp>
#include <rcclx/host/shareable_memory.hpp>

#include "../support/catch.hpp"

namespace {

struct counting_mapper {
  std::map<std::string, int>* live;  // handle name -> times currently open
  int* opens;
  int* closes;
  void* open_handle(const rcclx::gpu::ipc_handle& h) const {
    const std::string k(h.bytes);
    ++(*live)[k];  // (peer, handle) pairs are distinct entries, so a name may be open more than once
    ++*opens;
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(0x1000 * (1 + k.size())));
  }
  void* open(const rcclx::gpu::ipc_handle& h) const {
    if (std::string(h.bytes) == "fail") throw rcclx::error(rcclx::errc::runtime, "cannot open");
    return open_handle(h);
  }
  void close(void*, const rcclx::gpu::ipc_handle& h) const {
    const std::string k(h.bytes);
    if ((*live)[k]-- < 1) throw std::runtime_error("closed while not open: " + k);
    ++*closes;
  }
};

rcclx::gpu::ipc_handle handle(const std::string& name) {
  rcclx::gpu::ipc_handle h{};
  std::strncpy(h.bytes, name.c_str(), sizeof(h.bytes) - 1);
  return h;
}

}  // namespace

TEST_CASE("ipc_cache: hits, LRU eviction of unpinned entries, pinning, teardown", "[host][ipc_cache]") {
  std::map<std::string, int> open;
  int opens = 0, closes = 0;
  {
    rcclx::host::ipc_cache<counting_mapper> cache(2, counting_mapper{&open, &opens, &closes});
    cache.acquire(1, handle("a"));
    cache.acquire(1, handle("a"));  // hit, same entry pinned twice
    REQUIRE(cache.stats().opens == 1);
    REQUIRE(cache.stats().hits == 1);
    cache.acquire(2, handle("a"));  // another peer, same bytes: another entry
    REQUIRE(cache.stats().opens == 2);
    cache.acquire(1, handle("b"));  // 3 entries, all pinned: above capacity, nothing evictable
    REQUIRE(cache.size() == 3);
    REQUIRE(cache.stats().pinned == 3);
    cache.release(1, handle("b"));  // unpinned and over capacity: closed now
    REQUIRE(cache.stats().evictions == 1);
    REQUIRE(open["b"] == 0);
    REQUIRE(open["a"] == 2);
    cache.release(1, handle("a"));
    REQUIRE(cache.stats().pinned == 2);  // (1, a) still has a user
    cache.release(1, handle("a"));
    cache.release(2, handle("a"));
    REQUIRE(cache.size() == 2);
    REQUIRE(cache.stats().open_now == 2);
    // LRU order: (1, a) was released before (2, a); opening c evicts (1, a).
    cache.acquire(3, handle("c"));
    cache.release(3, handle("c"));
    REQUIRE(cache.stats().evictions == 2);
    cache.acquire(2, handle("a"));  // still cached
    REQUIRE(cache.stats().hits == 2);
    cache.release(2, handle("a"));
    cache.acquire(1, handle("a"));  // was evicted: opened again
    REQUIRE(cache.stats().opens == 5);
    // a failed open changes nothing
    REQUIRE_THROWS_AS(cache.acquire(1, handle("fail")), rcclx::error);
    REQUIRE(cache.stats().opens == 5);
    REQUIRE_THROWS_AS(cache.release(4, handle("zzz")), rcclx::error);
    const auto s = cache.stats();
    REQUIRE(s.opens == s.closes + s.open_now);
    cache.trim();  // closes unpinned ones; (1, a) is pinned
    REQUIRE(cache.stats().open_now == 1);
  }  // teardown closes the rest, pinned included
  REQUIRE(opens == closes);
  for (const auto& kv : open) REQUIRE(kv.second == 0);
  REQUIRE_THROWS_AS(rcclx::host::ipc_cache<counting_mapper>(0, counting_mapper{&open, &opens, &closes}), rcclx::error);
}

TEST_CASE("ipc_cache: 10^4 acquire/release cycles over more handles than it holds", "[host][ipc_cache]") {
  std::map<std::string, int> open;
  int opens = 0, closes = 0;
  {
    rcclx::host::ipc_cache<counting_mapper> cache(8, counting_mapper{&open, &opens, &closes});
    for (int i = 0; i < 10000; ++i) {
      const auto h = handle("h" + std::to_string((i * 7) % 11));
      cache.acquire(i % 3, h);
      cache.release(i % 3, h);
      REQUIRE(cache.size() <= 8);
    }
    const auto s = cache.stats();
    REQUIRE(s.opens == s.closes + s.open_now);
    REQUIRE(s.hits + s.opens == 10000);
    REQUIRE(s.evictions > 0);
  }
  REQUIRE(opens == closes);
}

#if RCCLX_BACKEND_HOST
TEST_CASE("shareable memory (host): interior pointers export their segment base and offset", "[host][shm]") {
  auto* p = static_cast<char*>(rcclx::host::shareable_malloc(10000));
  const auto e = rcclx::host::export_memory(p + 1234);
  REQUIRE(e.offset == 1234);
  REQUIRE(e.size >= 10000);
  // mapped a second time (as a peer would), the same bytes appear at the same offset
  rcclx::host::detail::ipc_mapper m;
  p[1234] = 42;
  auto* q = static_cast<char*>(m.open(e.handle));
  REQUIRE(q != p);
  REQUIRE(q[e.offset] == 42);
  q[e.offset + 1] = 7;
  REQUIRE(p[1235] == 7);
  m.close(q, e.handle);
  int on_stack = 0;
  REQUIRE_THROWS_WITH(rcclx::host::export_memory(&on_stack),
                      RCCLX_CONTAINS("not in memory from rcclx::host::shareable_malloc"));
  rcclx::host::shareable_free(p);
  REQUIRE_THROWS_AS(m.open(e.handle), rcclx::error);  // freed: its name is gone
  REQUIRE_THROWS_AS(rcclx::host::shareable_free(&on_stack), rcclx::error);
}

namespace {
bool in_dev_shm(const rcclx::gpu::ipc_handle& h) {
  const std::string name(h.bytes + 16);  // shm_handle: magic, reserved, size, then "/rcclx...."
  return ::access(("/dev/shm" + name).c_str(), F_OK) == 0;
}
}  // namespace

TEST_CASE("shareable memory (host): unlink_when_mapped removes the name, the mappings live on", "[host][shm]") {
  const std::size_t live_before = rcclx::host::detail::shm_registry::instance().live_segments();
  auto* p = static_cast<char*>(rcclx::host::shareable_malloc(8192));
  const auto e = rcclx::host::export_memory(p + 100);
  REQUIRE(in_dev_shm(e.handle));
  rcclx::host::detail::ipc_mapper m;
  auto* q = static_cast<char*>(m.open(e.handle));  // a peer maps it
  rcclx::host::unlink_when_mapped(p + 100);        // any pointer into the segment
  REQUIRE_FALSE(in_dev_shm(e.handle));
  p[5000] = 11;  // the memory is still shared
  REQUIRE(q[5000] == 11);
  q[5001] = 12;
  REQUIRE(p[5001] == 12);
  REQUIRE_THROWS_AS(m.open(e.handle), rcclx::error);  // no further peer can map it
  REQUIRE_THROWS_WITH(rcclx::host::export_memory(p), RCCLX_CONTAINS("no further peer can map it"));
  rcclx::host::unlink_when_mapped(p);  // twice: nothing happens
  m.close(q, e.handle);
  rcclx::host::shareable_free(p);  // still freed as usual
  REQUIRE(rcclx::host::detail::shm_registry::instance().live_segments() == live_before);
}

TEST_CASE("shareable memory (host): segments of a crashed process are swept", "[host][shm]") {
  int p[2], go[2];
  REQUIRE(::pipe(p) == 0);
  REQUIRE(::pipe(go) == 0);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    (void)rcclx::host::shareable_malloc(4096);  // never freed: the process "crashes"
    const char ok = 1;
    (void)!::write(p[1], &ok, 1);
    char c = 0;
    ::close(go[1]);
    (void)!::read(go[0], &c, 1);  // until the parent closes its end
    ::_exit(0);
  }
  char c = 0;
  ::close(go[0]);
  REQUIRE(::read(p[0], &c, 1) == 1);
  ::close(p[0]);
  ::close(p[1]);
  const std::string prefix = "/dev/shm/rcclx." + std::to_string(pid) + ".";
  auto left = [&] {
    int n = 0;
    if (DIR* d = ::opendir("/dev/shm")) {
      while (dirent* e = ::readdir(d))
        if (("/dev/shm/" + std::string(e->d_name)).rfind(prefix, 0) == 0) ++n;
      ::closedir(d);
    }
    return n;
  };
  REQUIRE(left() == 1);
  rcclx::host::reclaim_stale_segments();
  REQUIRE(left() == 1);  // its creator still runs: kept
  ::close(go[1]);        // the child exits
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  rcclx::host::reclaim_stale_segments();  // (a concurrent job's set-up may have swept it already)
  REQUIRE(left() == 0);
}
#endif
