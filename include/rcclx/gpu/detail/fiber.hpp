// rcclx/gpu/detail/fiber.hpp: the host backend's fibers (RCCLX_EMULATE_THREADS=1): a stack per
// emulated GPU thread and a switch between two of them inside one OS thread. Private to gpu/.
//
// x86-64: a few instructions of inline assembly (the callee-saved registers are left to the compiler
// as clobbers, the frame pointer and the red zone are kept by hand): no system call, unlike
// glibc's swapcontext (two signal-mask calls per switch). Other architectures: ucontext.
// The stacks themselves (their size, guard pages, and the message an overflow ends in):
// gpu/detail/fiber_stack.hpp.
#pragma once

#include "../../config.hpp"

#if RCCLX_BACKEND_HOST && RCCLX_EMULATE_THREADS

#include <cstddef>
#include <cstdint>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "../../core/error.hpp"
#include "fiber_stack.hpp"

// The switch: x86-64 assembly, unless RCCLX_EMULATE_UCONTEXT=1 asks for ucontext (other
// architectures always use it).
#if defined(__x86_64__) && !(defined(RCCLX_EMULATE_UCONTEXT) && RCCLX_EMULATE_UCONTEXT)
#  define RCCLX_DETAIL_FIBER_ASM 1
#else
#  define RCCLX_DETAIL_FIBER_ASM 0
#endif

#if !RCCLX_DETAIL_FIBER_ASM
#  include <ucontext.h>
#endif

// ThreadSanitizer: every fiber is a sanitizer fiber, switched to without synchronisation, so
// accesses of two threads of a block with no block sync (or warp exchange) between them are
// reported as data races; the scheduler's own words are left out (rcclx_tsan_ignore) and its syncs
// are told to the sanitizer (release at arrival, acquire at departure).
#if defined(__SANITIZE_THREAD__)
#  define RCCLX_DETAIL_FIBER_TSAN 1
#elif defined(__has_feature)
#  if __has_feature(thread_sanitizer)
#    define RCCLX_DETAIL_FIBER_TSAN 1
#  endif
#endif
#ifndef RCCLX_DETAIL_FIBER_TSAN
#  define RCCLX_DETAIL_FIBER_TSAN 0
#endif
#if RCCLX_DETAIL_FIBER_TSAN
#  include <sanitizer/tsan_interface.h>
extern "C" {
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
void AnnotateIgnoreWritesBegin(const char* file, int line);
void AnnotateIgnoreWritesEnd(const char* file, int line);
}
#endif

RCCLX_NAMESPACE_BEGIN
namespace gpu {
namespace detail {

// A fiber's saved context: its stack pointer (x86-64) or a ucontext.
struct fiber_context {
#if RCCLX_DETAIL_FIBER_ASM
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
#if RCCLX_DETAIL_FIBER_TSAN
  void* tsan = nullptr;  // the sanitizer's fiber
#endif
};

// The sanitizer's view of the calling code: the scheduler's words are not the kernel's memory.
struct tsan_ignore {
#if RCCLX_DETAIL_FIBER_TSAN
  tsan_ignore() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~tsan_ignore() { end(); }
  // Ends a scope whose destructor never runs (a returned fiber's last switch).
  static void end() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
#else
  tsan_ignore() {}
  static void end() {}
#endif
  tsan_ignore(const tsan_ignore&) = delete;
  tsan_ignore& operator=(const tsan_ignore&) = delete;
};
inline void tsan_release(const void* p) {
#if RCCLX_DETAIL_FIBER_TSAN
  __tsan_release(const_cast<void*>(p));
#else
  (void)p;
#endif
}
inline void tsan_acquire(const void* p) {
#if RCCLX_DETAIL_FIBER_TSAN
  __tsan_acquire(const_cast<void*>(p));
#else
  (void)p;
#endif
}

// Saves the running context in *from and resumes `to` (which was saved by this function or made by
// make_fiber_context). Returns when something switches back to *from.
inline void switch_fiber(fiber_context* from, fiber_context* to) {
#if RCCLX_DETAIL_FIBER_TSAN
  __tsan_switch_to_fiber(to->tsan, __tsan_switch_to_fiber_no_sync);
#endif
#if RCCLX_DETAIL_FIBER_ASM
  void** save = &from->sp;
  void* load = to->sp;
  // Stack of a suspended fiber, from its sp up: resume address, rbp, 128 bytes (the red zone of
  // the function that switched). Every other register is a clobber: the compiler saves what it needs.
  asm volatile(
      "subq $128, %%rsp\n\t"
      "pushq %%rbp\n\t"
      "leaq 1f(%%rip), %%rax\n\t"
      "pushq %%rax\n\t"
      "movq %%rsp, (%%rdi)\n\t"
      "movq %%rsi, %%rsp\n\t"
      "popq %%rax\n\t"
      "jmpq *%%rax\n\t"
      "1:\n\t"
      "popq %%rbp\n\t"
      "addq $128, %%rsp\n\t"
      : "+D"(save), "+S"(load)
      :
      : "rax", "rbx", "rcx", "rdx", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "memory", "cc",
        "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",
        "xmm12", "xmm13", "xmm14", "xmm15"
#  if defined(__AVX512F__)
        ,
        "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26",
        "xmm27", "xmm28", "xmm29", "xmm30", "xmm31"
#  endif
  );
#else
  if (::swapcontext(&from->uc, &to->uc) != 0) throw error(errc::runtime, "emulated threads: swapcontext failed");
#endif
}

// A context that starts entry() on the stack [lo, lo + bytes) at its first switch. entry never
// returns (it switches away for the last time).
inline void make_fiber_context(fiber_context& c, void* lo, std::size_t bytes, void (*entry)()) {
#if RCCLX_DETAIL_FIBER_ASM
  auto top = (reinterpret_cast<std::uintptr_t>(lo) + bytes) & ~std::uintptr_t{15};
  auto* s = reinterpret_cast<void**>(top);
  s[-1] = nullptr;                           // entry's return address (never used): rsp % 16 == 8 at entry
  s[-2] = reinterpret_cast<void*>(entry);   // popped and jumped to by the first switch
  c.sp = s - 2;
#else
  if (::getcontext(&c.uc) != 0) throw error(errc::runtime, "emulated threads: getcontext failed");
  c.uc.uc_stack.ss_sp = lo;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  ::makecontext(&c.uc, entry, 0);
#endif
}

}  // namespace detail
}  // namespace gpu
RCCLX_NAMESPACE_END

#endif  // RCCLX_BACKEND_HOST && RCCLX_EMULATE_THREADS
