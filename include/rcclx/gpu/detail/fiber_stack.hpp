// rcclx/gpu/detail/fiber_stack.hpp: the stacks of the host backend's emulated threads
// (RCCLX_EMULATE_THREADS=1) and what an overflow of one ends in. Private to gpu/.
//
// Each emulated thread has fiber_stack_bytes() of stack: RCCLX_EMULATE_STACK in the environment
// (bytes, or KiB / MiB with a K or M suffix: "512K", "2M"; at least 16 KiB), else the compile-time
// RCCLX_EMULATE_STACK_BYTES (default 128 KiB). The stacks of an OS thread are mmap'd once and reused
// by every block it runs. Below each lie 64 KiB that are never accessible (a guard), so a kernel
// whose locals outgrow the stack faults there instead of writing into the next thread's stack; a
// SIGSEGV handler, on an alternate signal stack of the OS thread, tells such a fault from any other
// and ends the process (abort) with
//   rcclx emulate: fiber stack overflow in rank R block B thread T (stack N bytes; RCCLX_EMULATE_STACK=...)
// Any other SIGSEGV goes to the disposition that was there before (a sanitizer's handler, or the
// default action).
#pragma once

#include "../../config.hpp"

#if RCCLX_BACKEND_HOST && RCCLX_EMULATE_THREADS

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../core/error.hpp"

// Stack bytes of one emulated thread when RCCLX_EMULATE_STACK is not set (a multiple of 4096).
#ifndef RCCLX_EMULATE_STACK_BYTES
#  define RCCLX_EMULATE_STACK_BYTES (128 * 1024)
#endif
static_assert(RCCLX_EMULATE_STACK_BYTES % 4096 == 0 && RCCLX_EMULATE_STACK_BYTES >= 16384,
              "RCCLX_EMULATE_STACK_BYTES: a multiple of 4096, at least 16 KiB");

RCCLX_NAMESPACE_BEGIN
namespace gpu {
namespace detail {

inline constexpr std::size_t fiber_page_bytes = 4096;
inline constexpr std::size_t fiber_guard_bytes = 64 * 1024;  // more than any one frame is likely to skip
inline constexpr std::size_t fiber_min_stack = 16 * 1024, fiber_max_stack = std::size_t{1} << 30;

// RCCLX_EMULATE_STACK's text as read (for the overflow message, which cannot call getenv safely).
inline char* fiber_stack_setting() {
  static char text[48] = "";
  return text;
}

// Bytes of "v" (digits, then an optional K or M), rounded up to whole pages; throws a named error.
inline std::size_t parse_fiber_stack(const char* v) {
  const auto bad = [&](const char* why) {
    return error(errc::invalid_argument, std::string("rcclx emulate: RCCLX_EMULATE_STACK = \"") + v + "\" " + why);
  };
  const char* p = v;
  std::uint64_t n = 0;
  if (*p < '0' || *p > '9') throw bad("is not a byte count (bytes, or with a K or M suffix: 512K, 2M)");
  for (; *p >= '0' && *p <= '9'; ++p) {
    n = n * 10 + static_cast<std::uint64_t>(*p - '0');
    if (n > fiber_max_stack) throw bad("exceeds 1 GiB");
  }
  std::uint64_t unit = 1;
  if (*p == 'K' || *p == 'k') unit = 1024, ++p;
  else if (*p == 'M' || *p == 'm') unit = 1024 * 1024, ++p;
  if (*p != '\0') throw bad("is not a byte count (bytes, or with a K or M suffix: 512K, 2M)");
  if (n > fiber_max_stack / unit) throw bad("exceeds 1 GiB");
  const std::uint64_t bytes = n * unit;
  if (bytes < fiber_min_stack) throw bad("is below 16 KiB");
  return static_cast<std::size_t>((bytes + fiber_page_bytes - 1) / fiber_page_bytes * fiber_page_bytes);
}

// Stack bytes of every emulated thread of the process (read once).
inline std::size_t fiber_stack_bytes() {
  static const std::size_t bytes = [] {
    const char* v = std::getenv("RCCLX_EMULATE_STACK");
    if (!v || !*v) return static_cast<std::size_t>(RCCLX_EMULATE_STACK_BYTES);
    const std::size_t b = parse_fiber_stack(v);
    std::strncpy(fiber_stack_setting(), v, 47);
    return b;
  }();
  return bytes;
}

// Which emulated thread the calling OS thread runs (for the overflow message): set by
// emulated_block::run. rank -1: unknown (a per-rank launch); thread: the block's running thread.
struct fiber_site {
  int rank = -1;
  int block = 0;
  const int* thread = nullptr;
};
inline fiber_site& current_fiber_site() {
  thread_local fiber_site s;
  return s;
}

class fiber_stacks;
inline fiber_stacks*& current_fiber_stacks() {
  thread_local fiber_stacks* s = nullptr;
  return s;
}
inline struct sigaction& previous_segv_action() {
  static struct sigaction a;
  return a;
}

// The fiber stacks of one OS thread, kept for its next blocks. Never shrinks.
class fiber_stacks {
 public:
  fiber_stacks() : bytes_(fiber_stack_bytes()) {
    install_handler();
    own_signal_stack();
    current_fiber_stacks() = this;
  }
  fiber_stacks(const fiber_stacks&) = delete;
  fiber_stacks& operator=(const fiber_stacks&) = delete;
  ~fiber_stacks() {
    current_fiber_stacks() = nullptr;
    for (void* p : maps_) ::munmap(p, chunk_bytes());
    if (alt_) {
      stack_t off{};
      off.ss_flags = SS_DISABLE;
      ::sigaltstack(&off, nullptr);
      ::munmap(alt_, alt_bytes);
    }
  }

  std::size_t bytes() const { return bytes_; }
  // The lowest usable byte of stack i (i < n after reserve(n)).
  void* stack(int i) const { return stacks_[static_cast<std::size_t>(i)]; }

  void reserve(int n) {
    while (static_cast<int>(stacks_.size()) < n) {
      void* p = ::mmap(nullptr, chunk_bytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) throw error(errc::runtime, "emulated threads: no memory for fiber stacks");
      maps_.push_back(p);
      for (int k = 0; k < per_chunk; ++k) {
        char* guard = static_cast<char*>(p) + static_cast<std::size_t>(k) * slot_bytes();
        ::mprotect(guard, fiber_guard_bytes, PROT_NONE);  // an overflow faults here
        stacks_.push_back(guard + fiber_guard_bytes);
      }
    }
  }

  // Does address a lie in the guard below one of these stacks?
  bool in_guard(std::uintptr_t a) const {
    for (void* p : maps_) {
      const auto lo = reinterpret_cast<std::uintptr_t>(p);
      if (a >= lo && a < lo + chunk_bytes()) return (a - lo) % slot_bytes() < fiber_guard_bytes;
    }
    return false;
  }

 private:
  static constexpr int per_chunk = 64;  // stacks per mapping: few mmap calls
  static constexpr std::size_t alt_bytes = 64 * 1024;
  std::size_t slot_bytes() const { return fiber_guard_bytes + bytes_; }
  std::size_t chunk_bytes() const { return per_chunk * slot_bytes(); }

  // The handler runs on an alternate stack (the faulting one has no room left); a thread that has
  // one already (a sanitizer's) keeps it.
  void own_signal_stack() {
    stack_t cur{};
    if (::sigaltstack(nullptr, &cur) != 0 || !(cur.ss_flags & SS_DISABLE)) return;
    void* p = ::mmap(nullptr, alt_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;  // then an overflow stays a plain SIGSEGV
    stack_t ss{};
    ss.ss_sp = p;
    ss.ss_size = alt_bytes;
    if (::sigaltstack(&ss, nullptr) != 0) {
      ::munmap(p, alt_bytes);
      return;
    }
    alt_ = p;
  }

  static void install_handler() {
    static const bool once = [] {
      struct sigaction sa {};
      sa.sa_sigaction = &on_segv;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
      return ::sigaction(SIGSEGV, &sa, &previous_segv_action()) == 0;
    }();
    (void)once;
  }

  // Async-signal-safe text: write(2) only.
  static void put(char* buf, std::size_t& n, const char* s) {
    while (*s && n < 511) buf[n++] = *s++;
  }
  static void put(char* buf, std::size_t& n, std::uint64_t v) {
    char d[24];
    int k = 0;
    do d[k++] = static_cast<char>('0' + v % 10); while ((v /= 10) != 0 && k < 24);
    while (k > 0 && n < 511) buf[n++] = d[--k];
  }

  static void on_segv(int sig, siginfo_t* info, void* uc) {
    (void)uc;
    const fiber_stacks* s = current_fiber_stacks();
    if (info && info->si_code > 0 && s && s->in_guard(reinterpret_cast<std::uintptr_t>(info->si_addr))) {
      const fiber_site& w = current_fiber_site();
      char buf[512];
      std::size_t n = 0;
      put(buf, n, "rcclx emulate: fiber stack overflow in ");
      if (w.rank >= 0) put(buf, n, "rank "), put(buf, n, static_cast<std::uint64_t>(w.rank)), put(buf, n, " ");
      put(buf, n, "block "), put(buf, n, static_cast<std::uint64_t>(w.block));
      if (w.thread) put(buf, n, " thread "), put(buf, n, static_cast<std::uint64_t>(*w.thread));
      put(buf, n, " (stack "), put(buf, n, static_cast<std::uint64_t>(s->bytes_)), put(buf, n, " bytes; RCCLX_EMULATE_STACK=");
      put(buf, n, fiber_stack_setting()[0] ? fiber_stack_setting() : "unset, RCCLX_EMULATE_STACK_BYTES");
      put(buf, n, "): give the emulated threads more stack (RCCLX_EMULATE_STACK=512K, 2M, ...) or the kernel fewer locals\n");
      ssize_t r = ::write(2, buf, n);
      (void)r;
      std::abort();
    }
    // Not an emulated thread's stack: the disposition that was there before, for this fault again.
    ::sigaction(SIGSEGV, &previous_segv_action(), nullptr);
    if (!info || info->si_code <= 0) ::raise(sig);  // sent, not a fault: nothing repeats it
  }

  std::size_t bytes_;
  std::vector<void*> maps_;
  std::vector<void*> stacks_;
  void* alt_ = nullptr;
};

}  // namespace detail
}  // namespace gpu
RCCLX_NAMESPACE_END

#endif  // RCCLX_BACKEND_HOST && RCCLX_EMULATE_THREADS
