// bench/rcclx_bench/hierarchical.hpp: rcclx-bench --hierarchical, the multi-node AllReduce
// (rcclx::multinode::hierarchical) against the engine's own AllReduce over every rank, in one run;
// the rows, their checks and the topology options: docs/multinode.md "The benchmark". Included by
// main.cpp after procs.hpp. Built where an engine is: the host backend with MPI (RCCLX_BENCH_MPI:
// mpi_engine), the CUDA backend with NCCL (RCCLX_BENCH_NCCL: nccl_engine, no MPI needed).
//
//   mpirun -np 4 rcclx-bench --hierarchical --local 2 --max-bytes 64K      # host: 2 simulated nodes x 2
//   rcclx-bench --hierarchical --procs 8 --type bf16                       # CUDA: forks 8 ranks, one node (G = 1)
//   torchrun --nnodes 2 --nproc-per-node 8 ... rcclx-bench --hierarchical --id-dir /shared/dir   # CUDA, 2 nodes
//
// Node g of G, local rank l of L, global rank g * L + l. Intra-node: a host::communicator over the
// node's socket bootstrap (none when L = 1). Inter-node: the engine on the G processes of this local
// rank (MPI_Comm_split; NCCL: a communicator whose unique id node 0 writes to a file in --id-dir,
// for G > 1 only). The baseline: the engine's AllReduce over all G * L ranks (NCCL: only when every
// rank has a GPU of its own). Each row runs once and is checked (rank 0 against the reference,
// every rank's output bits compared), then timed on every rank alike (testing/rank_timing.hpp).
#pragma once

#if RCCLX_BENCH_MPI
#  include <mpi.h>

#  include <rcclx/multinode/mpi_engine.hpp>
#endif
#if RCCLX_BENCH_NCCL
#  include <nccl.h>

#  include <rcclx/multinode/nccl_engine.hpp>
#endif

#include <rcclx/host/communicator.hpp>
#include <rcclx/host/fork_ranks.hpp>
#include <rcclx/host/socket_bootstrap.hpp>
#include <rcclx/multinode/hierarchical.hpp>
#include <rcclx/testing/hierarchical_reference.hpp>
#include <rcclx/testing/node_job.hpp>

#include <unistd.h>

#include <chrono>
#include <deque>
#include <functional>
#include <memory>

namespace {  // the same translation unit as main.cpp
namespace hier {

namespace mn = rcclx::multinode;
constexpr int max_local = 16;
using hier_t = mn::hierarchical<max_local>;

using job = rt::node_job<max_local>;

// ---- rows ---------------------------------------------------------------------------------------

struct hrow {
  std::size_t bytes = 0, count = 0;
  std::string type, path, hop, reg, timing{};
  double time_us = 0, algbw = 0, busbw = 0, vs_engine = 0, max_err = 0;
  std::uint64_t new_reg = 0;
  bool tol_ok = true, identical = true;
  std::string error{};
};

inline void print_hier_header() {
  std::printf("%12s %10s %5s %-13s %-13s %5s %6s %11s %9s %9s %9s %7s %10s %s\n", "size(B)", "count", "type", "path", "hop",
              "reg", "timing", "time(us)", "algbw", "busbw", "x_engine", "new_reg", "max_err", "ok");
}

inline void print_hier_row(const hrow& r) {
  if (!r.error.empty()) {
    std::printf("%12zu %10zu %5s %-13s %-13s %5s ERROR: %s\n", r.bytes, r.count, r.type.c_str(), r.path.c_str(),
                r.hop.c_str(), r.reg.c_str(), r.error.c_str());
  } else {
    char vs[16] = "        -";
    if (r.vs_engine > 0) std::snprintf(vs, sizeof(vs), "%9.2f", r.vs_engine);
    std::printf("%12zu %10zu %5s %-13s %-13s %5s %6s %11.2f %9.2f %9.2f %s %7llu %10.3g %s\n", r.bytes, r.count,
                r.type.c_str(), r.path.c_str(), r.hop.c_str(), r.reg.c_str(), r.timing.c_str(), r.time_us, r.algbw, r.busbw,
                vs, static_cast<unsigned long long>(r.new_reg), r.max_err, verdict(r));
  }
  std::fflush(stdout);
}

// ---- one element type ---------------------------------------------------------------------------

template <class T>
class runner {
 public:
  runner(const options& o, const std::string& type, job& j, std::deque<hrow>& rows) : o_(o), type_(type), j_(j), rows_(rows) {
    const std::size_t bytes = std::max<std::size_t>(o.max_bytes, 16);
    for (auto** b : {&in_, &out_, &in_u_, &out_u_}) *b = static_cast<T*>(rcclx::gpu::device_malloc(bytes));
    stream_ = on_host ? rcclx::gpu::stream_t{} : rcclx::gpu::stream_create();
    mn::hierarchical_options h;
    h.chunk_bytes = chunk_bytes(o);
    h.check_calls = false;  // the table measures the collective
    h.register_buffers = true;
    reg_ = j.comm ? std::make_unique<hier_t>(*j.comm, *j.across, j.topo, h) : std::make_unique<hier_t>(*j.across, j.topo, h);
    h.register_buffers = false;
    unreg_ = j.comm ? std::make_unique<hier_t>(*j.comm, *j.across, j.topo, h) : std::make_unique<hier_t>(*j.across, j.topo, h);
  }
  ~runner() {
    reg_.reset();
    unreg_.reset();
    for (T* b : {in_, out_, in_u_, out_u_}) {
      if (j_.across) j_.across->forget_buffer(b);  // registered by calls with one rank per node
      if (j_.everyone) j_.everyone->forget_buffer(b);
      rcclx::gpu::device_free(b);
    }
    rcclx::gpu::stream_destroy(stream_);
  }

  static std::size_t chunk_bytes(const options& o) { return std::max<std::size_t>(o.hier_buffer, 4096); }

  void run() {
    const bool lp = rcclx::lpc::is_element_v<T>;
    const bool unreg_rows = j_.across->registers_buffers();
    for (std::size_t bytes = o_.min_bytes; bytes <= o_.max_bytes; bytes *= 2) {
      const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(T));
      rt::copy_rank_inputs(in_, count, j_.topo.rank());
      rt::copy_rank_inputs(in_u_, count, j_.topo.rank());
      double engine_us = 0;
      std::vector<hrow*> mine;
      // The engine's own AllReduce over every rank first (the rows' x_engine is its time / theirs).
      if (j_.everyone) {
        const bool regs = j_.everyone->registers_buffers();
        mine.push_back(engine_row(count, regs));
        if (regs) mine.push_back(engine_row(count, false));
        if (mine.front()->error.empty()) engine_us = mine.front()->time_us;
      }
      if (j_.topo.num_nodes == 1 && j_.comm) mine.push_back(node_row(count));
      for (auto hop : {mn::inter_node::exact, mn::inter_node::engine_reduce, mn::inter_node::low_precision}) {
        if (hop == mn::inter_node::low_precision && !lp) continue;
        mine.push_back(hier_row(count, hop, true));
        if (unreg_rows) mine.push_back(hier_row(count, hop, false));
      }
      for (hrow* r : mine) {
        if (engine_us > 0 && r->error.empty() && r->time_us > 0) r->vs_engine = engine_us / r->time_us;
        if (j_.topo.rank() == 0) print_hier_row(*r);
      }
      if (bytes > o_.max_bytes / 2) break;
    }
  }

 private:
  hrow* start_row(std::size_t count, const char* path, const char* hop, const char* reg) {
    rows_.push_back({count * sizeof(T), count, type_, path, hop, reg});
    return &rows_.back();
  }

  // Runs `call` once and checks it, then times it (testing/rank_timing.hpp); errors become the row's.
  template <class Call>
  void measure(hrow& r, std::size_t count, T* out, mn::inter_node check, std::size_t chunk, Call&& call) {
    const auto opens = [&] { return j_.across->registrations().opens + (j_.everyone ? j_.everyone->registrations().opens : 0); };
    std::uint64_t before = 0;
    try {
      rcclx::gpu::memset_zero(out, count * sizeof(T));
      rcclx::gpu::device_synchronize();
      const rt::timing_mode mode = on_host ? rt::timing_mode::wall : rt::timing_mode::events;
      const rt::rank_timing t = rt::time_on_ranks(
          [&](std::uint64_t v) { return j_.gather(v); }, mode, o_.timing, stream_, call,
          [&] {
            rcclx::gpu::stream_synchronize(stream_);
            if (j_.comm) j_.comm->check_errors();
          },
          out, count, [&](const std::vector<T>& h) {
            if (j_.topo.rank() == 0) {  // rank 0 against the documented result of `check`'s hop
              const rt::error_summary e = rt::check_hierarchical_allreduce(h.data(), count, j_.topo, check, chunk, input_of<T>);
              r.max_err = e.max_error;
              r.tol_ok = e.within;
            }
            before = opens();  // after the first call: what the timed calls register
            return true;
          });
      procs::timed(r, mode, t);
      r.new_reg = opens() - before;
      const int n = j_.topo.num_ranks();
      r.busbw = n > 1 ? r.algbw * 2.0 * (n - 1) / n : r.algbw;
    } catch (const std::exception& e) {
      r.error = e.what();
    }
  }

  hrow* hier_row(std::size_t count, mn::inter_node hop, bool registered) {
    const bool regs = j_.across->registers_buffers();
    hrow* r = start_row(count, "hierarchical", mn::to_string(hop), !regs ? "-" : (registered ? "reg" : "unreg"));
    hier_t& h = registered ? *reg_ : *unreg_;
    const T* x = registered ? in_ : in_u_;
    T* y = registered ? out_ : out_u_;
    const std::size_t l = static_cast<std::size_t>(j_.topo.local_ranks);
    // The call's chunks (hierarchical's cut): L > 1, whole rows within the communicator's workspace.
    const std::size_t chunk = j_.comm ? std::max<std::size_t>(j_.comm->options().buffer_bytes / sizeof(T) / l, 1) * l
                                      : std::max<std::size_t>(chunk_bytes(o_) / sizeof(T) / 16 * 16, 16);
    measure(*r, count, y, hop, chunk, [&](rcclx::gpu::stream_t s) { h.allreduce(x, y, count, hop, s); });
    return r;
  }

  hrow* engine_row(std::size_t count, bool registered) {
    mn::engine& e = *j_.everyone;
    hrow* r = start_row(count, "engine", e.name(), !e.registers_buffers() ? "-" : (registered ? "reg" : "unreg"));
    const T* x = registered ? in_ : in_u_;
    T* y = registered ? out_ : out_u_;
    std::vector<mn::registration> pins;
    if (registered) {
      pins.push_back(e.register_buffer(const_cast<T*>(x), count * sizeof(T)));
      pins.push_back(e.register_buffer(y, count * sizeof(T)));
    }
    measure(*r, count, y, mn::inter_node::engine_reduce, count,  // the engine's order: engine_reduce's bound
            [&](rcclx::gpu::stream_t s) { e.allreduce(x, y, count, mn::data_type_of<T>::value, s); });
    return r;
  }

  hrow* node_row(std::size_t count) {  // G = 1: the node's rcclx AllReduce, the whole job
    hrow* r = start_row(count, "rcclx_node", "-", "-");
    measure(*r, count, out_, mn::inter_node::exact, std::max<std::size_t>(count, 1) * 2,
            [&](rcclx::gpu::stream_t s) { j_.comm->allreduce(in_, out_, count, rcclx::reduce_op::sum, rcclx::algorithm::automatic, s); });
    return r;
  }

  const options& o_;
  std::string type_;
  job& j_;
  std::deque<hrow>& rows_;  // (a deque: rows keep their address while more are added)
  T* in_ = nullptr;
  T* out_ = nullptr;
  T* in_u_ = nullptr;  // the unregistered rows' buffers: never registered with any engine
  T* out_u_ = nullptr;
  rcclx::gpu::stream_t stream_{};
  std::unique_ptr<hier_t> reg_, unreg_;
};

// ---- set-up -------------------------------------------------------------------------------------

inline rcclx::host::communicator_options comm_options(const options& o) {
  rcclx::host::communicator_options c;
  c.buffer_bytes = std::max<std::size_t>(o.hier_buffer, 4096);
  c.check_calls = false;  // the table measures the collective
  c.timeout_ns = 120ull * 1000 * 1000 * 1000;  // processes sharing one GPU are time-sliced
  c.zero_copy_capture = false;
  return c;
}

inline void print_banner(const options& o, const job& j, const char* engine) {
  std::printf("# rcclx-bench --hierarchical: AllReduce over %d node(s) x %d rank(s) (backend %s, engine %s)\n"
              "# command: %s\n"
              "# rows: hierarchical = rcclx intra-node ReduceScatter -> inter-node hop (engine) -> intra-node AllGather;\n"
              "#   hop exact (engine AllGather, fp32 node-order sum), engine_reduce (engine AllReduce of the shard),\n"
              "#   low_precision (FP8 e4m3 + fp32 scale per 32 through the engine's AllGather); reg: buffers registered\n"
              "#   with the engine (hierarchical_options::register_buffers), unreg: not, '-': the engine registers nothing;\n"
              "#   engine = the engine's own AllReduce over all %d ranks%s\n"
              "# workspace / chunk: %zu bytes (--hier-buffer); time: slowest rank's median (%s); call checks off while timing\n"
              "# algbw = S / time, busbw = algbw * 2(N-1)/N (N = %d); x_engine = engine time / row time (> 1: faster than\n"
              "#   the engine); new_reg = registrations made during the timed calls; ok: rank 0 against the reference\n"
              "#   (exact: the documented order, bit for bit; engine_reduce / engine: float64 tolerance; low_precision:\n"
              "#   the documented FP8 bound), every rank's output the same bits\n",
              j.topo.num_nodes, j.topo.local_ranks, on_host ? "host" : "cuda", engine, o.command.c_str(), j.topo.num_ranks(),
              j.topo.num_nodes == 1 && j.topo.local_ranks > 1 ? "; rcclx_node = the node's rcclx AllReduce (G = 1: the whole job)" : "",
              runner<float>::chunk_bytes(o), on_host ? "wall clock around one call" : "GPU events around one call",
              j.topo.num_ranks());
  if (!j.everyone) std::printf("# engine AllReduce over all ranks: skipped: %s\n", j.everyone_missing.c_str());
  std::fflush(stdout);
}

// Runs every type on a set-up job; returns whether every row is correct (on every rank).
inline bool run_job(const options& o, job& j, const char* engine) {
  if (j.topo.rank() == 0) {
    print_banner(o, j, engine);
    print_hier_header();
  }
  std::deque<hrow> rows;
  for (const auto& t : o.types) with_type(t, [&](auto tag) { runner<decltype(tag)>(o, t, j, rows).run(); });
  if (j.topo.rank() == 0) {  // what the engines registered (rank 0): made, reused, deregistered
    const auto say = [](const char* who, const mn::engine& e) {
      const auto s = e.registrations();
      std::printf("# registrations with the %s engine (rank 0): %llu made, %llu hits, %llu deregistered%s\n", who,
                  static_cast<unsigned long long>(s.opens), static_cast<unsigned long long>(s.hits),
                  static_cast<unsigned long long>(s.closes), e.registers_buffers() ? "" : " (it registers nothing)");
    };
    say("inter-node", *j.across);
    if (j.everyone) say("world", *j.everyone);
  }
  std::uint64_t bad = 0;
  for (auto x : j.gather(std::all_of(rows.begin(), rows.end(), correct<hrow>) ? 0 : 1)) bad += x;
  if (j.topo.rank() == 0)
    std::printf("# correctness: %s\n", bad == 0 ? "every row within its bound, all ranks bit-identical" : "FAILED rows above");
  return bad == 0;
}

#if RCCLX_BENCH_MPI
// mpirun: topology from --local / --nodes, torchrun's variables, or the ranks sharing a machine.
inline int run_mpi(const options& o, int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int code = 0;
  MPI_Comm across = MPI_COMM_NULL;
  try {
    mn::node_topology t;
    if (o.hier_local > 0 || o.hier_nodes > 0) {
      const int l = o.hier_local > 0 ? o.hier_local : world / o.hier_nodes;
      if (l < 1 || world % l != 0 || (o.hier_nodes > 0 && world != o.hier_nodes * l))
        throw rcclx::error(rcclx::errc::invalid_argument, "--nodes / --local do not divide the " + std::to_string(world) + " ranks");
      t = {rank / l, world / l, rank % l, l};
    } else if (std::getenv("GROUP_RANK") && std::getenv("LOCAL_WORLD_SIZE")) {
      t = mn::node_topology::from_env();
    } else {
      MPI_Comm shared;
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared);
      int l = 1, local = 0;
      MPI_Comm_size(shared, &l);
      MPI_Comm_rank(shared, &local);
      MPI_Comm_free(&shared);
      t = {rank / l, world / l, local, l};
    }
    if (t.rank() != rank || t.num_ranks() != world)
      throw rcclx::error(rcclx::errc::invalid_argument,
                         "rank " + std::to_string(rank) + " is node " + std::to_string(t.node) + ", local rank " +
                             std::to_string(t.local_rank) + " of " + std::to_string(t.local_ranks) +
                             ": the ranks must be placed by node (global rank = node * L + local rank; mpirun --map-by slot)");
    t.validate("rcclx-bench --hierarchical");
    int job_id = static_cast<int>(::getpid());
    MPI_Bcast(&job_id, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Comm_split(MPI_COMM_WORLD, t.local_rank, t.node, &across);
    job j(t, "rcclx-bench-hier-" + std::to_string(job_id), comm_options(o));
    j.across = std::make_unique<mn::mpi_engine>(across);
    j.everyone = std::make_unique<mn::mpi_engine>(MPI_COMM_WORLD);
    code = run_job(o, j, "mpi (Open MPI: host memory; MPI_Allreduce on MPI_COMM_WORLD as the baseline)") ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("rcclx-bench --hierarchical rank %d: %s\n", rank, e.what());
    std::fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (across != MPI_COMM_NULL) MPI_Comm_free(&across);
  MPI_Finalize();
  return code;
}
#endif

#if RCCLX_BENCH_NCCL
inline void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw rcclx::error(rcclx::errc::runtime, std::string(what) + " failed: " + ncclGetErrorString(r));
}

// An NCCL unique id from its writer to the other members through a file in --id-dir.
inline ncclUniqueId shared_id(const std::string& path, bool writer) {
  return rt::share_through_file(path, writer, [] {
    ncclUniqueId id{};
    nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    return id;
  });
}

// One process of the job: GPU, node communicator, NCCL communicators, the sweep.
inline int run_nccl_rank(const options& o, const mn::node_topology& t, const std::string& job_id) {
  const int rank = t.rank();
  try {
    ::setenv("NCCL_NVLS_ENABLE", "0", 1);  // no NVLink multicast (as rcclx-bench-nccl)
    const int gpus = rcclx::gpu::device_count();
    if (gpus == 0) throw rcclx::error(rcclx::errc::unsupported, "no GPU is present");
    rcclx::gpu::set_device(rank % gpus);
    job j(t, job_id, comm_options(o));
    std::string key = job_id;
    for (char& c : key)
      if (c == '/' || c == ':') c = '_';
    const std::string dir = o.id_dir.empty() ? "/tmp" : o.id_dir;
    // The engine across nodes: the G processes of this local rank (a size-1 communicator needs no exchange).
    ncclComm_t across = nullptr, world = nullptr;
    const std::string across_path = dir + "/" + key + ".nccl-local" + std::to_string(t.local_rank);
    ncclUniqueId aid{};
    if (t.num_nodes == 1) nccl_check(ncclGetUniqueId(&aid), "ncclGetUniqueId");
    else aid = shared_id(across_path, t.node == 0);
    nccl_check(ncclCommInitRank(&across, t.num_nodes, aid, t.node), "ncclCommInitRank (across nodes)");
    j.cleanup.push_back([across] { (void)ncclCommDestroy(across); });
    j.across = std::make_unique<mn::nccl_engine>(across);
    // The baseline over every rank: NCCL takes one rank per GPU.
    if (t.local_ranks > gpus) {
      j.everyone_missing = "NCCL allows one rank per GPU, and the node's " + std::to_string(t.local_ranks) +
                           " ranks share " + std::to_string(gpus) + " GPU(s)";
    } else {
      if (t.num_ranks() == 1) {
        world = across;
      } else {
        const ncclUniqueId wid = shared_id(dir + "/" + key + ".nccl-world", rank == 0);
        nccl_check(ncclCommInitRank(&world, t.num_ranks(), wid, rank), "ncclCommInitRank (world)");
        j.cleanup.push_back([world] { (void)ncclCommDestroy(world); });
      }
      j.everyone = std::make_unique<mn::nccl_engine>(world);
    }
    j.barrier();  // every member has read the ids
    if (t.node == 0 && t.num_nodes > 1) std::remove(across_path.c_str());  // each file by its writer
    if (rank == 0 && j.everyone && t.num_ranks() > 1) std::remove((dir + "/" + key + ".nccl-world").c_str());
    int version = 0;
    ncclGetVersion(&version);
    const std::string engine = "nccl " + std::to_string(version) + ", " + std::to_string(gpus) + " GPU(s) visible, rank r on GPU r mod " +
                               std::to_string(gpus) + (gpus < t.local_ranks ? ": ranks share a GPU, time-sliced" : "");
    return run_job(o, j, engine.c_str()) ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("rcclx-bench --hierarchical rank %d: %s\n", rank, e.what());
    std::fflush(stdout);
    return 1;
  }
}

// --procs N [--nodes G]: N processes on this machine, G simulated nodes of N / G (forked before any
// GPU call); otherwise this process is one rank of a launcher's job (torchrun's variables).
inline int run_nccl(const options& o) {
  if (o.procs == 0) {
    const auto cfg = rcclx::host::launch_config::from_env();
    return run_nccl_rank(o, mn::node_topology::from_env(), cfg.unique_id);
  }
  const int n = o.procs, g = o.hier_nodes > 0 ? o.hier_nodes : 1;
  if (n % g != 0 || n / g > max_local) {
    std::printf("rcclx-bench --hierarchical: --procs %d is not --nodes %d nodes of at most %d ranks\n", n, g, max_local);
    return 2;
  }
  const int l = n / g;
  const int rc = rcclx::host::run_ranks(n, [&](const rcclx::host::launch_config& cfg) {
    return run_nccl_rank(o, mn::node_topology{cfg.rank / l, g, cfg.rank % l, l}, cfg.unique_id);
  });
  if (rc != 0) std::printf("# a rank process failed\n");
  return rc;
}
#endif

// Dispatched by main() before any GPU call.
inline int run(const options& o, int argc, char** argv) {
  (void)argc;
  (void)argv;
#if RCCLX_BENCH_MPI
  return run_mpi(o, argc, argv);
#elif RCCLX_BENCH_NCCL
  return run_nccl(o);
#else
  (void)o;
  std::printf("rcclx-bench --hierarchical: this build has no engine (the host backend needs MPI, the CUDA backend "
              "NCCL, found at configure time)\n");
  return 2;
#endif
}

}  // namespace hier
}  // namespace
