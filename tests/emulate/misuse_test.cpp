// Emulated threads (RCCLX_EMULATE_THREADS=1, RCCLX_CHECKS=1): a user's fused kernel (tile
// AllReduce + residual + RMSNorm, rows of 4096 floats) runs with its GPU block size on the host, and
// the block-level misuses that pass silently with one-thread blocks end in a named error:
// publish() (group-collective) from thread 0 only, a bf16 residual 2 bytes into its allocation,
// rms_norm<T, BlockThreads> in a block of another size. The correct kernel against float64.
#include <rcclx/fused/stages.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/gpu/shared.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "../support/bits.hpp"
#include "../support/catch.hpp"

static_assert(rcclx::emulate_threads, "tests/emulate is built with RCCLX_EMULATE_THREADS=1");

namespace emulate_misuse {

namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
constexpr int max_r = 8;

// Rank r's value at (row, col): in [-1, 1), exact in bf16 (8 significant bits).
inline float value(int r, std::size_t row, std::size_t col) {
  const std::uint64_t h = rcclx_test::mix((row << 24) ^ (col << 4) ^ static_cast<std::uint64_t>(r));
  return static_cast<float>(static_cast<int>(h >> 56) - 128) / 128.0f;
}

enum class misuse { none, publish_from_thread0 };

// Every block of every rank: rows t = block, block + blocks, ... of its rank's input, published,
// then reduced with residual + RMSNorm into out. NormThreads: rms_norm's BlockThreads.
template <class T, int NormThreads>
struct norm_kernel {
  static constexpr int max_threads_per_block = 512;
  const rcclx::core::peer_table<T, max_r>* tables;
  T* out[max_r];
  const T* residual;  // [rows][cols]
  const T* weight;    // [cols]
  fz::tile_slots slots;
  std::size_t rows, cols;
  misuse what;

  template <class G>
  void operator()(const G& g, rt::launch_index ix) const {
    using norm = fz::rms_norm<T, NormThreads>;
    auto& tmp = rcclx::gpu::block_shared<typename norm::storage_type, struct norm_tag>();
    const fz::row_tiles map{rows, cols};
    fz::tile_allreduce<T, max_r> ar(tables[ix.rank], slots, cols, static_cast<int>(rows));
    const fz::epilogue<fz::residual_add<T>, norm, fz::store<T>> epi{
        {residual, nullptr, cols}, {weight, 1e-6f, cols, &tmp}, {out[ix.rank], cols}};
    for (int t = ix.block; t < static_cast<int>(rows); t += ix.num_blocks) {
      T* in = ar.input(t);
      for (std::size_t e = static_cast<std::size_t>(g.thread_rank()); e < cols; e += static_cast<std::size_t>(g.size()))
        in[e] = T(value(ix.rank, static_cast<std::size_t>(t), e));
      if (what == misuse::publish_from_thread0) {
        if (g.thread_rank() == 0) ar.publish(g, t);  // group-collective: every thread must call it
      } else {
        ar.publish(g, t);
      }
    }
    bool ok = true;
    for (int t = ix.block; t < static_cast<int>(rows) && ok; t += ix.num_blocks)
      ok = ar.template reduce<4>(g, t, map, epi);  // 4 x 256 threads x 4 floats: rows of up to 4096
    ar.finish(g, ix.num_blocks);
  }
};

template <class T>
struct problem {
  int n;
  std::size_t rows, cols;
  fz::tile_slots slots;
  rt::emulated_world<max_r> world;
  std::vector<std::vector<T>> out;
  std::vector<T> residual;  // one element more: the misaligned case starts 1 element in
  std::vector<T> weight;

  // timeout_ns: the pads' bound (a rank whose block failed leaves its peers waiting that long).
  problem(int ranks, std::size_t r, std::size_t c, std::uint64_t timeout_ns = rcclx::core::default_timeout_ns)
      : n(ranks), rows(r), cols(c), slots{0, static_cast<int>(r)},
        world(ranks, fz::tile_allreduce<T, max_r>::workspace_bytes(c, r), slots.end(), timeout_ns),
        out(static_cast<std::size_t>(ranks), std::vector<T>(r * c, T(-7.0f))), residual(r * c + 8), weight(c) {
    for (std::size_t i = 0; i < residual.size(); ++i) residual[i] = T(value(99, i / c, i % c));
    for (std::size_t j = 0; j < c; ++j) weight[j] = T(0.5f + value(98, 0, j) * 0.25f);
  }

  template <int NormThreads>
  void run(int blocks, int threads, misuse what = misuse::none, std::size_t residual_offset = 0) {
    norm_kernel<T, NormThreads> k{};
    k.tables = world.template device_tables<T>();
    for (int r = 0; r < n; ++r) k.out[r] = out[static_cast<std::size_t>(r)].data();
    k.residual = residual.data() + residual_offset;
    k.weight = weight.data();
    k.slots = slots;
    k.rows = rows;
    k.cols = cols;
    k.what = what;
    rt::launch_emulated(world, blocks, threads, k);
  }

  template <int NormThreads>
  std::string error_of(int blocks, int threads, misuse what = misuse::none, std::size_t residual_offset = 0) {
    try {
      run<NormThreads>(blocks, threads, what, residual_offset);
    } catch (const rcclx::error& e) {
      return e.what();
    }
    return "";
  }

  bool untouched() const {
    for (const auto& o : out)
      for (const T& x : o)
        if (static_cast<float>(x) != -7.0f) return false;
    return true;
  }
};

// A kernel whose thread 3 of block 0 of rank 1 recurses through `depth` frames of about 1 KiB.
volatile int deep_sink = 0;
__attribute__((noinline)) int deep_frames(int d) {
  volatile char frame[1024];
  frame[d % 1024] = static_cast<char>(d);
  if (d == 0) return frame[0];
  return deep_frames(d - 1) + frame[(d * 7) % 1024];
}
struct deep_kernel {
  int depth;
  template <class G>
  void operator()(const G& g, rt::launch_index ix) const {
    if (ix.rank == 1 && ix.block == 0 && g.thread_rank() == 3) deep_sink = deep_frames(depth);
    g.sync();
  }
};

// This program again, running only the hidden test case `tag` with RCCLX_EMULATE_STACK = stack
// (nullptr: unset): its output (stdout and stderr) and whether it ended in abort().
struct child_run {
  std::string output;
  bool aborted;
};
inline child_run run_child(const char* tag, const char* stack) {
  int fd[2];
  REQUIRE(::pipe(fd) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(fd[1], 1);
    ::dup2(fd[1], 2);
    ::close(fd[0]);
    if (stack) ::setenv("RCCLX_EMULATE_STACK", stack, 1);
    else ::unsetenv("RCCLX_EMULATE_STACK");
    char self[] = "/proc/self/exe";
    char* argv[] = {self, const_cast<char*>(tag), nullptr};
    ::execv(self, argv);
    ::_exit(127);
  }
  ::close(fd[1]);
  child_run r{{}, false};
  char buf[4096];
  for (ssize_t k; (k = ::read(fd[0], buf, sizeof buf)) > 0;) r.output.append(buf, static_cast<std::size_t>(k));
  ::close(fd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
  return r;
}

}  // namespace emulate_misuse

using namespace emulate_misuse;

// Hidden: run in a process of their own by the case below (an overflow ends the process).
TEST_CASE("emulated threads: 1 GiB of frames in one thread", "[.overflow]") {
  rt::launch_emulated(2, 2, 64, deep_kernel{1 << 20});  // more than any stack
}
TEST_CASE("emulated threads: 200 KiB of frames in one thread", "[.deep]") {
  rt::launch_emulated(2, 2, 64, deep_kernel{200});
  std::printf("200 KiB of frames: done\n");
}

TEST_CASE("emulated threads: a fiber stack overflow ends the process naming the thread, RCCLX_EMULATE_STACK sets the size",
          "[emulate]") {
  const child_run over = run_child("[.overflow]", "256K");
  CAPTURE(over.output);
  REQUIRE(over.aborted);
  REQUIRE(over.output.find("rcclx emulate: fiber stack overflow in rank 1 block 0 thread 3 (stack 262144 bytes; "
                           "RCCLX_EMULATE_STACK=256K)") != std::string::npos);
  const child_run deflt = run_child("[.deep]", nullptr);  // 200 KiB of frames in the default 128 KiB
  CAPTURE(deflt.output);
  REQUIRE(deflt.aborted);
  REQUIRE(deflt.output.find("fiber stack overflow in rank 1 block 0 thread 3 (stack 131072 bytes") != std::string::npos);
  const child_run big = run_child("[.deep]", "1M");
  CAPTURE(big.output);
  REQUIRE(!big.aborted);
  REQUIRE(big.output.find("200 KiB of frames: done") != std::string::npos);
  REQUIRE(big.output.find("overflow") == std::string::npos);
}

TEST_CASE("emulated threads: RCCLX_EMULATE_STACK's values", "[emulate]") {
  namespace d = rcclx::gpu::detail;
  REQUIRE(d::parse_fiber_stack("2M") == (std::size_t{2} << 20));
  REQUIRE(d::parse_fiber_stack("512k") == (std::size_t{512} << 10));
  REQUIRE(d::parse_fiber_stack("70000") == 73728);  // whole pages
  for (const char* v : {"12K", "abc", "64Q", "", "2G", "99999999999999999999"}) {
    std::string what;
    try {
      (void)d::parse_fiber_stack(v);
    } catch (const rcclx::error& e) {
      what = e.what();
    }
    CAPTURE(v, what);
    REQUIRE(what.find(std::string("RCCLX_EMULATE_STACK = \"") + v + "\"") != std::string::npos);
  }
  REQUIRE(d::fiber_stack_bytes() % 4096 == 0);
}

TEST_CASE("emulated threads: AllReduce + residual + RMSNorm with 256-thread blocks against float64", "[emulate]") {
  problem<float> p(4, 6, 4096);
  p.run<256>(3, 256);
  double worst = 0.0;
  for (std::size_t i = 0; i < p.rows; ++i) {
    std::vector<double> y(p.cols);
    double ss = 0.0;
    for (std::size_t j = 0; j < p.cols; ++j) {
      double s = 0.0;
      for (int r = 0; r < p.n; ++r) s += value(r, i, j);
      y[j] = s + static_cast<double>(p.residual[i * p.cols + j]);
      ss += y[j] * y[j];
    }
    const double f = 1.0 / std::sqrt(ss / static_cast<double>(p.cols) + 1e-6);
    for (int r = 0; r < p.n; ++r)
      for (std::size_t j = 0; j < p.cols; ++j) {
        const double want = y[j] * f * static_cast<double>(p.weight[j]);
        const double got = p.out[static_cast<std::size_t>(r)][i * p.cols + j];
        const double err = std::fabs(got - want);
        if (err > worst) worst = err;
        INFO("rank " << r << " row " << i << " col " << j);
        REQUIRE(err <= 1e-5 * (1.0 + std::fabs(want)));
      }
  }
  CAPTURE(worst);
}

TEST_CASE("emulated threads: publish() from thread 0 only is a named error, not a hang", "[emulate]") {
  problem<float> p(2, 4, 1024, 300'000'000ull);  // the peers of the failed block wait 0.3 s
  const std::string e = p.error_of<256>(2, 256, misuse::publish_from_thread0);
  CAPTURE(e);
  REQUIRE_THAT(e, RCCLX_CONTAINS("emulated threads"));
  REQUIRE_THAT(e, RCCLX_CONTAINS("block-wide sync"));
}

TEST_CASE("emulated threads: rms_norm<T, BlockThreads> in a block of another size is refused, outputs untouched", "[emulate]") {
  problem<float> p(2, 4, 1024);
  const std::string e = p.error_of<128>(2, 256);
  CAPTURE(e);
  REQUIRE_THAT(e, RCCLX_CONTAINS("BlockThreads = 128"));
  REQUIRE_THAT(e, RCCLX_CONTAINS("has 256 threads"));
  REQUIRE(p.untouched());
}

TEST_CASE("emulated threads, checked mode: a bf16 residual 2 bytes into its allocation is a named error", "[emulate]") {
  problem<rcclx::bf16> p(2, 4, 1024);
  REQUIRE(p.error_of<256>(2, 256).empty());  // aligned: runs
  problem<rcclx::bf16> q(2, 4, 1024);
  const std::string e = q.error_of<256>(2, 256, misuse::none, 1);
  CAPTURE(e);
  if (rcclx::checks) {
    REQUIRE_THAT(e, RCCLX_CONTAINS("misaligned"));
    REQUIRE(q.untouched());
  }
}

// The speed of this mode (printed, not asserted): a tile AllReduce of 8 ranks x 4 blocks x 256
// threads over 8 rows x 4096 floats per rank.
TEST_CASE("emulated threads: speed of an 8-rank tile AllReduce, 4 blocks x 256 threads, 8 x 4096 floats", "[emulate][speed]") {
  problem<float> p(8, 8, 4096);
  p.run<256>(4, 256);  // warm: the pool's threads and fiber stacks
  const int calls = 5;
  const auto t0 = std::chrono::steady_clock::now();
  for (int c = 0; c < calls; ++c) p.run<256>(4, 256);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls;
  std::printf("emulated threads: tile AllReduce + residual + RMSNorm, 8 ranks x 4 blocks x 256 threads, 8 x 4096 floats: "
              "%.3f s per call\n", s);
  SUCCEED();
}
