// rcclx/testing/emulated_peers.hpp: N ranks in one process for users' unit tests: fill each rank's
// input, run a collective (or your own kernel) on all ranks at once, read each rank's output.
//
//   rcclx::testing::emulated_peers<float> peers(8, count);     // 8 ranks, count elements each
//   for (int r = 0; r < 8; ++r) std::fill(peers.input(r).begin(), peers.input(r).end(), float(r));
//   peers.allreduce(rcclx::algorithm::flat);                    // also tree, low_precision, automatic
//   peers.allreduce(rcclx::algorithm::tree, rcclx::reduce_op::max);
//   const std::vector<float>& out = peers.output(3);            // rank 3's result
//   peers.allgather(rcclx::algorithm::low_precision);           // output(r): 8 * count elements
//   peers.reduce_scatter(rcclx::algorithm::flat);               // output(r): count / 8 (count % 8 == 0)
//   peers.alltoall<rcclx::lpc::config<rcclx::fp8::e5m2>>(rcclx::algorithm::low_precision);
//
// Compiled for a GPU, all ranks run in ONE launch on the current device (every block resident, so
// ranks can wait on each other); compiled by a plain C++ compiler, each (rank, block) is a
// std::thread. The same test source works on both. Your own kernels (e.g. a GEMM epilogue fused
// with an AllReduce) run on the emulated ranks with run(): see docs/emulated_peers.md.
// Every call refuses pads that still hold an earlier error (reset them: world().reset()), uploads
// all inputs, overwrites all outputs with a poison pattern (so elements a kernel never writes are
// caught), runs, waits, turns recorded errors into rcclx::error (the root cause first), and
// downloads all outputs. T: float, rcclx::bf16, rcclx::fp16, int32_t (others throw
// errc::unsupported; algorithm::low_precision takes float and bf16 only); num_ranks in [2, MaxRanks].
// For AllGather, AlltoAll and ReduceScatter the plain algorithm is the one-shot direct access
// (flat, tree and automatic-below-the-threshold all run it); automatic picks low_precision only
// when enabled by the environment (lpc/select.hpp). The symmetric buffers are sized for every
// collective and every LPC config (block sizes 16..512) at this count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../dda/allreduce.hpp"
#include "../gpu/runtime.hpp"
#include "../kernel/checks.hpp"
#include "../kernel/layout.hpp"
#include "../lpc/select.hpp"
#include "../lpc/workspace.hpp"
#include "emulated_kernels.hpp"
#include "emulated_launch_config.hpp"
#include "emulated_world.hpp"
#include "launch.hpp"

RCCLX_NAMESPACE_BEGIN
namespace testing {

struct emulated_options {
  int blocks_per_rank = 0;     // 0: what dda::allreduce would launch for the size (capped so every block is resident)
  int threads = 0;             // threads per block; 0: emulated_launch_config().threads
  bool in_place = false;       // output buffer = input buffer
  bool input_in_symmetric_buffer = false;  // inputs live in the symmetric buffers (the kernel copies nothing)
  std::uint64_t timeout_ns = core::default_timeout_ns;  // bound of every barrier wait
  core::ll_layout ll = core::default_ll_layout();  // LL regions of the pads (barrier-free flat); {0, 0}: off
  unsigned char poison = 0x5A;  // byte written over every output before a call
  // For your own kernels (run()): each rank's symmetric buffer holds at least this many bytes (0:
  // what the collectives need at this count), and the signal pads have this many block slots (0:
  // enough for the collectives' grids; a tile AllReduce needs fused::pad_blocks_for(blocks, tiles)).
  std::size_t symmetric_bytes = 0;
  int pad_slots = 0;
  std::size_t output_count = 0;  // elements of output(r) after run() (0: count)
};

// The element types emulated_peers runs: float, bf16, fp16, int32 (the library reduces more; the
// emulated kernels and their shared instantiations are these four's).
template <class T>
inline constexpr bool emulated_type_v = std::is_same<T, float>::value || std::is_same<T, bf16>::value ||
                                        std::is_same<T, fp16>::value || std::is_same<T, std::int32_t>::value;

template <class T, int MaxRanks = max_ranks>
class emulated_peers {
 public:
  emulated_peers(int num_ranks, std::size_t count, emulated_options options = {})
      : num_ranks_(check_ranks(num_ranks)), count_(count), opt_(options),
        world_(num_ranks, world_bytes(check_ranks(num_ranks), count, options), world_slots(options),
               options.timeout_ns, options.ll) {
    if constexpr (!emulated_type_v<T>)
      throw error(errc::unsupported, "emulated_peers: the element type is not supported (float, rcclx::bf16, "
                                     "rcclx::fp16 or int32_t)");
    if (opt_.threads < 0 || opt_.blocks_per_rank < 0)
      throw error(errc::invalid_argument, "emulated_peers: threads and blocks_per_rank must be >= 0");
    if (opt_.threads == 0) opt_.threads = emulated_launch_config().threads;
    const std::size_t bytes = element_bytes(count);
    inputs_.assign(num_ranks, std::vector<T>(count));
    outputs_.assign(num_ranks, std::vector<T>(count));
    out_count_ = count;
    for (int r = 0; r < num_ranks; ++r) {
      if (opt_.input_in_symmetric_buffer) {
        dev_in_.push_back(static_cast<T*>(world_.buffer(r)));
      } else {
        owned_.push_back(gpu::device_malloc(bytes));
        dev_in_.push_back(static_cast<T*>(owned_.back()));
      }
      if (opt_.in_place) {
        dev_out_.push_back(dev_in_.back());
      } else {
        // Room for an AllGather's num_ranks * count elements, or run()'s output_count.
        const std::size_t gather = count * static_cast<std::size_t>(num_ranks);
        owned_.push_back(gpu::device_malloc(element_bytes(opt_.output_count > gather ? opt_.output_count : gather)));
        dev_out_.push_back(static_cast<T*>(owned_.back()));
      }
    }
  }
  emulated_peers(const emulated_peers&) = delete;
  emulated_peers& operator=(const emulated_peers&) = delete;
  ~emulated_peers() {
    for (void* p : owned_) gpu::device_free(p);
  }

  int num_ranks() const { return num_ranks_; }
  std::size_t count() const { return count_; }
  const emulated_options& options() const { return opt_; }

  // Rank r's input (count elements): fill before a call.
  std::vector<T>& input(int rank) { return inputs_.at(checked_rank(rank)); }
  const std::vector<T>& input(int rank) const { return inputs_.at(checked_rank(rank)); }
  // Rank r's output after the last call: count elements (AllReduce, AlltoAll), num_ranks * count
  // (AllGather) or count / num_ranks (ReduceScatter).
  const std::vector<T>& output(int rank) const { return outputs_.at(checked_rank(rank)); }

  // AllReduce of every rank's input into every rank's output. low_precision (or automatic when the
  // environment enables it, see lpc/select.hpp) runs lpc::fp8_allreduce with Config.
  template <class Config = lpc::default_config>
  void allreduce(algorithm algo = algorithm::automatic, reduce_op op = reduce_op::sum);

  // AllGather: output(r)[p * count + i] = input(p)[i] (low precision: after one FP8 round trip).
  // Not with in_place (the output is num_ranks times larger).
  template <class Config = lpc::default_config>
  void allgather(algorithm algo = algorithm::automatic);

  // ReduceScatter: output(r)[i] = op over p of input(p)[r * count / num_ranks + i]; count must be a
  // multiple of num_ranks. Not with in_place (the output is num_ranks times smaller).
  template <class Config = lpc::default_config>
  void reduce_scatter(algorithm algo = algorithm::automatic, reduce_op op = reduce_op::sum);

  // AlltoAll: block i of rank r (count / num_ranks elements) lands at block r of rank i; count must
  // be a multiple of num_ranks.
  template <class Config = lpc::default_config>
  void alltoall(algorithm algo = algorithm::automatic);

  // The same four with the algorithm fixed at compile time: only the kernels that algorithm can run
  // are compiled (flat or tree: no FP8 kernel; low_precision: no plain kernel; automatic: both, as
  // above). A test sweeping LPC configs, or the plain collectives' schedules, compiles a fraction.
  //   peers.allreduce<rcclx::algorithm::tree>(rcclx::reduce_op::max);
  //   peers.allgather<rcclx::algorithm::flat, rcclx::lpc::config<rcclx::lpc::default_format, 32,
  //                   rcclx::fp8::scale_kind::fp32, rcclx::mesh::linear>>();
  template <algorithm Algo, class Config = lpc::default_config>
  void allreduce(reduce_op op = reduce_op::sum) {
    allreduce_impl<Config, Algo>(Algo, op);
  }
  template <algorithm Algo, class Config = lpc::default_config>
  void allgather() {
    dispatch<lpc::collective::allgather, Config, Algo>("emulated_peers::allgather", Algo, reduce_op::sum);
  }
  template <algorithm Algo, class Config = lpc::default_config>
  void reduce_scatter(reduce_op op = reduce_op::sum) {
    dispatch<lpc::collective::reduce_scatter, Config, Algo>("emulated_peers::reduce_scatter", Algo, op);
  }
  template <algorithm Algo, class Config = lpc::default_config>
  void alltoall() {
    dispatch<lpc::collective::alltoall, Config, Algo>("emulated_peers::alltoall", Algo, reduce_op::sum);
  }

  // Runs f on every emulated rank: blocks_per_rank blocks of `threads` threads each (one thread per
  // block on the host backend). f is trivially copyable with
  //   template <class Group> RCCLX_HOST_DEVICE void operator()(const Group& g, launch_index ix) const;
  // and finds its buffers through device_tables(), device_input(r), device_output(r) (captured by
  // value before the call). Inputs are uploaded and outputs poisoned before, downloaded after.
  template <class F>
  void run(int blocks_per_rank, int threads, const F& f) {
    if (blocks_per_rank < 1 || blocks_per_rank > world_.max_blocks())
      throw error(errc::invalid_argument, "emulated_peers::run: blocks_per_rank = " + std::to_string(blocks_per_rank) +
                                              " is outside [1, " + std::to_string(world_.max_blocks()) +
                                              "] (the signal pads' max_blocks)");
    if (opt_.in_place && opt_.output_count > count_)
      throw error(errc::invalid_argument, "emulated_peers::run: output_count = " + std::to_string(opt_.output_count) +
                                              " exceeds count = " + std::to_string(count_) +
                                              " with in_place (the output is the input)");
    out_count_ = opt_.output_count ? opt_.output_count : count_;
    before_call("emulated_peers::run");
    launch_emulated(num_ranks_, blocks_per_rank, threads, f);
    after_call();
  }

  // ---- device-side view, for run() and for tests that launch by themselves ----------------------
  emulated_world<MaxRanks>& world() { return world_; }
  // Every rank's peer table in device memory, indexed by rank.
  const core::peer_table<T, MaxRanks>* device_tables() const { return world_.template device_tables<T>(); }
  core::peer_table<T, MaxRanks> table(int rank) const { return world_.template table<T>(checked_rank(rank)); }
  T* device_input(int rank) const { return dev_in_.at(checked_rank(rank)); }
  T* device_output(int rank) const { return dev_out_.at(checked_rank(rank)); }
  // Both as the arrays emulated kernels index by rank (in[r], out[r]).
  rank_buffers<T, MaxRanks> device_buffers() const {
    rank_buffers<T, MaxRanks> b{};
    for (int r = 0; r < num_ranks_; ++r) {
      b.in[r] = dev_in_[r];
      b.out[r] = dev_out_[r];
    }
    return b;
  }

  void upload_inputs() {
    for (int r = 0; r < num_ranks_; ++r) gpu::copy(dev_in_[r], inputs_[r].data(), count_ * sizeof(T));
  }
  void poison_outputs() {
    std::vector<unsigned char> p(out_count_ * sizeof(T), opt_.poison);
    for (int r = 0; r < num_ranks_; ++r) {
      if (opt_.in_place) continue;  // the output is the input: already overwritten by the upload
      gpu::copy(dev_out_[r], p.data(), p.size());
    }
  }
  void download_outputs() {
    for (int r = 0; r < num_ranks_; ++r) {
      outputs_[r].resize(out_count_);
      gpu::copy(outputs_[r].data(), dev_out_[r], out_count_ * sizeof(T));
    }
  }

  // What the last call ran (automatic resolved) and with how many blocks per rank.
  algorithm last_algorithm() const { return last_algorithm_; }
  int last_blocks_per_rank() const { return last_blocks_; }

  // Blocks per rank an emulated call of `algo` (flat or tree) uses for this size: the launcher's
  // choice, capped so that num_ranks x blocks are resident at once (GPU) and by the pads.
  template <class F>
  int emulated_blocks(algorithm algo) const {
    const dda::launch_config cfg{opt_.threads, emulated_launch_config().flat_max_blocks,
                                 emulated_launch_config().tree_max_blocks};
    return fit_blocks<F>(dda::num_blocks_for<T>(count_, algo, num_ranks_, cfg));
  }

 private:
  static int check_ranks(int n) {
    if (n < 2 || n > MaxRanks)
      throw error(errc::invalid_argument, "emulated_peers: num_ranks = " + std::to_string(n) + " is outside [2, " +
                                              std::to_string(MaxRanks) + "]");
    return n;
  }
  static std::size_t element_bytes(std::size_t count) {
    const std::size_t b = count * sizeof(T);
    return b < 16 ? 16 : b;
  }
  // Symmetric buffer: the input (plain collectives) or the FP8 slots of any LPC collective and config.
  static std::size_t buffer_bytes(int num_ranks, std::size_t count) {
    std::size_t b = element_bytes(count);
    if constexpr (lpc::is_element_v<T>) {
      for (const lpc::collective c : {lpc::collective::allreduce, lpc::collective::allgather,
                                      lpc::collective::reduce_scatter, lpc::collective::alltoall}) {
        const std::size_t w[] = {
            lpc::workspace_bytes<lpc::config<fp8::e4m3, 16>>(c, count, num_ranks),
            lpc::workspace_bytes<lpc::config<fp8::e4m3, 32>>(c, count, num_ranks),
            lpc::workspace_bytes<lpc::config<fp8::e4m3, 64>>(c, count, num_ranks),
            lpc::workspace_bytes<lpc::config<fp8::e4m3, 128>>(c, count, num_ranks),
            lpc::workspace_bytes<lpc::config<fp8::e4m3, 256>>(c, count, num_ranks),
            lpc::workspace_bytes<lpc::config<fp8::e4m3, 512>>(c, count, num_ranks)};
        for (const std::size_t x : w) b = x > b ? x : b;  // fp32 scales: the larger kind
      }
    }
    return b;
  }
  static std::size_t world_bytes(int num_ranks, std::size_t count, const emulated_options& o) {
    const std::size_t b = buffer_bytes(num_ranks, count);
    return o.symmetric_bytes > b ? o.symmetric_bytes : b;
  }
  static int world_slots(const emulated_options& o) {
    if (o.pad_slots < 0) throw error(errc::invalid_argument, "emulated_peers: pad_slots must be >= 0");
    return o.pad_slots > 0 ? o.pad_slots : max_world_blocks();
  }
  static int max_world_blocks() {
    const auto cfg = emulated_launch_config();
    return cfg.flat_max_blocks > cfg.tree_max_blocks ? cfg.flat_max_blocks : cfg.tree_max_blocks;
  }
  int checked_rank(int rank) const {
    if (rank < 0 || rank >= num_ranks_)
      throw error(errc::invalid_argument, "emulated_peers: rank = " + std::to_string(rank) + " is outside [0, " +
                                              std::to_string(num_ranks_) + ")");
    return rank;
  }

  // Every launch of these peers (run() and the collectives) refuses pads that still hold an error.
  void before_call(const char* who = "emulated_peers") {
    world_.check_clean(who);
    for (int r = 0; r < num_ranks_; ++r) {
      if (inputs_[r].size() != count_)
        throw error(errc::invalid_argument, "emulated_peers: input(" + std::to_string(r) + ") was resized to " +
                                                std::to_string(inputs_[r].size()) + " elements; it must keep " +
                                                std::to_string(count_));
    }
    upload_inputs();
    poison_outputs();
    gpu::device_synchronize();
  }
  void after_call() {
    gpu::device_synchronize();
    world_.throw_if_error();
    download_outputs();
  }

  template <class Op, algorithm Algo>
  void run_allreduce() {
    using kernel = emulated_allreduce<Op, Algo, T, MaxRanks>;
    const int nb = emulated_blocks<kernel>(Algo);
    last_blocks_ = nb;
    out_count_ = count_;
    before_call();
    if (count_ > 0) launch_emulated(num_ranks_, nb, opt_.threads, kernel{device_tables(), device_buffers(), count_});
    after_call();
  }

  void check_op_and_algorithm(const char* who, reduce_op op, algorithm algo) const {
    // The emulated kernels take sum, min and max (product, avg, premul_sum: dda/op_allreduce.hpp).
    if (!is_basic(op))
      throw error(is_valid(op) ? errc::unsupported : errc::invalid_argument,
                  std::string(who) + ": op = " + std::to_string(static_cast<int>(op)) +
                      " is not a reduce_op of the emulated kernels (sum, min, max)");
    if (!is_valid(algo))
      throw error(errc::invalid_argument, std::string(who) + ": algorithm = " +
                                              std::to_string(static_cast<int>(algo)) + " is not an rcclx::algorithm");
  }

  // AllReduce (defined below the class). Only: the one algorithm whose kernels are compiled, or
  // automatic for all of them (the algorithm then chosen at run time); the same for dispatch.
  template <class Config, algorithm Only>
  void allreduce_impl(algorithm algo, reduce_op op);

  // AllGather, ReduceScatter, AlltoAll: checks, then the plain (flat) or the LPC functor.
  template <lpc::collective Coll, class Config, algorithm Only = algorithm::automatic>
  void dispatch(const char* who, algorithm algo, reduce_op op) {
    check_op_and_algorithm(who, op, algo);
    if (Coll != lpc::collective::allgather && count_ % static_cast<std::size_t>(num_ranks_) != 0)
      throw error(errc::invalid_argument, std::string(who) + ": count = " + std::to_string(count_) +
                                              " is not a multiple of num_ranks = " + std::to_string(num_ranks_) +
                                              " (the input is split into num_ranks equal blocks)");
    if (Coll != lpc::collective::alltoall && opt_.in_place)
      throw error(errc::invalid_argument, std::string(who) + ": in_place is not possible (the output is not the "
                                                             "input's size)");
    const algorithm a = lpc::resolve_algorithm<T>(Coll, algo, count_, num_ranks_);
    const std::size_t out = Coll == lpc::collective::allgather ? count_ * static_cast<std::size_t>(num_ranks_)
                            : Coll == lpc::collective::reduce_scatter ? count_ / static_cast<std::size_t>(num_ranks_)
                                                                      : count_;
    const auto run = [&](auto op_tag) {
      using op_t = decltype(op_tag);
      // (For these collectives tree resolves to the one-shot direct algorithm, as flat.)
      if (a == algorithm::low_precision) {
        if constexpr (Only == algorithm::automatic || Only == algorithm::low_precision)
          run_collective<Coll, algorithm::low_precision, Config, op_t>(who, out);
      } else {
        if constexpr (Only != algorithm::low_precision) run_collective<Coll, algorithm::flat, Config, op_t>(who, out);
      }
    };
    // AllGather and AlltoAll reduce nothing: one instantiation, not one per operator.
    if constexpr (Coll == lpc::collective::reduce_scatter) core::with_op(op, run);
    else run(core::op_sum{});
  }

  template <lpc::collective Coll, algorithm Algo, class Config, class Op>
  void run_collective(const char* who, std::size_t out_count) {
    if constexpr (Algo == algorithm::low_precision) {
      if constexpr (!lpc::is_element_v<T>) {
        throw error(errc::unsupported, std::string(who) + ": algorithm::low_precision takes float or rcclx::bf16 "
                                                          "elements, not " + core::type_name<T>());
      } else {
        if (opt_.input_in_symmetric_buffer)
          throw error(errc::invalid_argument, std::string(who) + ": algorithm::low_precision keeps its FP8 data in "
                                                                 "the symmetric buffer: the input cannot live there "
                                                                 "(input_in_symmetric_buffer)");
        rcclx::kernel::check_schedule<typename Config::schedule>(who, num_ranks_);
        using kernel = emulated_collective_t<Coll, Algo, Config, Op, T, MaxRanks>;
        launch_collective<Coll, Algo, Config, Op>(
            out_count, lpc::num_blocks_for<Config>(Coll, count_, num_ranks_,
                                                   lpc::launch_config{opt_.threads, resident_cap<kernel>()}));
      }
    } else if constexpr (Coll == lpc::collective::allreduce) {
      static_assert(Coll != lpc::collective::allreduce, "the plain AllReduce is run_allreduce");
    } else {
      const std::size_t elems = Coll == lpc::collective::allgather ? count_ : count_ / static_cast<std::size_t>(num_ranks_);
      using kernel = emulated_collective_t<Coll, Algo, Config, Op, T, MaxRanks>;
      launch_collective<Coll, Algo, Config, Op>(
          out_count, rcclx::kernel::blocks_for_elems<T>(elems, opt_.threads, resident_cap<kernel>()));
    }
  }

  template <lpc::collective Coll, algorithm Algo, class Config, class Op>
  void launch_collective(std::size_t out_count, int wanted_blocks) {
    using kernel = emulated_collective_t<Coll, Algo, Config, Op, T, MaxRanks>;
    const int nb = fit_blocks<kernel>(wanted_blocks);
    last_algorithm_ = Algo;
    last_blocks_ = nb;
    out_count_ = out_count;
    before_call();
    if (count_ > 0) launch_emulated(num_ranks_, nb, opt_.threads, kernel{device_tables(), device_buffers(), count_});
    after_call();
  }

  // Most blocks per rank the pads and residency allow (the cap the balanced block counts start from).
  template <class F>
  int resident_cap() const {
    const int resident = max_blocks_per_rank<F>(num_ranks_, opt_.threads);
    const int cap = resident < world_.max_blocks() ? resident : world_.max_blocks();
    return cap > 0 ? cap : 1;
  }

  // opt_.blocks_per_rank if set, else `wanted`; capped by the pads and by residency.
  template <class F>
  int fit_blocks(int wanted) const {
    int nb = opt_.blocks_per_rank > 0 ? opt_.blocks_per_rank : wanted;
    if (nb > world_.max_blocks()) nb = world_.max_blocks();
    const int resident = max_blocks_per_rank<F>(num_ranks_, opt_.threads);
    if (nb > resident) nb = resident;
    if (nb < 1)
      throw error(errc::unsupported, "emulated_peers: " + std::to_string(num_ranks_) + " ranks of blocks of " +
                                         std::to_string(opt_.threads) + " threads cannot all be resident on this GPU");
    return nb;
  }

  int num_ranks_;
  std::size_t count_;
  emulated_options opt_;
  emulated_world<MaxRanks> world_;
  std::vector<std::vector<T>> inputs_, outputs_;
  std::vector<T*> dev_in_, dev_out_;
  std::vector<void*> owned_;
  algorithm last_algorithm_ = algorithm::automatic;
  int last_blocks_ = 0;
  std::size_t out_count_ = 0;  // output elements of the last call
};

// The collectives are defined out of the class, not inline: a test suite (or any user) can compile
// the kernels of an instantiation once, in one file (`template void emulated_peers<float>::
// allreduce<>(algorithm, reduce_op);`), and declare it `extern template` everywhere else, so no other
// translation unit instantiates or optimizes them (an inline member would still be instantiated for
// inlining). tests/support/emulated_peers.hpp does that for the tests.
template <class T, int MaxRanks>
template <class Config>
void emulated_peers<T, MaxRanks>::allreduce(algorithm algo, reduce_op op) {
  allreduce_impl<Config, algorithm::automatic>(algo, op);
}

template <class T, int MaxRanks>
template <class Config, algorithm Only>
void emulated_peers<T, MaxRanks>::allreduce_impl(algorithm algo, reduce_op op) {
  constexpr bool any = Only == algorithm::automatic;
  if constexpr (emulated_type_v<T>) {
    const char* who = "emulated_peers::allreduce";
    check_op_and_algorithm(who, op, algo);
    const algorithm a = lpc::resolve_algorithm<T>(lpc::collective::allreduce, algo, count_, num_ranks_);
    if (a == algorithm::low_precision) {
      if constexpr (any || Only == algorithm::low_precision) {
        core::with_op(op, [&](auto op_tag) {
          run_collective<lpc::collective::allreduce, algorithm::low_precision, Config, decltype(op_tag)>(who, count_);
        });
      }
      return;
    }
    if constexpr (any || Only == algorithm::flat || Only == algorithm::tree) {
      dda::check_allreduce_call<T>(who, num_ranks_, MaxRanks, dev_in_[0], dev_out_[0], count_, op, a, 0);
      if (a == algorithm::flat && opt_.in_place && opt_.input_in_symmetric_buffer)
        throw error(errc::invalid_argument, "emulated_peers::allreduce: algorithm::flat cannot write its output "
                                            "into the symmetric buffer (in_place with input_in_symmetric_buffer); "
                                            "use algorithm::tree");
      last_algorithm_ = a;
      core::with_op(op, [&](auto op_tag) {
        using op_t = decltype(op_tag);
        if (a == algorithm::flat) {
          if constexpr (any || Only == algorithm::flat) run_allreduce<op_t, algorithm::flat>();
        } else {
          if constexpr (any || Only == algorithm::tree) run_allreduce<op_t, algorithm::tree>();
        }
      });
    }
  } else {
    (void)algo;
    (void)op;
  }
}

template <class T, int MaxRanks>
template <class Config>
void emulated_peers<T, MaxRanks>::allgather(algorithm algo) {
  dispatch<lpc::collective::allgather, Config>("emulated_peers::allgather", algo, reduce_op::sum);
}

template <class T, int MaxRanks>
template <class Config>
void emulated_peers<T, MaxRanks>::reduce_scatter(algorithm algo, reduce_op op) {
  dispatch<lpc::collective::reduce_scatter, Config>("emulated_peers::reduce_scatter", algo, op);
}

template <class T, int MaxRanks>
template <class Config>
void emulated_peers<T, MaxRanks>::alltoall(algorithm algo) {
  dispatch<lpc::collective::alltoall, Config>("emulated_peers::alltoall", algo, reduce_op::sum);
}

}  // namespace testing
RCCLX_NAMESPACE_END
