// rcclx/gpu/emulated_block.hpp: every thread of a block on the host backend (RCCLX_EMULATE_THREADS=1).
//
// A block of T threads runs as T fibers inside the OS thread that runs the block
// (gpu/host_blocks.hpp), one after another: a fiber runs until it waits (a block-wide sync, a warp
// shuffle or vote, a spin-wait's pause) or returns, then the next runnable one resumes, in thread
// order. The group API (gpu::block_group, gpu::warp_group), gpu::thread_x(), the warp shuffles
// and vote and gpu::first_thread_of_block() read the running fiber; gpu::block_shared is one object
// per block (the OS thread's, which every fiber of the block shares), as __shared__ memory.
//
// What it refuses, as an rcclx::error thrown by the launch (the block's other fibers are unwound):
//  - a block-wide sync that not every thread of the block reaches: a thread returns while others
//    wait at a sync, a thread reaches a sync after another returned, or two threads wait at syncs
//    at different places of the source (the same barrier on a GPU: undefined, often a hang);
//  - a warp shuffle or vote that a lane of the warp returns before, and threads that wait on each
//    other for ever (some at a block sync, their warp's other lanes at a shuffle).
//  - a write past the end of a gpu::block_shared object (into the 64 bytes after it: a guard
//    filled when the block first asks for the object, checked when its threads have returned).
// The order is deterministic: the same program fails the same way every run. Under
// ThreadSanitizer every thread is a sanitizer fiber, switched to without synchronisation and
// ordered by the block syncs and warp exchanges alone: a data race between two threads of a block
// is reported as one between two OS threads is.
//
// Host backend only; private to gpu/ (the group API is the interface).
#pragma once

#include "../config.hpp"

#if RCCLX_BACKEND_HOST && RCCLX_EMULATE_THREADS

#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "../core/error.hpp"
#include "detail/fiber.hpp"

RCCLX_NAMESPACE_BEGIN
namespace gpu {
namespace detail {

// Thrown into a fiber that resumes after its block failed: unwinds it (destructors run).
struct fiber_abort {};

class emulated_block;
// The block the calling OS thread runs, nullptr outside an emulated block (then the group API is
// one thread, as without RCCLX_EMULATE_THREADS).
inline emulated_block*& current_emulated_block() {
  thread_local emulated_block* b = nullptr;
  return b;
}

class emulated_block {
 public:
  static constexpr int warp = RCCLX_WARP_SIZE;
  static constexpr int max_threads = 1024;

  // Runs body(ctx, index) once per thread of a block of `threads` threads, each in its own fiber;
  // returns when every thread has returned; throws the block's first error. grid: the blocks of
  // one rank's grid (0: unknown), for the errors' names (block index % grid of rank index / grid).
  static void run(int threads, void (*body)(const void*, int), const void* ctx, int index, int grid = 0) {
    if (threads < 1 || threads > max_threads)
      throw error(errc::invalid_argument, "emulated threads: a block of " + std::to_string(threads) +
                                              " threads (a GPU block has 1 to 1024)");
    thread_local fiber_stacks stacks;
    thread_local std::unique_ptr<emulated_block> reused;
    if (!reused) reused.reset(new emulated_block);
    emulated_block& b = *reused;
    {
      const tsan_ignore scheduler;
      stacks.reserve(threads);
      b.start(threads, body, ctx, index, grid, stacks);
      current_emulated_block() = &b;
      b.current_ = 0;
      current_fiber_site() = fiber_site{grid > 0 ? index / grid : -1, grid > 0 ? index % grid : index, &b.current_};
      tsan_release(&current_emulated_block());  // what the launching thread wrote, before every thread
      switch_fiber(&b.main_, &b.ctx_[0]);  // back here when every fiber has returned
      tsan_acquire(&b.done_);           // what every thread wrote, before the launch returns
      current_emulated_block() = nullptr;
      current_fiber_site().thread = nullptr;
      b.end_tsan();
    }
    if (!b.error_) b.check_guards();
    if (b.error_) {
      std::exception_ptr e = b.error_;
      b.error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

  int thread() const {
    const tsan_ignore scheduler;
    return current_;
  }
  int threads() const { return n_; }  // written before the block's threads start

  // Block-shared memory's end guards (gpu::block_shared): `bytes` (guard_bytes of them, right after
  // an object of `size` bytes) are filled now and checked when the block's threads have returned.
  static constexpr std::size_t guard_bytes = 64;
  static constexpr unsigned char guard_fill = 0xA5;
  std::uint64_t generation() const { return generation_; }
  void watch(unsigned char* bytes, std::size_t size, const char* what) {
    const tsan_ignore scheduler;
    std::memset(bytes, guard_fill, guard_bytes);
    guards_.push_back(guard{bytes, size, what});
  }

  // A block-wide barrier at (file, line); returns whether any thread passed v.
  bool sync(bool v, const char* file, int line) {
    if (n_ == 1) return v;
    const tsan_ignore scheduler;
    tsan_release(&bar_count_);  // this thread's writes, before every thread leaves the sync
    const int me = current_;
    if (done_ > 0)
      fail("a block-wide sync at " + site(file, line) + " reached by thread " + std::to_string(me) +
           " after thread " + std::to_string(first_done_) + " of its block returned (every thread of a block must " +
           "reach each block-wide sync: a group-collective call from some threads only?)");
    if (bar_count_ == 0) {
      bar_file_ = file;
      bar_line_ = line;
      bar_first_ = me;
      bar_or_ = false;
    } else if (line != bar_line_ || std::strcmp(file, bar_file_) != 0) {
      fail("thread " + std::to_string(me) + " reached a block-wide sync at " + site(file, line) + " while thread " +
           std::to_string(bar_first_) + " waits at the one at " + site(bar_file_, bar_line_) +
           " (divergent block-wide syncs: a group-collective call from some threads only?)");
    }
    bar_or_ = bar_or_ || v;
    if (++bar_count_ == n_) {
      bar_count_ = 0;
      bar_result_ = bar_or_;
      for (int i = 0; i < n_; ++i)
        if (state_[i] == state::block_sync) state_[i] = state::runnable;
      tsan_acquire(&bar_count_);
      return bar_result_;
    }
    state_[me] = state::block_sync;
    wait(false);
    tsan_acquire(&bar_count_);
    return bar_result_;
  }

  // A spin-wait's pause: the block's other runnable threads run first; once a round, the OS thread
  // yields too (the other blocks and ranks run on the same cores).
  void yield() {
    const tsan_ignore scheduler;
    const int me = current_;
    const int next = next_runnable(me);  // me itself when no other thread can run
    if (next <= me) std::this_thread::yield();
    if (next >= 0) resume(next);
  }

  // x of lane `src` of the calling warp (every lane of the warp calls).
  template <class T>
  T shuffle(const T& x, int src) {
    static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= slot_bytes,
                  "rcclx::gpu::shuffle (emulated threads): a trivially copyable value of at most 32 bytes");
    if (n_ == 1) return x;
    const tsan_ignore scheduler;
    const int me = current_, lanes = warp_lanes(me);
    unsigned char* s = exchange(me, &x, sizeof(T));
    const int from = src & (warp - 1);
    T r = x;
    if (from < lanes) std::memcpy(&r, s + static_cast<std::size_t>(from) * slot_bytes, sizeof(T));
    return r;
  }
  template <class T>
  T shuffle_xor(const T& x, int mask) {
    const int lane = thread() % warp, src = lane ^ mask;
    if (src >= warp) {  // outside the warp: the lane's own value, after the same exchange
      (void)shuffle(x, lane);
      return x;
    }
    return shuffle(x, src);
  }
  bool any(bool v) {
    if (n_ == 1) return v;
    const tsan_ignore scheduler;
    const unsigned char c = v ? 1 : 0;
    const unsigned char* s = exchange(current_, &c, 1);
    bool r = false;
    for (int l = 0; l < warp_lanes(current_); ++l) r = r || s[static_cast<std::size_t>(l) * slot_bytes] != 0;
    return r;
  }

 private:
  enum class state : unsigned char { runnable, block_sync, warp_sync, done };
  static constexpr int slot_bytes = 32;

  emulated_block() = default;

  void start(int threads, void (*body)(const void*, int), const void* ctx, int index, int grid,
             const fiber_stacks& stacks) {
    n_ = threads;
    name_ = grid > 0 ? "rank " + std::to_string(index / grid) + ", block " + std::to_string(index % grid)
                     : "block " + std::to_string(index);
    ++generation_;
    guards_.clear();
    body_ = body;
    body_ctx_ = ctx;
    index_ = index;
    done_ = 0;
    first_done_ = -1;
    bar_count_ = 0;
    aborting_ = false;
    error_ = nullptr;
    state_.assign(static_cast<std::size_t>(n_), state::runnable);
    bank_.assign(static_cast<std::size_t>(n_), 0);
    const int warps = (n_ + warp - 1) / warp;
    warp_count_.assign(static_cast<std::size_t>(warps), 0);
    warp_done_.assign(static_cast<std::size_t>(warps), 0);
    slots_.resize(static_cast<std::size_t>(warps) * 2 * warp * slot_bytes);
    ctx_.resize(static_cast<std::size_t>(n_));
    for (int i = 0; i < n_; ++i)
      make_fiber_context(ctx_[static_cast<std::size_t>(i)], stacks.stack(i), stacks.bytes(), &entry);
    start_tsan();
  }

  int warp_lanes(int t) const {
    const int base = t - t % warp;
    return n_ - base < warp ? n_ - base : warp;
  }

  // Writes the caller's bytes to its slot of the warp's exchange (double-buffered: a lane's next
  // exchange uses the other bank, which every lane has read by the time this one completes), waits
  // for the warp's other lanes, and returns the bank's lane-0 slot.
  unsigned char* exchange(int me, const void* v, std::size_t bytes) {
    const int w = me / warp, lanes = warp_lanes(me);
    if (warp_done_[static_cast<std::size_t>(w)] > 0)
      fail("a warp shuffle or vote by thread " + std::to_string(me) + " after a lane of its warp returned");
    const int bank = bank_[static_cast<std::size_t>(me)];
    bank_[static_cast<std::size_t>(me)] = bank ^ 1;
    unsigned char* s = slots_.data() + (static_cast<std::size_t>(w) * 2 + static_cast<std::size_t>(bank)) * warp * slot_bytes;
    std::memcpy(s + static_cast<std::size_t>(me % warp) * slot_bytes, v, bytes);
    int& count = warp_count_[static_cast<std::size_t>(w)];
    tsan_release(&count);  // a warp exchange orders its lanes as a sync does
    if (++count == lanes) {
      count = 0;
      for (int t = w * warp; t < w * warp + lanes; ++t)
        if (state_[static_cast<std::size_t>(t)] == state::warp_sync) state_[static_cast<std::size_t>(t)] = state::runnable;
    } else {
      state_[static_cast<std::size_t>(me)] = state::warp_sync;
      wait(false);
    }
    tsan_acquire(&count);
    return s;
  }

  static std::string site(const char* file, int line) { return std::string(file) + ":" + std::to_string(line); }

  [[noreturn]] void fail(const std::string& what) {
    throw error(errc::invalid_argument, "emulated threads, " + name_ + ": " + what);
  }

  void check_guards() {
    for (const guard& g : guards_)
      for (std::size_t i = 0; i < guard_bytes; ++i)
        if (g.bytes[i] != guard_fill) {
          error_ = std::make_exception_ptr(error(
              errc::invalid_argument, "emulated threads, " + name_ + ": a thread wrote past the end of " + g.what +
                                          " (" + std::to_string(g.size) + " bytes of block-shared memory)"));
          return;
        }
  }

  int next_runnable(int me) const {
    for (int k = 1; k <= n_; ++k) {
      const int i = (me + k) % n_;
      if (state_[static_cast<std::size_t>(i)] == state::runnable) return i;
    }
    return -1;
  }

  void resume(int next) {
    const int me = current_;
    if (next != me) {
      current_ = next;
      switch_fiber(&ctx_[static_cast<std::size_t>(me)], &ctx_[static_cast<std::size_t>(next)]);
    }
    // Resumed (current_ is this fiber again).
    if (aborting_) throw fiber_abort{};
  }

  // The calling fiber is not runnable (waiting or returned): runs the next one. Returns when the
  // fiber is runnable again and resumed.
  void wait(bool returned) {
    int next = next_runnable(current_);
    if (next < 0 && done_ < n_) {
      // Nobody can move: threads wait at a block sync while lanes of their warp wait at a shuffle.
      int at_block = 0, at_warp = 0;
      for (state s : state_) at_block += s == state::block_sync, at_warp += s == state::warp_sync;
      set_error(std::make_exception_ptr(error(
          errc::invalid_argument, "emulated threads, " + name_ + ": " + std::to_string(at_block) +
                                      " threads wait at a block-wide sync (" + site(bar_file_, bar_line_) + ") and " +
                                      std::to_string(at_warp) + " at warp shuffles or votes, for each other " +
                                      "(a sync or shuffle reached by some threads and not others)")));
      next = next_runnable(current_);
    }
    if (returned) {  // for good: to the next thread, or (every one has returned) the OS thread's own stack
      fiber_context* self = &ctx_[static_cast<std::size_t>(current_)];
      fiber_context* to = &main_;
      if (next >= 0) {
        current_ = next;
        to = &ctx_[static_cast<std::size_t>(next)];
      }
      tsan_ignore::end();  // entry()'s scope, which never closes
      switch_fiber(self, to);
      return;
    }
    resume(next);  // next >= 0: this thread waits, so another one can run
  }

  // Records the first error and makes every waiting fiber runnable, to be unwound when resumed.
  void set_error(std::exception_ptr e) {
    if (!error_) error_ = e;
    aborting_ = true;
    for (state& s : state_)
      if (s != state::done) s = state::runnable;
  }

  static void entry() {
    tsan_acquire(&current_emulated_block());
    emulated_block& b = *current_emulated_block();
    int me;
    bool run;
    {
      const tsan_ignore scheduler;
      me = b.current_;
      run = !b.aborting_;
    }
    if (run) {
      try {
        b.body_(b.body_ctx_, b.index_);
      } catch (const fiber_abort&) {
      } catch (...) {
        const tsan_ignore scheduler;
        b.set_error(std::current_exception());
      }
    }
    tsan_release(&b.done_);
    const tsan_ignore scheduler;  // for good: this sanitizer fiber is destroyed with the block
    b.returned(me);
  }

  // ThreadSanitizer: a fresh sanitizer fiber per thread and block (a returned thread's stays in
  // its scheduler's ignore), the calling OS thread's own as the main context.
  void start_tsan() {
#if RCCLX_DETAIL_FIBER_TSAN
    main_.tsan = __tsan_get_current_fiber();
    for (fiber_context& c : ctx_) c.tsan = __tsan_create_fiber(0);
#endif
  }
  void end_tsan() {
#if RCCLX_DETAIL_FIBER_TSAN
    for (fiber_context& c : ctx_) {
      __tsan_destroy_fiber(c.tsan);
      c.tsan = nullptr;
    }
#endif
  }

  void returned(int me) {
    state_[static_cast<std::size_t>(me)] = state::done;
    if (done_++ == 0) first_done_ = me;
    const int w = me / warp;
    ++warp_done_[static_cast<std::size_t>(w)];
    if (!aborting_) {
      if (bar_count_ > 0)
        set_error(std::make_exception_ptr(error(
            errc::invalid_argument, "emulated threads, " + name_ + ": thread " + std::to_string(me) +
                                        " returned while thread " + std::to_string(bar_first_) + " (and " +
                                        std::to_string(bar_count_ - 1) + " more) waits at the block-wide sync at " +
                                        site(bar_file_, bar_line_) + " (a group-collective call from some threads only?)")));
      else if (warp_count_[static_cast<std::size_t>(w)] > 0)
        set_error(std::make_exception_ptr(error(
            errc::invalid_argument, "emulated threads, " + name_ + ": thread " + std::to_string(me) +
                                        " returned while lanes of its warp wait at a shuffle or vote")));
    }
    wait(true);  // never resumed
  }

  struct guard {
    const unsigned char* bytes;
    std::size_t size;
    const char* what;
  };
  std::string name_;
  std::uint64_t generation_ = 0;
  std::vector<guard> guards_;
  int n_ = 0;
  void (*body_)(const void*, int) = nullptr;
  const void* body_ctx_ = nullptr;
  int index_ = 0;
  int current_ = 0;
  int done_ = 0, first_done_ = -1;
  int bar_count_ = 0, bar_line_ = 0, bar_first_ = 0;
  const char* bar_file_ = "";
  bool bar_or_ = false, bar_result_ = false, aborting_ = false;
  std::exception_ptr error_;
  std::vector<state> state_;
  std::vector<int> bank_, warp_count_, warp_done_;
  std::vector<unsigned char> slots_;
  std::vector<fiber_context> ctx_;
  fiber_context main_;
};

}  // namespace detail
}  // namespace gpu
RCCLX_NAMESPACE_END

#endif  // RCCLX_BACKEND_HOST && RCCLX_EMULATE_THREADS
