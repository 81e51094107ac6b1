// rcclx/host/communicator.hpp: one process per GPU (or per rank on the host backend): the thin
// host layer that sets up symmetric memory and peer handles, then gets out of the way.
//
//   rcclx::host::socket_bootstrap bs(rcclx::host::launch_config::from_env());   // torchrun
//   rcclx::host::communicator<8> comm(bs);          // workspace + signal pads, peers opened
//   comm.allreduce(in, out, count);                 // host-callable, on a stream
//   comm.allgather(in, gathered, count, rcclx::algorithm::low_precision, stream);   // FP8 on the wire
//   comm.reduce_scatter(in, mine, count, rcclx::reduce_op::sum);   // also alltoall
//   my_fused_kernel<<<g, b, 0, s>>>(comm.device_handle<float>(), ...);   // or in your kernel
//   comm.register_buffer(x, bytes);                 // zero-copy for x from now on
//
// Set-up (collective): every rank allocates a symmetric data buffer (device memory) and a signal
// pad (uncached on AMD) with shareable_malloc, exports their IPC handles (of the allocation
// bases), and the bootstrap allgathers them; each rank opens its peers' allocations (lazy peer
// access) through an LRU ipc_cache and builds its peer table, kept on the host (passed to kernels
// by value) and in device memory. On the host backend the memory is POSIX shared memory whose names
// are unlinked as soon as every peer has mapped it.
//
// Where a collective's peers read this rank's input:
//  - registered buffers (register_buffer, collective): zero-copy, from the peers' registered copies;
//  - during graph capture: zero-copy too; the kernel reads its peer table from a device slot whose
//    peer pointers are filled after capture (end_capture / register_graph_buffers: vLLM's scheme);
//  - otherwise the symmetric workspace: the kernel copies the input in (large calls run in chunks).
//
// Collectives: allreduce, allgather, reduce_scatter, alltoall, broadcast, reduce, barrier; algorithm
// automatic / flat / tree run the plain rcclx::dda kernels (exact), low_precision the rcclx::lpc
// ones (FP8 with block scales, float and bf16; always through the workspace, which holds their FP8
// form). AllReduce runs
// larger calls in chunks (low precision: of whole quantization blocks, the same bits as one call).
// AllGather, ReduceScatter and AlltoAll run in one launch when they fit (count * sizeof(T) <=
// buffer_bytes, or a registered input), else in slices of every block through the workspace
// (dda/strided.hpp); low precision needs lpc::workspace_bytes, else every rank throws an error
// naming both.
//
// Errors: every set-up step and every call check is exchanged, so a rank's local error (a bad
// pointer, an allocation failure, a count that differs) is thrown on every rank with the same
// message. A dead peer is reported by the bootstrap at once (its socket closed) or, inside a kernel,
// by the bounded barrier wait (communicator_options::timeout_ns), naming the rank and whether its
// process still runs. After a timeout the communicator is unusable: destroy it.
// Lifetime: the bootstrap must outlive the communicator; destroy the communicator after the last
// collective has finished on every stream that used it.
//
// The class is a facade over parts with one job each (host/detail): options.hpp (the options and
// their environment variables), agreement.hpp (every exchange and call check), workspace.hpp (the
// memory set up and exchanged), buffer_registry.hpp (registrations, the IPC cache's users, graph
// buffers), collective_runner.hpp (the collectives: checks, buffer paths, chunks, launch shapes,
// errors after a launch).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../core/ops.hpp"
#include "../core/peer_table.hpp"
#include "../core/slot_ranges.hpp"
#include "../gpu/runtime.hpp"
#include "bootstrap.hpp"
#include "detail/agreement.hpp"
#include "detail/buffer_registry.hpp"
#include "detail/collective_runner.hpp"
#include "detail/owned_memory.hpp"
#include "detail/workspace.hpp"
#include "graph.hpp"
#include "ipc_cache.hpp"
#include "options.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {

template <int MaxRanks = max_ranks>
class communicator {
  using byte_table = core::peer_table<unsigned char, MaxRanks>;

 public:
  static constexpr int max_ranks_v = MaxRanks;

  // Collective. `opts` with the environment's overrides (communicator_options::from_environment).
  explicit communicator(bootstrap& bs, communicator_options opts = {})
      : opts_(detail::checked_options(opts, bs.num_ranks(), MaxRanks)),
        agree_(bs, opts_.check_calls),
        cache_(std::max<std::size_t>(opts_.cache_capacity, 1)),
        workspace_(agree_, opts_, cache_),
        registry_(agree_, workspace_, cache_, opts_),
        runner_(agree_, opts_, workspace_, registry_),
        slot_ranges_(detail::pad_slots<MaxRanks>::ranges(opts_)) {}

  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;

  // Waits for this process's device work, then closes every peer handle and frees the workspace.
  // The last collective's end barrier guarantees no peer still reads this rank's memory.
  ~communicator() {
    detail::synchronize_quietly();
    registry_.release_all();
    cache_.clear();
  }

  int rank() const { return agree_.get_bootstrap().rank(); }
  int num_ranks() const { return agree_.get_bootstrap().num_ranks(); }
  const communicator_options& options() const { return opts_; }
  // Every rank's process id.
  const std::vector<int>& pids() const { return workspace_.pids(); }
  host::bootstrap& get_bootstrap() const { return agree_.get_bootstrap(); }
  ipc_cache_stats cache_stats() const { return cache_.stats(); }

  // ---- device handles for users' kernels ----------------------------------------------------

  // The workspace as seen from this rank: every rank's symmetric buffer and the signal pads.
  // Kernels take it by value; they may use up to options().max_blocks blocks of barriers.
  template <class T>
  core::peer_table<T, MaxRanks> device_handle() const {
    return workspace_.table().template as<T>();
  }

  // A slot range of the signal pads for a tile-flag kernel of up to max_tiles tiles
  // (fused::tile_allreduce, fused::combine, core/tile_flags.hpp): the highest free slots, apart
  // from this communicator's own (its collectives' and its barrier's) and every range handed out
  // before. Every rank asks for the same ranges in the same order (and gets the same ones). Throws
  // invalid_argument when options().max_blocks leaves no room.
  core::tile_slots reserve_tile_slots(int max_tiles, const std::string& owner = "a tile-flag kernel") {
    return slot_ranges_.reserve_tiles(max_tiles, owner);
  }
  // Gives a range from reserve_tile_slots back (owner, if not empty, must be the name it was
  // reserved under); every rank gives back the same ranges. Its pad words are left as they are.
  void release_tile_slots(core::tile_slots s, const std::string& owner = {}) { slot_ranges_.release_tiles(s, owner); }

  // The same table in device memory (for kernels that read it through a pointer).
  template <class T>
  const core::peer_table<T, MaxRanks>* device_table() const {
    static_assert(sizeof(core::peer_table<T, MaxRanks>) == sizeof(byte_table), "peer_table layout must not depend on T");
    return static_cast<const core::peer_table<T, MaxRanks>*>(workspace_.device_table());
  }

  // The table of a registered buffer: data[p] is peer p's copy of [ptr, ptr + count).
  template <class T>
  core::peer_table<T, MaxRanks> buffer_handle(const T* ptr, std::size_t count) const {
    const auto* reg = registry_.find(ptr, count * sizeof(T));
    if (!reg)
      throw error(errc::invalid_argument, "buffer_handle: [ptr, ptr + " + std::to_string(count * sizeof(T)) +
                                              " bytes) is not inside a registered buffer");
    return registry_.table_of(*reg, ptr);
  }

  // ---- zero-copy buffers -----------------------------------------------------------------------

  // Collective: every rank registers its own buffer of the same size, in the same order.
  // Collectives whose input lies inside it then read it from the peers directly (no copy).
  // On GPUs any device allocation works (its allocation base is found and shared); on the host
  // backend the memory must come from shareable_malloc.
  void register_buffer(void* ptr, std::size_t bytes) {
    runner_.ensure_usable();
    registry_.register_buffer(ptr, bytes);
  }

  // Local: forgets a registration (its peers' handles stay cached, closed only on eviction).
  // Every rank must unregister before the buffer is freed or reused for another registration.
  void unregister_buffer(void* ptr) { registry_.unregister_buffer(ptr); }

  bool is_registered(const void* ptr, std::size_t bytes) const { return registry_.find(ptr, bytes) != nullptr; }

  // Closes every cached peer handle no registration uses any more (they would be closed on
  // eviction or at teardown anyway): e.g. after the peers freed the buffers.
  void trim_cache() { cache_.trim(); }
  std::size_t registered_buffers() const { return registry_.size(); }

  // ---- graph capture ---------------------------------------------------------------------------

  // Starts capturing `stream` (GPU: the vendor's stream capture; host backend: collectives on this
  // communicator are recorded instead of run). Collectives captured with zero-copy inputs get
  // their peer tables patched by end_capture.
  void begin_capture(gpu::stream_t stream) {
    runner_.ensure_usable();
#if RCCLX_BACKEND_GPU
    gpu::stream_begin_capture(stream);
#else
    (void)stream;
    if (runner_.host_capturing()) throw error(errc::invalid_argument, "begin_capture: a capture is already in progress");
    runner_.begin_host_capture();
#endif
  }

  // Collective: ends the capture, exchanges the handles of every buffer the captured collectives
  // read (register_graph_buffers) and returns the graph, ready to launch.
  graph end_capture(gpu::stream_t stream) {
#if RCCLX_BACKEND_GPU
    graph g(gpu::stream_end_capture(stream));
#else
    (void)stream;
    if (!runner_.host_capturing()) throw error(errc::invalid_argument, "end_capture: no capture in progress");
    graph g(runner_.end_host_capture());
#endif
    register_graph_buffers();
    return g;
  }

  // Collective: for graphs captured by the caller's own means (torch.cuda.graph, ...): opens the
  // peers' copies of every buffer the collectives captured since the last call read, and patches
  // their device peer tables. Every rank must have captured the same collectives.
  void register_graph_buffers() {
    runner_.ensure_usable();
    registry_.register_graph_buffers();
  }

  // ---- collectives ------------------------------------------------------------------------------
  // Each one validates its arguments into a local error (thrown on every rank by the call check),
  // decides whether zero-copy leaves the caller's input intact, and launches the collective for a
  // table by value, a device-table pointer (captured graphs) or the workspace (chunked where the
  // collective allows it): detail::collective_runner.
  // algo: automatic, flat and tree are the plain collectives (rcclx::dda, exact); low_precision is
  // rcclx::lpc (FP8 with block scales on the wire, lpc::default_config; float and bf16 only; error
  // bounds in docs/numerics.md). Low precision always goes through the workspace (its FP8 form
  // lives there, its input must not).

  // AllReduce of `count` elements on `stream`: output[i] = op over every rank's input[i], the same
  // bits on every rank (rcclx::dda: flat or tree, chosen at run time unless `algo` says; or
  // rcclx::lpc for algorithm::low_precision). T: float, bf16, fp16, int32_t (low precision: float,
  // bf16). input may equal output. Zero-copy when input is registered (or captured in a graph) and
  // the algorithm leaves it intact: flat out of place, tree in place; otherwise through the
  // workspace, in chunks of buffer_bytes (low precision: of whole quantization blocks, the same
  // bits as one call). op: sum, min, max, or (plain algorithms only) product, avg and premul_sum as
  // a reduce_spec{reduce_op::premul_sum, factor} (core/ops.hpp says how each is computed; the factor
  // must be the same on every rank: the call check compares it).
  template <class T>
  void allreduce(const T* input, T* output, std::size_t count, reduce_op op = reduce_op::sum,
                 algorithm algo = algorithm::automatic, gpu::stream_t stream = {}) {
    runner_.allreduce(input, output, count, reduce_spec{op}, algo, stream);
  }
  template <class T>
  void allreduce(const T* input, T* output, std::size_t count, const reduce_spec& op,
                 algorithm algo = algorithm::automatic, gpu::stream_t stream = {}) {
    runner_.allreduce(input, output, count, op, algo, stream);
  }

  // AllGather of `count` elements per rank: output[p * count + i] = rank p's input[i] (output:
  // num_ranks * count elements, disjoint from input), the same bits on every rank. Plain: exact
  // copies, zero-copy when input is registered or captured; low precision: every block is the FP8
  // round trip of its rank's input (the own block too). Plain: any count (in slices above the
  // workspace); low precision: one launch, the workspace must hold lpc::workspace_bytes(allgather,
  // count, N).
  template <class T>
  void allgather(const T* input, T* output, std::size_t count, algorithm algo = algorithm::automatic,
                 gpu::stream_t stream = {}) {
    runner_.template one_shot_call<detail::collective_kind::allgather>("allgather", input, output, count,
                                                                       reduce_op::sum, algo, stream);
  }

  // ReduceScatter of `count` elements per rank (count % num_ranks == 0, C = count / num_ranks):
  // output[i] = op over ranks p of input_p[rank * C + i] (C elements, disjoint from input), reduced
  // in rank order in fp32 (plain: bit for bit block `rank` of the plain AllReduce). T: float, bf16,
  // fp16, int32_t (low precision: float, bf16). op as allreduce's. Zero-copy and workspace as allgather.
  template <class T>
  void reduce_scatter(const T* input, T* output, std::size_t count, reduce_op op = reduce_op::sum,
                      algorithm algo = algorithm::automatic, gpu::stream_t stream = {}) {
    runner_.template one_shot_call<detail::collective_kind::reduce_scatter>("reduce_scatter", input, output, count,
                                                                            reduce_spec{op}, algo, stream);
  }
  template <class T>
  void reduce_scatter(const T* input, T* output, std::size_t count, const reduce_spec& op,
                      algorithm algo = algorithm::automatic, gpu::stream_t stream = {}) {
    runner_.template one_shot_call<detail::collective_kind::reduce_scatter>("reduce_scatter", input, output, count, op,
                                                                            algo, stream);
  }

  // AlltoAll of `count` elements per rank (count % num_ranks == 0, C = count / num_ranks): block i
  // of rank r lands at block r of rank i, i.e. output[p * C + i] = input_p[rank * C + i]. input may
  // equal output (then through the workspace). Plain: exact copies; low precision: the FP8 round
  // trip (the own block exact). Zero-copy and workspace as allgather.
  template <class T>
  void alltoall(const T* input, T* output, std::size_t count, algorithm algo = algorithm::automatic,
                gpu::stream_t stream = {}) {
    runner_.template one_shot_call<detail::collective_kind::alltoall>("alltoall", input, output, count,
                                                                      reduce_op::sum, algo, stream);
  }

  // Uneven AlltoAll (torch's all_to_all_single with split sizes): this rank sends input_splits[p]
  // elements to rank p, from input + input_splits[0] + ... + input_splits[p - 1], and receives
  // output_splits[p] elements from rank p at the same prefix offset of output. Both arrays have
  // num_ranks entries; output_splits[p] of rank r must equal input_splits[r] of rank p (every rank's
  // splits are exchanged first, one bootstrap allgather, and a mismatch is an error on every rank
  // naming both ranks). input and output disjoint; any sizes, through the workspace in slices. Bit
  // copies; any element type of 1, 2, 4, 8 or 16 bytes.
  template <class T>
  void alltoallv(const T* input, const std::size_t* input_splits, T* output, const std::size_t* output_splits,
                 gpu::stream_t stream = {}) {
    runner_.alltoallv(input, input_splits, output, output_splits, stream);
  }

  // Broadcast of `count` elements from `root`: every rank's output <- the root's input (bit copies).
  // input is read on the root only (other ranks may pass null); input == output on the root is in
  // place. algo: flat (one-shot: every rank reads the root's buffer), tree (scatter from the root,
  // then allgather: for large messages) or automatic (by size, as allreduce). Any element type of
  // 1, 2, 4, 8 or 16 bytes. Always through the workspace, in chunks of buffer_bytes. A root outside
  // [0, num_ranks) is an error on every rank; ranks that name different roots fail together (call
  // check).
  template <class T>
  void broadcast(const T* input, T* output, std::size_t count, int root, algorithm algo = algorithm::automatic,
                 gpu::stream_t stream = {}) {
    runner_.template rooted<false>(input, output, count, root, reduce_spec{}, algo, stream);
  }

  // Reduce of `count` elements to `root`: the root's output[i] = op over every rank's input[i], the
  // same bits as allreduce with that op; other ranks' outputs are not written (they may pass null).
  // input == output on the root is in place. T and op as allreduce (plain algorithms: flat one-shot,
  // tree reduce-scatter + gather, automatic). Through the workspace, in chunks of buffer_bytes.
  template <class T>
  void reduce(const T* input, T* output, std::size_t count, int root, const reduce_spec& op = reduce_op::sum,
              algorithm algo = algorithm::automatic, gpu::stream_t stream = {}) {
    runner_.template rooted<true>(input, output, count, root, op, algo, stream);
  }

  // The launch shape of an AllReduce of `count` elements by this communicator, for algorithm flat,
  // tree or low_precision (not automatic): threads per block (flat: flat_threads, or its by-size
  // rule; 0 = the library's) and blocks (the library's rule under collective_blocks; 0 = the
  // library's choice).
  using shape = detail::launch_shape;
  template <class T>
  shape launch_shape(std::size_t count, algorithm a) const {
    return runner_.template shape_of<T>(count, a);
  }

  // Every rank waits for every other on `stream` (a device barrier; the host backend blocks).
  void barrier(gpu::stream_t stream = {}) { runner_.barrier(stream); }

  // Collective (every rank, in the same order as its collectives): the built-in calls' agreement
  // check for a call of your own, e.g. a fused kernel launched on this communicator's handles.
  // Ranks that disagree on `name`, T, `count` or `shape` (a second size, such as a row length), or
  // a rank that passes a non-empty `local_error`, make every rank throw the same error naming each
  // rank's value. Without options().check_calls only the local error is thrown (on this rank).
  template <class T>
  void check_user_call(const char* name, std::size_t count, std::uint32_t shape = 0,
                       const std::string& local_error = std::string()) {
    runner_.template check_user_call<T>(name, count, shape, local_error);
  }

  // Advanced: runs the caller's collective kernel on this communicator with the same buffer
  // resolution and checks as the built-in collectives. `kernel(table, uses_workspace)` is called
  // with a core::peer_table<T, MaxRanks> by value, or (during a zero-copy graph capture) with a
  // pointer to one in device memory, patched after the capture. When `input` (count elements) is
  // registered or captured zero-copy, table.data[p] is peer p's copy of it; otherwise
  // (uses_workspace) data[p] is p's workspace, which the kernel fills with its input itself (at most
  // table.capacity() elements per launch). `zero_copy` = false forces the workspace (e.g. for
  // in-place algorithms that overwrite data[rank] while peers read it). The kernel callable is
  // copied (and kept, on the host backend, in a captured graph): capture by value.
  template <class T, class Kernel>
  void launch(const T* input, std::size_t count, bool zero_copy, gpu::stream_t stream, Kernel kernel) {
    run(detail::make_descriptor<T>(detail::collective_kind::user, count), input, count, zero_copy, stream,
        std::move(kernel));
  }

  // Waits for `stream`, then reports a device-side error (a peer that never arrived).
  void synchronize(gpu::stream_t stream = {}) {
    gpu::stream_synchronize(stream);
    check_errors();
  }

  // Throws if a kernel of this rank recorded an error (GPU: call after the work has finished,
  // e.g. through synchronize(); the host backend checks after every collective by itself).
  void check_errors() { runner_.check_errors(); }

 protected:
  // The common path of every collective: check the call, choose where peers read the input,
  // launch. `kernel(table_or_device_pointer, uses_workspace)`; see launch().
  // `local_error`: this rank's arguments are invalid; with call checks every rank throws it.
  template <class T, class Kernel>
  void run(detail::call_descriptor d, const T* input, std::size_t count, bool zero_copy, gpu::stream_t stream,
           Kernel kernel, const std::string& local_error = std::string()) {
    runner_.run(d, input, count, zero_copy, stream, std::move(kernel), local_error);
  }

 private:
  // Construction order is set-up order: the options (checked), the exchange over the bootstrap,
  // the cache the workspace and registrations open peers' memory through, then the parts.
  communicator_options opts_;
  detail::agreement agree_;
  ipc_cache<> cache_;
  detail::workspace<MaxRanks> workspace_;
  detail::buffer_registry<MaxRanks> registry_;
  detail::collective_runner<MaxRanks> runner_;
  core::slot_ranges slot_ranges_;  // who uses which pad slots
};

}  // namespace host
RCCLX_NAMESPACE_END
