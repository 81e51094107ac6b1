// rcclx/host/detail/shm.hpp: POSIX shared-memory segments: the host backend's "device memory that
// peers can map" and its IPC handles. Every segment this process creates is recorded in a
// process-wide registry, so the segment (allocation base) containing any pointer can be found,
// as cuMemGetAddressRange / hipMemGetAddressRange do on GPUs.
//
// Names: "/rcclx.<pid>.<nonce>.<seq>": unique per process and job; the creator's pid lets a later
// process unlink segments whose creator died before unlinking them (sweep_stale_segments).
// A segment's name is unlinked when it is freed, or as soon as every peer has mapped it
// (unlink_early: nobody needs the name any more, so nothing can leak even if the process dies).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>

#include "../../core/error.hpp"
#include "../../gpu/runtime.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {
namespace detail {

inline constexpr std::uint32_t shm_handle_magic = 0x53484d31u;  // "SHM1"
inline constexpr const char* shm_prefix = "rcclx.";

// The layout of gpu::ipc_handle on the host backend.
struct shm_handle {
  std::uint32_t magic;
  std::uint32_t reserved;
  std::uint64_t size;
  char name[48];
};
static_assert(sizeof(shm_handle) == sizeof(gpu::ipc_handle), "shm_handle must fill an ipc_handle");

inline std::string errno_text(int e) { return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")"; }

struct shm_segment {
  std::size_t size;
  std::string name;
  bool linked;  // the name still exists in /dev/shm
};

class shm_registry {
 public:
  static shm_registry& instance() {
    static shm_registry r;
    return r;
  }

  // Creates, sizes and maps a new segment (zero-filled by the kernel).
  void* create(std::size_t bytes) {
    if (bytes == 0) bytes = 16;
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t size = (bytes + page - 1) / page * page;
    const std::string name = next_name();
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) throw error(errc::runtime, "shm_open(" + name + ", O_CREAT) failed: " + errno_text(errno));
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
      const int e = errno;
      ::close(fd);
      ::shm_unlink(name.c_str());
      throw error(errc::runtime, "ftruncate of shared segment " + name + " to " + std::to_string(size) +
                                     " bytes failed: " + errno_text(e) + " (is /dev/shm full?)");
    }
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int e = errno;
    ::close(fd);
    if (p == MAP_FAILED) {
      ::shm_unlink(name.c_str());
      throw error(errc::runtime, "mmap of shared segment " + name + " failed: " + errno_text(e));
    }
    std::lock_guard<std::mutex> lock(m_);
    segments_[reinterpret_cast<std::uintptr_t>(p)] = shm_segment{size, name, true};
    return p;
  }

  // Unmaps and unlinks a segment created by create(). Unknown pointers are an error.
  void destroy(void* p) {
    shm_segment s;
    {
      std::lock_guard<std::mutex> lock(m_);
      auto it = segments_.find(reinterpret_cast<std::uintptr_t>(p));
      if (it == segments_.end())
        throw error(errc::invalid_argument, "shareable_free: pointer was not returned by shareable_malloc");
      s = it->second;
      segments_.erase(it);
    }
    ::munmap(p, s.size);
    if (s.linked) ::shm_unlink(s.name.c_str());
  }

  // Removes the name of the segment holding `p` once its peers have all mapped it: the memory lives
  // on while mapped. Pointers outside this process's segments: nothing happens.
  void unlink_early(const void* p) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard<std::mutex> lock(m_);
    auto it = segments_.upper_bound(a);
    if (it == segments_.begin()) return;
    --it;
    if (a >= it->first + it->second.size || !it->second.linked) return;
    ::shm_unlink(it->second.name.c_str());
    it->second.linked = false;
  }

  // The handle of the segment containing `p` and the offset of `p` in it.
  bool find(const void* p, shm_handle& h, std::uint64_t& offset) const {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard<std::mutex> lock(m_);
    auto it = segments_.upper_bound(a);
    if (it == segments_.begin()) return false;
    --it;
    if (a >= it->first + it->second.size) return false;
    if (!it->second.linked) return false;  // nobody can open it any more
    h = shm_handle{};
    h.magic = shm_handle_magic;
    h.size = it->second.size;
    std::strncpy(h.name, it->second.name.c_str(), sizeof(h.name) - 1);
    offset = a - it->first;
    return true;
  }

  // True if `p` lies in a segment of this process whose name is already unlinked.
  bool unlinked(const void* p) const {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard<std::mutex> lock(m_);
    auto it = segments_.upper_bound(a);
    if (it == segments_.begin()) return false;
    --it;
    return a < it->first + it->second.size && !it->second.linked;
  }

  std::size_t live_segments() const {
    std::lock_guard<std::mutex> lock(m_);
    return segments_.size();
  }

  // Prefix of every name this process creates ("rcclx.<pid>.<nonce>."), for tests and sweeps.
  std::string own_prefix() const { return prefix_; }

 private:
  shm_registry() {
    std::random_device rd;
    const auto t = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    const std::uint64_t nonce = (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ t;
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%s%d.%012llx.", shm_prefix, static_cast<int>(::getpid()),
                  static_cast<unsigned long long>(nonce & 0xFFFFFFFFFFFFull));
    prefix_ = buf;
  }

  std::string next_name() {
    // A forked child inherits the registry: give it its own prefix (its pid differs).
    std::lock_guard<std::mutex> lock(m_);
    const int pid = static_cast<int>(::getpid());
    if (pid != pid_) {
      pid_ = pid;
      std::random_device rd;
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%s%d.%012llx.", shm_prefix, pid,
                    static_cast<unsigned long long>(((static_cast<std::uint64_t>(rd()) << 32) ^ rd()) &
                                                    0xFFFFFFFFFFFFull));
      prefix_ = buf;
    }
    return "/" + prefix_ + std::to_string(seq_++);
  }

  mutable std::mutex m_;
  std::map<std::uintptr_t, shm_segment> segments_;
  std::string prefix_;
  int pid_ = static_cast<int>(::getpid());
  std::uint64_t seq_ = 0;
};

// Maps a peer's segment. The name must still exist (its creator unlinks it once every peer has
// mapped it, or when it frees it).
inline void* shm_map(const shm_handle& h) {
  if (h.magic != shm_handle_magic)
    throw error(errc::invalid_argument, "not a host-backend IPC handle (magic " + std::to_string(h.magic) + ")");
  char name[sizeof(h.name) + 1] = {};
  std::memcpy(name, h.name, sizeof(h.name));
  const int fd = ::shm_open(name, O_RDWR, 0);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT)
      throw error(errc::peer_failure, std::string("shared segment ") + name +
                                          " no longer exists: its owner freed it or exited");
    throw error(errc::runtime, std::string("shm_open(") + name + ") failed: " + errno_text(e));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < h.size) {
    ::close(fd);
    throw error(errc::runtime, std::string("shared segment ") + name + " is smaller than its handle says");
  }
  void* p = ::mmap(nullptr, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) throw error(errc::runtime, std::string("mmap of peer segment ") + name + " failed: " + errno_text(e));
  return p;
}

inline void shm_unmap(void* p, const shm_handle& h) { ::munmap(p, h.size); }

// True if process `pid` has exited (or is a zombie nobody has reaped yet).
inline bool process_gone(int pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (!f) return false;
  char buf[512] = {};
  const std::size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  const char* close_paren = std::strrchr(buf, ')');  // "pid (comm) S ..."
  if (n == 0 || !close_paren || close_paren[1] == 0) return false;
  const char state = close_paren[2];
  return state == 'Z' || state == 'X';
}

// Unlinks rcclx segments in /dev/shm whose creating process no longer exists (it crashed before
// it could unlink them). Returns how many were removed.
inline int sweep_stale_segments() {
  DIR* d = ::opendir("/dev/shm");
  if (!d) return 0;
  int removed = 0;
  const std::size_t plen = std::strlen(shm_prefix);
  while (dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, shm_prefix, plen) != 0) continue;
    const int pid = std::atoi(e->d_name + plen);
    if (pid > 0 && process_gone(pid)) {
      const std::string name = std::string("/") + e->d_name;
      if (::shm_unlink(name.c_str()) == 0) ++removed;
    }
  }
  ::closedir(d);
  return removed;
}

}  // namespace detail
}  // namespace host
RCCLX_NAMESPACE_END
