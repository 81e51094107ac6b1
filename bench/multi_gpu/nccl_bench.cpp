// bench/multi_gpu/nccl_bench.cpp: rcclx-bench-nccl, the NCCL baseline of the multi-GPU comparison:
// ncclAllReduce (sum, out of place) on one process per GPU, in two variants per size:
//   nccl     : send and receive buffers from cudaMalloc
//   nccl_win : send and receive buffers from ncclMemAlloc, each registered once (at the largest
//              size) as a symmetric window (ncclCommWindowRegister, NCCL_WIN_COLL_SYMMETRIC), so
//              NCCL >= 2.27 may pick its symmetric kernels; --no-window leaves these rows out
//
//   scripts/launch -n 8 -- build/gpu/bench/multi_gpu/rcclx-bench-nccl --type bf16,float --json nccl8.json
//
// Start-up: the processes find each other through rcclx's socket bootstrap (torchrun's variables,
// as scripts/launch sets them), which carries rank 0's ncclUniqueId to the others. NCCL allows one
// rank per GPU, so fewer GPUs than ranks is refused (exit 2). NVLink multicast is never used:
// NCCL_NVLS_ENABLE=0 is forced before the first NCCL call, whatever the environment says.
// Per row: every rank's input element i is a small integer (input_value), the receive buffer is
// poisoned (NaN), the call runs once and every rank compares its whole output with the exact sum
// (integers up to 8 * ranks: exact in bf16 whatever the order of the additions, up to 32 ranks).
// Timing is rcclx-bench's (rcclx/testing/rank_timing.hpp, the same method): up to --graph-max-bytes
// K back-to-back calls captured in one CUDA graph, each replay between GPU events, replay / K,
// median over replays; above, GPU events around single calls, median; warm-up calls first. Every
// rank times; a row's time is the slowest rank's median; busbw = algbw * 2(N-1)/N.
// Exit status: 0 when every row is correct, 1 on a wrong row or an NCCL / CUDA error, 2 on bad
// arguments or fewer GPUs than ranks.
#include <nccl.h>

#include <rcclx/core/types.hpp>
#include <rcclx/host/socket_bootstrap.hpp>
#include <rcclx/testing/rank_timing.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include "../common/cli.hpp"
#include "../common/report.hpp"

static_assert(NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0), "symmetric windows need NCCL 2.27 or later");

namespace {

namespace rt = rcclx::testing;

constexpr const char* usage_text = R"(usage: scripts/launch -n N -- rcclx-bench-nccl [--type bf16,float] [--min-bytes B] [--max-bytes B]
           [--iters I] [--warmup W] [--calls-per-graph K] [--graph-max-bytes B] [--no-window]
           [--json FILE]
sizes accept K, M and G suffixes (KiB, MiB, GiB)
)";
[[noreturn]] void usage(const std::string& why) { bench::usage_exit("rcclx-bench-nccl", usage_text, why); }

struct options {
  std::vector<std::string> types{"bf16", "float"};
  std::size_t min_bytes = 8;
  std::size_t max_bytes = 256u * 1024 * 1024;
  std::size_t graph_max_bytes = 4 * 1024 * 1024;  // rcclx-bench's default: graph replays up to here
  rt::timing_options timing{5, 20, 32};          // rcclx-bench's defaults on a GPU
  bool window = true;
  std::string json, command;
};

options parse(int argc, char** argv) {
  options o;
  bench::args a(argc, argv, usage, o.command);
  while (a.next()) {
    if (a.is("--type")) o.types = a.list();
    else if (a.is("--min-bytes")) o.min_bytes = a.size();
    else if (a.is("--max-bytes")) o.max_bytes = a.size();
    else if (a.is("--graph-max-bytes")) o.graph_max_bytes = a.size();
    else if (a.is("--no-window")) o.window = false;
    else if (a.is("--json")) o.json = a.str();
    else if (!a.timing(o.timing)) a.unknown();
  }
  if (o.min_bytes < 1 || o.min_bytes > o.max_bytes) usage("need 1 <= --min-bytes <= --max-bytes");
  if (o.types.empty()) usage("--type needs at least one of bf16, float");
  for (const auto& t : o.types)
    if (t != "bf16" && t != "float") usage("bad --type " + t + " (bf16 or float)");
  return o;
}

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess)
    throw rcclx::error(rcclx::errc::runtime, std::string(what) + " failed: " + ncclGetErrorString(r) + " (" +
                                                 std::to_string(static_cast<int>(r)) + ")");
}

// Input element i of rank r: an integer in [-8, 7], period 35 in i (a chunk written to the wrong
// place shows). Sums over N ranks stay integers of magnitude <= 8N: exact in bf16 up to N = 32.
constexpr int pattern_period = 35;
inline int input_value(int rank, std::size_t i) {
  return static_cast<int>(((rank + 1) * (i % 7 + 1) + i / 7 % 5) % 16) - 8;
}

struct row {
  std::size_t bytes = 0, count = 0;
  std::string type, algo, timing;
  double time_us = 0, algbw = 0, busbw = 0;
  bool ok = false;
};

void print_header() {
  std::printf("%12s %11s %5s %-9s %7s %11s %10s %10s %s\n", "size(B)", "count", "type", "variant", "timing",
              "time(us)", "algbw", "busbw", "ok");
}

void print_row(const row& r) {
  std::printf("%12zu %11zu %5s %-9s %7s %11.2f %10.2f %10.2f %s\n", r.bytes, r.count, r.type.c_str(), r.algo.c_str(),
              r.timing.c_str(), r.time_us, r.algbw, r.busbw, r.ok ? "ok" : "FAIL");
  std::fflush(stdout);
}

// An array of rows, read by scripts/multi_gpu_table.py. type, algorithm, timing and time_us mean what
// they mean in rcclx-bench's rows; the size is "bytes" (rcclx-bench: "size_bytes"), algbw and busbw
// are GB/s.
void write_json(const std::string& path, const std::vector<row>& rows) {
  std::ofstream f = bench::open_output(path);
  f << "[\n";
  bench::write_json_rows(f, rows, [](const row& r) {
    return bench::fields{{"bytes", r.bytes},     {"count", r.count},     {"type", r.type},
                         {"algorithm", r.algo},  {"timing", r.timing},   {"time_us", r.time_us},
                         {"algbw", r.algbw},     {"busbw", r.busbw},     {"ok", r.ok}};
  }, "  ");
  f << "]\n";
}

// One pair of buffers at the largest size, and how the row's variant names it.
struct buffers {
  std::string algo;
  void* send = nullptr;
  void* recv = nullptr;
};

class runner {
 public:
  runner(const options& o, rcclx::host::bootstrap& bs, ncclComm_t comm)
      : o_(o), bs_(bs), comm_(comm), bytes_(std::max<std::size_t>(o.max_bytes, 16)) {
    stream_ = rcclx::gpu::stream_create();
    plain_ = {"nccl", rcclx::gpu::device_malloc(bytes_), rcclx::gpu::device_malloc(bytes_)};
    if (o.window) register_windows();
  }

  // Nothing is released here: after an error a peer may be gone and a kernel stuck, and a
  // collective deregistration or a synchronising free would wait forever; ncclCommAbort and the
  // process exit clean up instead.
  ~runner() = default;
  runner(const runner&) = delete;
  runner& operator=(const runner&) = delete;

  // Collective, at the end of a sweep that went well.
  void release() {
    // Deregistration is collective: only where every rank registered (else ncclCommDestroy
    // releases what is left).
    for (ncclWindow_t w : {win_send_, win_recv_})
      if (w) nccl_check(ncclCommWindowDeregister(comm_, w), "ncclCommWindowDeregister");
    for (void* p : {sym_.send, sym_.recv})
      if (p) nccl_check(ncclMemFree(p), "ncclMemFree");
    for (void* p : {plain_.send, plain_.recv}) rcclx::gpu::device_free(p);
    rcclx::gpu::stream_destroy(stream_);
  }

  // Every size of one element type; rank 0 prints and keeps the rows.
  template <class T>
  void run(const std::string& type, std::vector<row>& rows) {
    std::vector<buffers*> variants{&plain_};
    if (windowed_) variants.push_back(&sym_);
    for (buffers* b : variants) fill<T>(b->send, bytes_ / sizeof(T));  // element i is the same at every size
    for (std::size_t bytes = o_.min_bytes; bytes <= o_.max_bytes; bytes *= 2) {
      const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(T));
      for (buffers* b : variants) {
        const row r = run_row<T>(*b, type, count);
        if (bs_.rank() == 0) print_row(r), rows.push_back(r);
      }
      if (bytes > o_.max_bytes / 2) break;  // no overflow at the top
    }
  }

 private:
  // Allocates and registers the window buffers; on any rank's failure, says why and goes on
  // without nccl_win rows.
  void register_windows() {
    sym_.algo = "nccl_win";
    std::string why;
    ncclResult_t r = ncclMemAlloc(&sym_.send, bytes_);
    if (r == ncclSuccess) r = ncclMemAlloc(&sym_.recv, bytes_);
    if (r != ncclSuccess) why = std::string("ncclMemAlloc: ") + ncclGetErrorString(r);
    // Collective from here: every rank calls both registrations, or none (a rank whose allocation
    // failed would leave the others waiting).
    const auto allocated = bs_.allgather_value<int>(why.empty());
    if (std::find(allocated.begin(), allocated.end(), 0) == allocated.end()) {
      // Both calls on every rank, whatever the first returned, so the collectives stay paired.
      const ncclResult_t rs = ncclCommWindowRegister(comm_, sym_.send, bytes_, &win_send_, NCCL_WIN_COLL_SYMMETRIC);
      const ncclResult_t rr = ncclCommWindowRegister(comm_, sym_.recv, bytes_, &win_recv_, NCCL_WIN_COLL_SYMMETRIC);
      r = rs != ncclSuccess ? rs : rr;
      if (r != ncclSuccess) {
        why = std::string("ncclCommWindowRegister: ") + ncclGetErrorString(r);
      } else if (!win_send_ || !win_recv_) {
        // Some releases return success and no window when the communicator lacks symmetric
        // support (not every pair of GPUs reaches the other by P2P, cuMem off, NCCL_WIN_ENABLE=0).
        why = "ncclCommWindowRegister returned no window (no symmetric memory support on this communicator)";
      }
    } else if (why.empty()) {
      why = "ncclMemAlloc failed on another rank";
    }
    const auto registered = bs_.allgather_value<int>(why.empty());
    windowed_ = std::find(registered.begin(), registered.end(), 0) == registered.end();
    if (!windowed_) {
      std::printf("# rank %d: no nccl_win rows: %s\n", bs_.rank(), why.empty() ? "another rank failed" : why.c_str());
      std::fflush(stdout);
      // Not all ranks registered: a collective deregistration would hang, and the memory must
      // outlive the windows; both are left to ncclCommDestroy and the process exit.
      if (win_send_ || win_recv_) win_send_ = win_recv_ = nullptr, sym_ = buffers{};
    }
  }

  template <class T>
  void fill(void* dst, std::size_t count) {
    std::vector<T> h(count);
    for (std::size_t i = 0; i < count; ++i)
      h[i] = T(static_cast<float>(input_value(bs_.rank(), i % pattern_period)));
    rcclx::gpu::copy(dst, h.data(), count * sizeof(T));
  }

  // Every element of this rank's output against the exact sum over the ranks (NaN: the poison fails).
  template <class T>
  bool check(const std::vector<T>& h) const {
    float expected[pattern_period];
    for (int i = 0; i < pattern_period; ++i) {
      int sum = 0;
      for (int p = 0; p < bs_.num_ranks(); ++p) sum += input_value(p, static_cast<std::size_t>(i));
      expected[i] = static_cast<float>(sum);
    }
    for (std::size_t i = 0; i < h.size(); ++i)
      if (!(static_cast<float>(h[i]) == expected[i % pattern_period])) return false;
    return true;
  }

  void check_async() {
    ncclResult_t async = ncclSuccess;
    nccl_check(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
    nccl_check(async, "ncclAllReduce (asynchronous error)");
  }

  template <class T>
  row run_row(const buffers& b, const std::string& type, std::size_t count) {
    const int n = bs_.num_ranks();
    const ncclDataType_t dt = std::is_same<T, float>::value ? ncclFloat32 : ncclBfloat16;
    row r;
    r.bytes = count * sizeof(T);
    r.count = count;
    r.type = type;
    r.algo = b.algo;
    // Correctness: the receive buffer is poisoned (all bits set: NaN in bf16 and float) first.
    rcclx::gpu::check(cudaMemsetAsync(b.recv, 0xFF, r.bytes, stream_), "cudaMemsetAsync");
    rcclx::gpu::stream_synchronize(stream_);
    // Timing: every rank the same way, starting together (time_us warms up first).
    const auto mode = r.bytes <= o_.graph_max_bytes ? rt::timing_mode::graph : rt::timing_mode::events;
    const rt::rank_timing t = rt::time_on_ranks(
        [&](std::uint64_t v) { return bs_.allgather_value(v); }, mode, o_.timing, stream_,
        [&](rcclx::gpu::stream_t s) { nccl_check(ncclAllReduce(b.send, b.recv, count, dt, ncclSum, comm_, s), "ncclAllReduce"); },
        [&] {
          rcclx::gpu::stream_synchronize(stream_);
          check_async();
        },
        static_cast<const T*>(b.recv), count, [&](const std::vector<T>& h) { return check(h); });
    r.ok = t.checked;
    r.timing = t.fell_back ? "events*" : rt::to_string(mode);  // the capture was refused: events, like rcclx-bench says
    r.time_us = t.time_us;
    r.algbw = static_cast<double>(r.bytes) / (r.time_us * 1e3);
    r.busbw = r.algbw * 2.0 * (n - 1) / n;
    return r;
  }

  const options& o_;
  rcclx::host::bootstrap& bs_;
  ncclComm_t comm_;
  std::size_t bytes_;
  rcclx::gpu::stream_t stream_{};
  buffers plain_, sym_;
  bool windowed_ = false;
  ncclWindow_t win_send_ = nullptr;
  ncclWindow_t win_recv_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  // Before any NCCL call: NVLink SHARP / multicast must never be used on these machines.
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  const options o = parse(argc, argv);
  rcclx::host::launch_config cfg;
  try {
    cfg = rcclx::host::launch_config::from_env();
  } catch (const rcclx::error& e) {
    std::printf("rcclx-bench-nccl: %s\n(one process per GPU: scripts/launch -n N -- rcclx-bench-nccl ...)\n", e.what());
    return 2;
  }
  const int rank = cfg.rank;
  std::vector<row> rows;
  ncclComm_t comm = nullptr;
  bool correct = true;
  try {
    // Checked before the rendezvous, identically on every rank, so all of them stop at once.
    const int gpus = rcclx::gpu::device_count();
    if (gpus < cfg.num_ranks) {
      if (rank == 0)
        std::printf("rcclx-bench-nccl: needs one GPU per rank (%d ranks, %d GPUs)\n", cfg.num_ranks, gpus);
      return 2;
    }
    rcclx::gpu::set_device(cfg.device % gpus);
    rcclx::host::socket_bootstrap bs(cfg);
    ncclUniqueId id{};
    if (rank == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    id = bs.allgather_value(id)[0];
    nccl_check(ncclCommInitRank(&comm, cfg.num_ranks, id, rank), "ncclCommInitRank");
    if (rank == 0) {
      int v = 0;  // codes from 2.9 on are major * 10000 + minor * 100 + patch
      nccl_check(ncclGetVersion(&v), "ncclGetVersion");
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      char date[32];
      std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", gmtime_r(&now, &tm));
      std::printf("# rcclx-bench-nccl: ncclAllReduce sum, out of place, NCCL %d.%d.%d (built with %d.%d.%d), %d ranks on %d "
                  "GPU(s) (%s), %s\n# command: %s\n",
                  v / 10000, v % 10000 / 100, v % 100, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, cfg.num_ranks, gpus,
                  bench::device_name().c_str(), date, o.command.c_str());
      std::printf("# variants: nccl = cudaMalloc buffers; nccl_win = ncclMemAlloc buffers registered as symmetric "
                  "windows (NCCL_WIN_COLL_SYMMETRIC); NCCL_NVLS_ENABLE=0\n"
                  "# time: slowest rank's median; graph: %d calls per CUDA graph, replay / %d, up to %zu B, then "
                  "events around single calls; %d iterations after %d warm-up calls\n"
                  "# algbw = size/time (GB/s), busbw = algbw*2(N-1)/N; ok: every rank's output equals the exact sum\n",
                  o.timing.calls_per_graph, o.timing.calls_per_graph, o.graph_max_bytes, o.timing.iters,
                  o.timing.warmup);
      std::fflush(stdout);
    }
    {
      runner run(o, bs, comm);
      if (rank == 0) print_header();
      for (const auto& t : o.types) {
        if (t == "bf16") run.run<rcclx::bf16>(t, rows);
        else run.run<float>(t, rows);
      }
      run.release();
      bs.barrier();
    }
    nccl_check(ncclCommFinalize(comm), "ncclCommFinalize");
    nccl_check(ncclCommDestroy(comm), "ncclCommDestroy");
    comm = nullptr;
  } catch (const std::exception& e) {
    std::printf("rcclx-bench-nccl rank %d: %s\n", rank, e.what());
    std::fflush(stdout);
    if (comm) (void)ncclCommAbort(comm);  // peers may be stuck in a collective: do not wait for them
    correct = false;
  }
  for (const auto& r : rows) correct = correct && r.ok;
  if (rank == 0) {
    if (!o.json.empty()) {
      try {
        write_json(o.json, rows);  // what was measured, also when a later row failed
        std::printf("# json: %s\n", o.json.c_str());
      } catch (const std::exception& e) {
        std::printf("rcclx-bench-nccl: %s\n", e.what());
        correct = false;
      }
    }
    std::printf("# correctness: %s\n", correct ? "every row exact on every rank" : "FAILED (see above)");
  }
  return correct ? 0 : 1;
}
