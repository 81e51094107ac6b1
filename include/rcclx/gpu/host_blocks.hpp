// rcclx/gpu/host_blocks.hpp: the host backend's grid: runs n blocks at once, one thread each, on
// threads parked between launches and reused (a thread created per block per call made thread
// creation most of a small call's time, and far more under ThreadSanitizer).
//
//   rcclx::gpu::run_host_blocks(num_blocks, [&](int b) { my_block(rcclx::gpu::thread_group{}, b); });
//
// All n blocks run concurrently (blocks of a collective wait on each other, as on a GPU), each on
// its own thread; the call returns when every block has returned and rethrows the first exception
// a block threw. Several host threads may launch at once (each launch takes its own workers). A
// forked child starts with an empty pool (its parent's workers do not exist there). Block-local
// state on a reused thread (gpu::block_shared) starts with whatever the last block left, as shared
// memory on a GPU starts undefined. Host backend only.
#pragma once

#include "../config.hpp"
#include "group.hpp"

#if !RCCLX_BACKEND_GPU

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <pthread.h>
#include <unistd.h>

RCCLX_NAMESPACE_BEGIN
namespace gpu {
namespace detail {

struct host_launch {
  void (*block)(const void*, int);
  const void* ctx;
  int n;
  std::uint32_t id;  // gpu::launch_id() in its blocks
  int grid;          // gpu::grid_blocks() in its blocks (0: unknown); block b's gpu::block_id() is b % grid
  std::mutex m;
  std::condition_variable done;
  int remaining;
  std::exception_ptr first;
};

class host_block_pool;

class host_worker {
 public:
  explicit host_worker(host_block_pool& pool) : pool_(pool), thread_([this] { loop(); }) {}
  void start(host_launch* l, int index) {
    {
      std::lock_guard<std::mutex> lock(m_);
      launch_ = l;
      index_ = index;
    }
    cv_.notify_one();
  }

 private:
  inline void loop();

  host_block_pool& pool_;
  std::mutex m_;
  std::condition_variable cv_;
  host_launch* launch_ = nullptr;
  int index_ = 0;
  std::thread thread_;  // last: starts after the members it reads
};

class host_block_pool {
 public:
  host_block_pool() : pid_(::getpid()) {}

  void run(int n, void (*block)(const void*, int), const void* ctx, int grid = 0) {
    if (n <= 0) return;
    static std::atomic<std::uint32_t> launches{0};
    std::uint32_t id = launches.fetch_add(1, std::memory_order_relaxed) + 1;
    if (id == 0) id = launches.fetch_add(1, std::memory_order_relaxed) + 1;  // 0 means "unknown"
    host_launch l{block, ctx, n, id, grid > 0 ? grid : 0, {}, {}, n, nullptr};
    std::vector<host_worker*> w;
    w.reserve(static_cast<std::size_t>(n));
    {
      std::lock_guard<std::mutex> lock(m_);
      if (pid_ != ::getpid()) forget_parent();
      while (static_cast<int>(w.size()) < n && !idle_.empty()) {
        w.push_back(idle_.back());
        idle_.pop_back();
      }
      while (static_cast<int>(w.size()) < n) {
        all_.push_back(std::make_unique<host_worker>(*this));
        w.push_back(all_.back().get());
      }
    }
    for (int i = 0; i < n; ++i) w[static_cast<std::size_t>(i)]->start(&l, i);
    std::unique_lock<std::mutex> lock(l.m);
    l.done.wait(lock, [&] { return l.remaining == 0; });
    if (l.first) std::rethrow_exception(l.first);
  }

  void park(host_worker* w) {
    std::lock_guard<std::mutex> lock(m_);
    idle_.push_back(w);
  }

  // fork(): hold the pool's lock across it, so the child's copy is consistent; the child then drops
  // the workers it inherited by name only (their threads are the parent's).
  void lock_for_fork() { m_.lock(); }
  void unlock_after_fork() { m_.unlock(); }

 private:
  void forget_parent() {
    for (auto& p : all_) (void)p.release();  // never destroyed: their threads live in the parent only
    all_.clear();
    idle_.clear();
    pid_ = ::getpid();
  }

  std::mutex m_;
  std::vector<std::unique_ptr<host_worker>> all_;
  std::vector<host_worker*> idle_;
  pid_t pid_;
};

inline void host_worker::loop() {
  for (;;) {
    host_launch* l;
    int i;
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [&] { return launch_ != nullptr; });
      l = launch_;
      i = index_;
      launch_ = nullptr;
    }
    try {
      host_launch_id() = l->id;
      host_grid_blocks() = l->grid;
      host_block_id() = l->grid > 0 ? i % l->grid : i;
      l->block(l->ctx, i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(l->m);
      if (!l->first) l->first = std::current_exception();
    }
    pool_.park(this);  // before the launch can return: its next launch finds this worker idle
    std::lock_guard<std::mutex> lock(l->m);
    if (--l->remaining == 0) l->done.notify_all();
    // l is not touched after this lock is released: the launcher may return and destroy it.
  }
}

// One pool per process, never destroyed (parked workers simply end with the process; destroying it
// at exit could race with a launch from another static destructor).
inline host_block_pool& host_pool() {
  static host_block_pool* pool = [] {
    auto* p = new host_block_pool;
    ::pthread_atfork([] { host_pool().lock_for_fork(); }, [] { host_pool().unlock_after_fork(); },
                     [] { host_pool().unlock_after_fork(); });
    return p;
  }();
  return *pool;
}

}  // namespace detail

// Runs block(ctx, b) for b in [0, n), all at once, each on its own thread; returns when all have
// returned; rethrows the first exception a block threw. grid: the blocks of one grid when the n
// blocks are several grids side by side (emulated ranks: n = ranks x grid), so that
// gpu::grid_blocks() is grid and gpu::block_id() is b % grid; 0: unknown (grid_blocks() 0,
// block_id() b).
inline void run_host_blocks(int n, void (*block)(const void*, int), const void* ctx, int grid = 0) {
  detail::host_pool().run(n, block, ctx, grid);
}

// The same for a callable f(int block).
template <class F>
void run_host_blocks(int n, const F& f) {
  run_host_blocks(n, [](const void* p, int b) { (*static_cast<const F*>(p))(b); }, &f);
}

}  // namespace gpu
RCCLX_NAMESPACE_END

#endif  // !RCCLX_BACKEND_GPU
