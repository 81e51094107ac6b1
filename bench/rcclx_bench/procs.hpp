// bench/rcclx_bench/procs.hpp: rcclx-bench with one process per rank (--procs N, --procs-child),
// through rcclx::host::communicator (socket rendezvous, real IPC handles; POSIX shared memory on the
// host backend). Included by main.cpp after its runner (it reuses options, row and run_type).
//
//   rcclx-bench --procs 8 [same options as --emulated]   forks 8 ranks, then the same sizes emulated
//                                                        and a side-by-side table (procs vs emulated)
//   scripts/launch -n 8 -- rcclx-bench --procs-child ...  one rank per process from a launcher
//
// A row: run once and checked (rank 0 against the float64 reference, every rank's output bits
// compared), then timed like the emulated rows on every rank (testing/rank_timing.hpp), call checks
// off. "reg" rows: the input registered (zero-copy): flat out of place, tree in place. Processes on
// ONE GPU run time-sliced: their barriers complete only as the contexts take turns.
#pragma once

#include <unistd.h>

#include <rcclx/host/communicator.hpp>
#include <rcclx/host/fork_ranks.hpp>
#include <rcclx/host/socket_bootstrap.hpp>

#include <rcclx/testing/rank_timing.hpp>

#include <tuple>

namespace {  // the same translation unit as main.cpp's runner, whose types it uses
namespace procs {

// A row's timing across the ranks (testing/rank_timing.hpp): the slowest rank's median.
template <class Row>
void timed(Row& r, rt::timing_mode mode, const rt::rank_timing& t) {
  r.identical = t.identical;
  r.timing = t.fell_back ? "events*" : rt::to_string(mode);
  r.time_us = t.time_us;
  r.algbw = static_cast<double>(r.bytes) / (r.time_us * 1e3);
}

// What rank 0 reports for one row, as one line of tab-separated fields in the file its parent reads.
inline auto line_fields(row& r) {
  return std::tie(r.bytes, r.count, r.type, r.op, r.algo, r.resolved, r.input, r.timing, r.time_us, r.max_err, r.tol_ok,
                  r.identical, r.blocks, r.error);
}
inline std::string encode(row r) {
  r.error = bench::json_escape(r.error);  // no tab or newline
  std::ostringstream os;
  os.precision(17);
  std::apply([&](const auto&... f) { ((os << f << '\t'), ...); }, line_fields(r));
  return os.str() + '\n';
}
inline void read_field(std::istream& is, std::string& f) { std::getline(is, f, '\t'); }
template <class X>
void read_field(std::istream& is, X& f) {
  std::string x;
  std::getline(is, x, '\t');
  std::istringstream(x) >> f;  // a value that does not parse ("nan") stays 0
}
inline bool decode(const std::string& line, row& r) {
  std::istringstream is(line);
  std::apply([&](auto&... f) { (read_field(is, f), ...); }, line_fields(r));
  return !is.fail();
}

// The procs table: no empty/copy baselines per row (the comparison is the emulated sweep).
inline void print_procs_header() {
  std::printf("%12s %11s %5s %3s %-15s %5s %3s %7s %11s %10s %10s %10s %s\n", "size(B)", "count", "type", "op",
              "algorithm", "input", "blk", "timing", "time(us)", "algbw", "busbw", "max_err", "ok");
}

inline void print_procs_row(const row& r) {
  if (!r.error.empty()) {
    std::printf("%12zu %11zu %5s %3s %-15s %5s ERROR: %s\n", r.bytes, r.count, r.type.c_str(), r.op.c_str(),
                r.algo.c_str(), r.input.c_str(), r.error.c_str());
    return;
  }
  std::printf("%12zu %11zu %5s %3s %-15s %5s %3d %7s %11.2f %10.2f %10.2f %10.3g %s\n", r.bytes, r.count,
              r.type.c_str(), r.op.c_str(), algo_text(r).c_str(), r.input.c_str(), r.blocks, r.timing.c_str(), r.time_us,
              r.algbw, r.busbw, r.max_err, verdict(r));
  std::fflush(stdout);
}

template <class T, int MaxR>
class rank_runner {
 public:
  rank_runner(const options& o, const std::string& type, rcclx::host::bootstrap& bs)
      : o_(o), type_(type), bs_(bs), comm_(bs, comm_options(o)) {
    const std::size_t bytes = std::max<std::size_t>(o.max_bytes, 16);
    for (T** b : {&in_, &out_, &reg_}) *b = static_cast<T*>(rcclx::host::shareable_malloc(bytes));
    comm_.register_buffer(reg_, bytes);
    stream_ = on_host ? rcclx::gpu::stream_t{} : rcclx::gpu::stream_create();
  }
  ~rank_runner() {
    try {
      comm_.unregister_buffer(reg_);
    } catch (...) {
    }
    for (T* b : {in_, out_, reg_}) rcclx::host::shareable_free(b);
    rcclx::gpu::stream_destroy(stream_);
  }

  // Runs every row; rank 0 appends them to `rows`. Stops at the first failed row (after a timeout
  // the communicator is unusable).
  void run(std::vector<row>& rows) {
    for (std::size_t bytes = o_.min_bytes; bytes <= o_.max_bytes; bytes *= 2) {
      const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(T));
      for (const algorithm a : o_.algos)
        if (!run_row(count, a, false, rows)) return;
      if (o_.registered || (o_.registered_flat_max && count * sizeof(T) <= o_.registered_flat_max)) {
        const std::vector<algorithm> reg_algos = o_.registered ? o_.algos : std::vector<algorithm>{algorithm::flat};
        for (const algorithm a : reg_algos)  // LPC always stages through the workspace: no "reg" row
          if (a != algorithm::low_precision && !run_row(count, a, true, rows)) return;
      }
      if (bytes > o_.max_bytes / 2) break;
    }
  }

 private:
  static rcclx::host::communicator_options comm_options(const options& o) {
    rcclx::host::communicator_options c;
    c.buffer_bytes = std::max<std::size_t>(o.max_bytes, 256);  // no chunking: one call per row
    if (o.procs_blocks > 0) c.collective_blocks = o.procs_blocks;  // --procs-blocks (else the communicator's default)
    c.max_blocks = std::max(c.max_blocks, std::max(c.collective_blocks, o.procs_blocks));
    c.timeout_ns = 60ull * 1000 * 1000 * 1000;  // time-sliced processes on one GPU are slow
    c.check_calls = false;
    c.zero_copy_capture = false;  // graph timing captures K calls; workspace and registered paths need no patching
    return c;
  }

  bool run_row(std::size_t count, algorithm a, bool registered, std::vector<row>& rows) {
    const int n = comm_.num_ranks(), rank = comm_.rank();
    row r{count * sizeof(T), count, type_, rcclx::to_string(o_.op), rcclx::to_string(a), registered ? "reg" : "copy"};
    const bool low = a == algorithm::low_precision;  // LPC (rcclx::lpc::allreduce through the communicator)
    const algorithm resolved = low ? a : rcclx::dda::resolve_algorithm<T>(a, count, n);
    r.resolved = rcclx::to_string(resolved);
    // The communicator's shape (RCCLX_COLLECTIVE_BLOCKS / RCCLX_FLAT_THREADS applied), else the library's.
    const int shaped = comm_.template launch_shape<T>(count, resolved).blocks;
    r.blocks = shaped > 0 ? shaped
               : low  ? lpc::num_blocks_for<cfg>(lpc::collective::allreduce, count, n)
                      : rcclx::dda::num_blocks_for<T>(count, resolved, n);
    // Registered rows are zero-copy: flat reads the input out of place, tree reduces in place.
    T* x = registered ? reg_ : in_;
    T* y = registered && resolved == algorithm::tree ? reg_ : out_;
    try {
      rt::copy_rank_inputs(x, count, rank);
      rcclx::gpu::memset_zero(y == x ? out_ : y, count * sizeof(T));
      rcclx::gpu::device_synchronize();  // the memset is on the legacy stream, the call on stream_
      const rt::timing_mode mode = on_host ? rt::timing_mode::wall
                                           : ((o_.graph_all || r.bytes <= o_.graph_max_bytes) ? rt::timing_mode::graph
                                                                                             : rt::timing_mode::events);
      const rt::rank_timing t = rt::time_on_ranks(
          [&](std::uint64_t v) { return bs_.allgather_value(v); }, mode, o_.timing, stream_,
          [&](rcclx::gpu::stream_t s) { comm_.allreduce(x, y, count, o_.op, a, s); }, [&] { comm_.synchronize(stream_); },
          y, count, [&](const std::vector<T>& out) {
            if (rank == 0)
              check_output(lpc::collective::allreduce, out.data(), count, n, r,
                           low ? rt::lpc_error_bound<T>(lpc::collective::allreduce, n) : 0.0, o_.op);
            return true;
          });
      timed(r, mode, t);
      r.busbw = r.algbw * 2.0 * (n - 1) / n;
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    if (rank == 0) {
      rows.push_back(r);
      // The table comes at the end of the sweep; this line per row survives a sweep cut short.
      std::fprintf(stderr, "# progress: %s %zu B %s %s: %.2f us%s%s\n", r.type.c_str(), r.bytes, r.algo.c_str(),
                   r.input.c_str(), r.time_us, r.error.empty() ? "" : " error: ", r.error.c_str());
      std::fflush(stderr);
    }
    return r.error.empty();
  }

  const options& o_;
  std::string type_;
  rcclx::host::bootstrap& bs_;
  rcclx::host::communicator<MaxR> comm_;
  T* in_ = nullptr;
  T* out_ = nullptr;
  T* reg_ = nullptr;
  rcclx::gpu::stream_t stream_{};
};

// One rank's whole sweep; rank 0's rows come back.
inline std::vector<row> run_rank(const options& o, const rcclx::host::launch_config& cfg) {
  rcclx::host::use_device(cfg);
  if (!on_host && cfg.rank == 0) {
    const int gpus = rcclx::gpu::device_count();
    std::printf("# %d GPU(s) visible; rank r runs on GPU (RCCLX_DEVICE or r) mod %d%s\n", gpus, gpus,
                gpus < cfg.num_ranks ? ": several ranks share a GPU, time-sliced (see the NOTE above)" : "");
    std::fflush(stdout);
  }
  rcclx::host::socket_bootstrap bs(cfg);
  std::vector<row> rows;
  for (const auto& t : o.types)
    with_type(t, [&](auto tag) {
      using T = decltype(tag);
      if (cfg.num_ranks <= 8) rank_runner<T, 8>(o, t, bs).run(rows);
      else rank_runner<T, 16>(o, t, bs).run(rows);
    });
  return rows;
}

inline void print_banner(const options& o, int n, const char* how) {
  std::printf("# rcclx-bench --procs: DDA AllReduce through rcclx::host::communicator, %d processes (%s), backend %s\n"
              "# command: %s\n"
              "# each process: one rank, socket rendezvous, %s; launch: the communicator's shape (communicator_options::\n"
              "#   collective_blocks and flat_threads, or --procs-blocks / RCCLX_COLLECTIVE_BLOCKS / RCCLX_FLAT_THREADS; blk column)\n"
              "# time: slowest rank's median (%s); call checks off while timing\n",
              n, how, bench::backend_label(),
              o.command.c_str(), on_host ? "POSIX shared memory" : "real IPC handles",
              on_host ? "wall clock" : "graph replays of K calls up to --graph-max-bytes, then events");
  if (!on_host)
    std::printf("# NOTE: processes sharing a GPU run their kernels time-sliced, not concurrently; a cross-process\n"
                "#       barrier completes only as the contexts take turns. With one GPU per rank, rows measure links.\n");
}

// --procs-child: this process is one rank of a job started by a launcher (torchrun variables).
inline int run_child(const options& o) {
  const auto cfg = rcclx::host::launch_config::from_env();
  try {
    if (cfg.rank == 0) {
      print_banner(o, cfg.num_ranks, "started by a launcher");
      print_procs_header();
    }
    const auto rows = run_rank(o, cfg);
    for (const auto& r : rows) print_procs_row(r);
    if (cfg.rank == 0 && !o.csv.empty()) write_csv(o.csv, rows);
    return std::all_of(rows.begin(), rows.end(), correct<row>) ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("rcclx-bench rank %d: %s\n", cfg.rank, e.what());
    return 1;
  }
}

// --procs N: forks N ranks (before any GPU call), collects rank 0's rows, then runs the emulated
// sweep at the same sizes in this process and prints both side by side.
inline int run_parent(const options& o, bool compare) {
  const int n = o.procs;
  print_banner(o, n, "forked by rcclx-bench");
  std::fflush(stdout);
  // Rank 0's rows come back in a file (a pipe could fill up while the parent waits for the ranks).
  char path[] = "/tmp/rcclx-bench-rows-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) {
    std::printf("rcclx-bench: cannot create a file for rank 0's rows\n");
    return 1;
  }
  ::close(fd);
  const int failed = rcclx::host::run_ranks(n, [&](const rcclx::host::launch_config& cfg) {
    std::string text;
    for (const auto& r : run_rank(o, cfg)) text += encode(r);
    if (cfg.rank == 0) std::ofstream(path) << text;
    return 0;
  });
  std::ifstream text(path);
  std::vector<row> procs_rows;
  for (std::string line; std::getline(text, line);) {
    row r;
    if (!decode(line, r)) continue;
    if (r.time_us > 0) r.algbw = static_cast<double>(r.bytes) / (r.time_us * 1e3);
    r.busbw = r.algbw * 2.0 * (n - 1) / n;
    procs_rows.push_back(r);
  }
  std::remove(path);
  std::printf("# %d processes (rank 0's rows; correctness checked on every rank):\n", n);
  print_procs_header();
  for (const auto& r : procs_rows) print_procs_row(r);
  bool ok = failed == 0 && std::all_of(procs_rows.begin(), procs_rows.end(), correct<row>);
  if (failed) std::printf("# a rank process failed\n");

  std::vector<row> em_rows;
  if (compare && !on_host && rcclx::gpu::device_count() == 0) {
    std::printf("# no GPU: emulated comparison skipped\n");
  } else if (compare) {
    // The same sweep on N emulated ranks in this process (the GPU is first touched here, after the
    // children have exited). LPC rows have their emulated counterpart in the --collectives table.
    options e = o;
    e.num_ranks = n;
    e.algos.erase(std::remove(e.algos.begin(), e.algos.end(), algorithm::low_precision), e.algos.end());
    std::printf("# the same sizes on %d emulated ranks in one process (%d threads per block, <= %d blocks per rank):\n", n,
                e.threads, e.max_blocks);
    print_header();
    try {
      for (const auto& t : e.types) with_type(t, [&](auto tag) { run_type<decltype(tag)>(e, t, em_rows); });
    } catch (const std::exception& ex) {
      std::printf("rcclx-bench (emulated): %s\n", ex.what());
      ok = false;
    }
  }
  // A procs row's emulated counterpart: the same type, size and algorithm ("reg" input: "sym").
  const auto em_for = [&](const row& r) -> const row* {
    for (const row& e : em_rows)
      if (e.type == r.type && e.bytes == r.bytes && e.algo == r.algo && (e.input == r.input || (r.input == "reg" && e.input == "sym")))
        return &e;
    return nullptr;
  };
  if (compare && !em_rows.empty()) {
    std::printf("# side by side: time per call (us) and busbw (GB/s), %d processes vs %d emulated ranks\n", n, n);
    std::printf("%12s %5s %-15s %5s %12s %12s %9s %10s %10s\n", "size(B)", "type", "algorithm", "input", "procs_us",
                "emulated_us", "procs/em", "procs_bus", "em_bus");
    for (const auto& r : procs_rows)
      if (const row* e = r.error.empty() ? em_for(r) : nullptr)
        std::printf("%12zu %5s %-15s %5s %12.2f %12.2f %9.2f %10.2f %10.2f\n", r.bytes, r.type.c_str(), r.algo.c_str(),
                    r.input.c_str(), r.time_us, e->time_us, r.time_us / e->time_us, r.busbw, e->busbw);
  }
  if (!o.json.empty()) {
    std::ofstream f = bench::open_output(o.json);
    f << "{\n";
    bench::write_json_members(f, {{"tool", "rcclx-bench"}, {"mode", "procs"}, {"command", o.command}, {"num_ranks", n},
                                  {"backend", bench::backend_label()}});
    f << "  \"rows\": [\n";
    bench::write_json_rows(f, procs_rows, [&](const row& r) {
      const row* e = em_for(r);
      return bench::fields{{"size_bytes", r.bytes}, {"type", r.type}, {"op", r.op}, {"algorithm", r.algo},
                           {"resolved", r.resolved}, {"input", r.input}, {"timing", r.timing}, {"procs_us", r.time_us},
                           {"procs_busbw_GBps", r.busbw}, {"emulated_us", e ? e->time_us : NAN},
                           {"emulated_busbw_GBps", e ? e->busbw : NAN}, {"max_abs_error", r.max_err},
                           {"ok", correct(r)}, {"error", r.error}};
    });
    f << "  ]\n}\n";
    std::printf("# json: %s\n", o.json.c_str());
  }
  if (!o.csv.empty()) write_csv(o.csv, procs_rows);
  std::printf("# correctness: %s\n", ok ? "every row within tolerance, all ranks bit-identical" : "FAILED (see above)");
  return ok ? 0 : 1;
}

}  // namespace procs
}  // namespace
