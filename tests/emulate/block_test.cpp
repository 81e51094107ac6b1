// Emulated threads (RCCLX_EMULATE_THREADS=1): every thread of a block runs on the host, with the
// group API, warp shuffles and votes, block-shared memory and block reductions of a GPU block, and
// the block-level misuses a GPU hangs or faults on end in a named error. Built with
// RCCLX_EMULATE_THREADS=1 and RCCLX_CHECKS=1 (tests/emulate/CMakeLists.txt).
#include <rcclx/gpu/atomic.hpp>
#include <rcclx/gpu/clock.hpp>
#include <rcclx/gpu/group.hpp>
#include <rcclx/gpu/memory.hpp>
#include <rcclx/gpu/reduce.hpp>
#include <rcclx/gpu/shared.hpp>
#include <rcclx/gpu/warp.hpp>
#include <rcclx/testing/launch.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../support/catch.hpp"

static_assert(rcclx::emulate_threads, "tests/emulate is built with RCCLX_EMULATE_THREADS=1");
static_assert(RCCLX_WARP_SIZE == RCCLX_EMULATE_WARP_SIZE, "the emulated warp size");

namespace emulate_test {

namespace rg = rcclx::gpu;
namespace rt = rcclx::testing;

// Per (rank, block, thread): what the thread saw. Host memory, written by the emulated threads.
struct seen {
  int rank_in_group, size, x, first;
  int block_sum;       // the block's thread ranks summed through block-shared memory
  int lane0, xor1;     // shuffle(rank, 0) and shuffle_xor(rank, 1)
  int any_odd_lane5;   // warp_any(lane == 5)
  int sync_or_last;    // sync_or(thread == last)
  float reduced;       // block_reduce<float, 256>::sum(thread + 1)
};

struct basics_kernel {
  static constexpr int max_threads_per_block = 256;
  seen* out;  // [ranks][blocks][256]

  template <class G>
  void operator()(const G& g, rt::launch_index ix) const {
    const int t = g.thread_rank(), n = g.size();
    seen& s = out[(ix.rank * ix.num_blocks + ix.block) * 256 + t];
    s.rank_in_group = t;
    s.size = n;
    s.x = static_cast<int>(rg::thread_x());
    s.first = rg::first_thread_of_block() ? 1 : 0;
    int(&sh)[256] = rg::block_shared<int[256], struct basics_tag>();
    sh[t] = t;
    g.sync();
    int sum = 0;
    for (int i = 0; i < n; ++i) sum += sh[i];
    s.block_sum = sum;
    g.sync();
    s.lane0 = rg::shuffle(t, 0);
    s.xor1 = rg::shuffle_xor(t, 1);
    s.any_odd_lane5 = rg::warp_any(t % RCCLX_WARP_SIZE == 5 && (t / RCCLX_WARP_SIZE) % 2 == 1) ? 1 : 0;
    s.sync_or_last = g.sync_or(t == n - 1) ? 1 : 0;
    using reduce = rg::block_reduce<float, 256>;
    auto& tmp = rg::block_shared<reduce::storage_type, struct reduce_tag>();
    s.reduced = reduce().sum(static_cast<float>(t + 1), tmp);
  }
};

// Thread 0 spins (gpu::spin_pause, as every bounded wait) on a word the block's last thread writes
// after a loop of its own: a waiting thread must let its block's other threads run.
struct spin_kernel {
  std::uint32_t* flags;  // one per block
  int* done;

  template <class G>
  void operator()(const G& g, rt::launch_index ix) const {
    std::uint32_t* f = flags + ix.rank * ix.num_blocks + ix.block;
    if (g.thread_rank() == 0) {
      while (rg::load_acquire_system(f) == 0u) rg::spin_pause();
      done[ix.rank * ix.num_blocks + ix.block] = 1;
    } else if (g.thread_rank() == g.size() - 1) {
      for (int i = 0; i < 100; ++i) rg::spin_pause();
      rg::store_release_system(f, 1u);
    }
    g.sync();
  }
};

// A block-wide sync from thread 0 only (the others return): on a GPU, the block's barrier waits for
// ever.
struct sync_from_thread0 {
  template <class G>
  void operator()(const G& g, rt::launch_index) const {
    if (g.thread_rank() == 0) g.sync();
  }
};

// Two syncs at two places of the source, half the block at each.
struct two_syncs {
  template <class G>
  void operator()(const G& g, rt::launch_index) const {
    if (g.thread_rank() < g.size() / 2) g.sync();
    else g.sync();
  }
};

// A shuffle by lanes 0..15 of a warp only: the other lanes return.
struct half_warp_shuffle {
  int* out;
  template <class G>
  void operator()(const G& g, rt::launch_index) const {
    if (g.thread_rank() % RCCLX_WARP_SIZE < 16) out[g.thread_rank()] = rg::shuffle(g.thread_rank(), 0);
  }
};

// block_reduce<float, 256> in a block of 128 threads.
struct reduce_mismatch {
  float* out;
  template <class G>
  void operator()(const G& g, rt::launch_index) const {
    using reduce = rg::block_reduce<float, 256>;
    auto& tmp = rg::block_shared<reduce::storage_type, struct mismatch_tag>();
    out[g.thread_rank()] = reduce().sum(1.0f, tmp);
  }
};

// A 16-byte load at p (checked mode: refused unless 16-byte aligned).
struct vector_load {
  const unsigned char* p;
  rg::vec16* out;
  template <class G>
  void operator()(const G& g, rt::launch_index) const {
    if (g.thread_rank() == 0) *out = rg::load16(p);
  }
};

// Thread `who` writes element `at` of a block-shared int[16] (16 and up: past its end).
struct shared_write {
  int who, at;
  template <class G>
  void operator()(const G& g, rt::launch_index) const {
    int(&a)[16] = rg::block_shared<int[16], struct overflow_tag>();
    int* p = a;
    if (g.thread_rank() == who) p[at] = 1;
    g.sync();
  }
};

// RCCLX_SHARED storage is the block's: thread 0's write is what every thread reads after a sync.
struct shared_macro {
  int* out;  // [blocks][threads]
  template <class G>
  void operator()(const G& g, rt::launch_index ix) const {
    RCCLX_SHARED int word;
    if (g.thread_rank() == 0) word = 100 + ix.block;
    g.sync();
    out[ix.block * g.size() + g.thread_rank()] = word;
    g.sync();
  }
};

// `syncs` block-wide syncs in a row (the speed case: a sync is one switch per thread).
struct sync_loop {
  int syncs;
  template <class G>
  void operator()(const G& g, rt::launch_index) const {
    for (int i = 0; i < syncs; ++i) g.sync();
  }
};

template <class F>
std::string launch_error(int ranks, int blocks, int threads, const F& f) {
  try {
    rt::launch_emulated(ranks, blocks, threads, f);
  } catch (const rcclx::error& e) {
    return e.what();
  }
  return "";
}

}  // namespace emulate_test

using namespace emulate_test;

TEST_CASE("emulated threads: thread ranks, block-shared memory, shuffles, votes, sync_or, block_reduce", "[emulate]") {
  const int ranks = 2, blocks = 3, threads = 256;
  std::vector<seen> out(static_cast<std::size_t>(ranks * blocks * threads));
  basics_kernel k{out.data()};
  rt::launch_emulated(ranks, blocks, threads, k);
  for (int b = 0; b < ranks * blocks; ++b) {
    for (int t = 0; t < threads; ++t) {
      const seen& s = out[static_cast<std::size_t>(b * threads + t)];
      INFO("block " << b << " thread " << t);
      REQUIRE(s.rank_in_group == t);
      REQUIRE(s.size == threads);
      REQUIRE(s.x == t);
      REQUIRE(s.first == (t == 0 ? 1 : 0));
      REQUIRE(s.block_sum == threads * (threads - 1) / 2);
      REQUIRE(s.lane0 == t / RCCLX_WARP_SIZE * RCCLX_WARP_SIZE);
      REQUIRE(s.xor1 == (t ^ 1));
      REQUIRE(s.any_odd_lane5 == ((t / RCCLX_WARP_SIZE) % 2 == 1 ? 1 : 0));
      REQUIRE(s.sync_or_last == 1);
      REQUIRE(s.reduced == static_cast<float>(threads * (threads + 1) / 2));  // exact in float
    }
  }
}

TEST_CASE("emulated threads: a thread spinning on a word leaves its block's other threads room to write it", "[emulate]") {
  const int ranks = 2, blocks = 2;
  std::vector<std::uint32_t> flags(ranks * blocks, 0u);
  std::vector<int> done(ranks * blocks, 0);
  rt::launch_emulated(ranks, blocks, 512, spin_kernel{flags.data(), done.data()});
  for (int d : done) REQUIRE(d == 1);
}

TEST_CASE("emulated threads: a block-wide sync reached by some threads only is a named error, not a hang", "[emulate]") {
  const std::string e = launch_error(2, 2, 128, sync_from_thread0{});
  CAPTURE(e);
  REQUIRE_THAT(e, RCCLX_CONTAINS("emulated threads"));
  REQUIRE_THAT(e, RCCLX_CONTAINS("block-wide sync"));
  REQUIRE_THAT(e, RCCLX_CONTAINS("block_test.cpp"));
  const std::string d = launch_error(1, 1, 64, two_syncs{});
  CAPTURE(d);
  REQUIRE_THAT(d, RCCLX_CONTAINS("divergent block-wide syncs"));
  std::vector<int> out(64, -1);
  const std::string w = launch_error(1, 1, 64, half_warp_shuffle{out.data()});
  CAPTURE(w);
  REQUIRE_THAT(w, RCCLX_CONTAINS("warp"));
  // The pool's threads are fine afterwards: a correct launch runs.
  std::vector<seen> ok(256);
  rt::launch_emulated(1, 1, 256, basics_kernel{ok.data()});
  REQUIRE(ok[255].reduced == 32896.0f);
}

TEST_CASE("emulated threads: block_reduce in a block of another size than BlockThreads is refused", "[emulate]") {
  std::vector<float> out(128, -1.0f);
  const std::string e = launch_error(1, 1, 128, reduce_mismatch{out.data()});
  CAPTURE(e);
  REQUIRE_THAT(e, RCCLX_CONTAINS("BlockThreads = 256"));
  REQUIRE_THAT(e, RCCLX_CONTAINS("has 128 threads"));
  for (float v : out) REQUIRE(v == -1.0f);  // nothing summed
}

TEST_CASE("emulated threads: launch_emulated refuses blocks above the kernel's bound", "[emulate]") {
  std::vector<seen> out(512);
  const std::string e = launch_error(1, 1, 512, basics_kernel{out.data()});
  REQUIRE_THAT(e, RCCLX_CONTAINS("threads_per_block = 512"));
}

TEST_CASE("emulated threads, checked mode: a 16-byte vector access 2 bytes past a 16-byte boundary is refused", "[emulate]") {
  alignas(16) unsigned char bytes[48] = {};
  rg::vec16 v{};
  REQUIRE(launch_error(1, 1, 32, vector_load{bytes + 16, &v}).empty());
  const std::string e = launch_error(1, 1, 32, vector_load{bytes + 2, &v});
  CAPTURE(e);
  if (rcclx::checks) {
    REQUIRE_THAT(e, RCCLX_CONTAINS("misaligned"));
    REQUIRE_THAT(e, RCCLX_CONTAINS("2 bytes past a 16-byte boundary"));
  }
}

TEST_CASE("emulated threads: a write past the end of a block_shared object is a named error", "[emulate]") {
  REQUIRE(launch_error(2, 2, 64, shared_write{7, 15}).empty());
  const std::string e = launch_error(2, 2, 64, shared_write{7, 16});
  CAPTURE(e);
  REQUIRE_THAT(e, RCCLX_CONTAINS("wrote past the end of"));
  REQUIRE_THAT(e, RCCLX_CONTAINS("64 bytes of block-shared memory"));
  REQUIRE(launch_error(2, 2, 64, shared_write{7, 0}).empty());  // the next launch starts clean
}

TEST_CASE("emulated threads: RCCLX_SHARED is one object per block", "[emulate]") {
  std::vector<int> out(3 * 96, -1);
  rt::launch_emulated(1, 3, 96, shared_macro{out.data()});
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < 96; ++t) REQUIRE(out[static_cast<std::size_t>(b * 96 + t)] == 100 + b);
}

// Printed, not asserted: the cost of a switch between two emulated threads (one OS thread).
TEST_CASE("emulated threads: speed of block-wide syncs, 1 block x 1024 threads", "[emulate][speed]") {
  const int syncs = 2000;
  rt::launch_emulated(1, 1, 1024, sync_loop{10});  // warm: the pool's thread and its stacks
  const auto t0 = std::chrono::steady_clock::now();
  rt::launch_emulated(1, 1, 1024, sync_loop{syncs});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("emulated threads: %d syncs of 1024 threads: %.1f ns per thread and sync\n", syncs,
              s * 1e9 / (1024.0 * syncs));
  SUCCEED();
}
