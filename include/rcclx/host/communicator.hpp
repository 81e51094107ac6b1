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
// Collectives: allreduce, allgather, reduce_scatter, alltoall; algorithm automatic / flat / tree
// run the plain rcclx::dda kernels (exact), low_precision the rcclx::lpc ones (FP8 with block
// scales, float and bf16; always through the workspace, which holds their FP8 form). AllReduce runs
// larger calls in chunks (low precision: of whole quantization blocks, the same bits as one call).
// AllGather, ReduceScatter and AlltoAll run in one launch (their output blocks are strided by the
// whole count): through the workspace they need count * sizeof(T) <= buffer_bytes (low precision:
// lpc::workspace_bytes), else every rank throws an error naming both; a registered input needs none.
//
// Errors: every set-up step and every call check is exchanged, so a rank's local error (a bad
// pointer, an allocation failure, a count that differs) is thrown on every rank with the same
// message. A dead peer is reported by the bootstrap at once (its socket closed) or, inside a kernel,
// by the bounded barrier wait (communicator_options::timeout_ns), naming the rank and whether its
// process still runs. After a timeout the communicator is unusable: destroy it.
// Lifetime: the bootstrap must outlive the communicator; destroy the communicator after the last
// collective has finished on every stream that used it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/barrier.hpp"
#include "../core/ops.hpp"
#include "../core/peer_table.hpp"
#include "../core/slot_ranges.hpp"
#include "../dda/allreduce.hpp"
#include "../gpu/atomic.hpp"
#include "../gpu/runtime.hpp"
#include "../lpc/allreduce.hpp"
#include "bootstrap.hpp"
#include "detail/barrier_kernel.hpp"
#include "detail/call_check.hpp"
#include "detail/one_shot.hpp"
#include "graph.hpp"
#include "ipc_cache.hpp"
#include "shareable_memory.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {

struct communicator_options {
  // Bytes of each rank's symmetric data buffer. Larger unregistered calls run in chunks.
  std::size_t buffer_bytes = std::size_t(8) << 20;
  // Blocks per collective launch the signal pads have room for (a launch may use fewer).
  int max_blocks = 128;
  // Blocks per rank, at most, of the AllReduce kernels this communicator launches (DDA flat/tree
  // and LPC). 0 keeps the library defaults (dda/lpc default_launch_config: 32, sized so that 8
  // emulated ranks fit one GPU). A communicator has a GPU per process, where more blocks keep more
  // peer loads in flight: on two H200s (docs/performance.md) 128 blocks cut the tree's time at
  // 256 MiB from 1179 to 820 us and LPC's from 1582 to 649 us (bf16). Capped at max_blocks;
  // RCCLX_COLLECTIVE_BLOCKS overrides it.
  int collective_blocks = RCCLX_BACKEND_GPU ? 128 : 0;
  // Threads per block of the DDA flat (one-shot) AllReduce. 0: by size on GPUs, 128 up to 128 KiB
  // (tiles of 2 KiB: a small message spread over up to 64 blocks, each within an LL region), 256
  // above (the library's 512 made 8-16 KiB calls 1.3x and 512 KiB calls 1.3x slower on two H200s;
  // docs/performance.md). Otherwise a multiple of 32 in [32, 1024] for every call (512 = the
  // library default). RCCLX_FLAT_THREADS overrides it.
  int flat_threads = 0;
  // Bound of every device-side wait; a peer that does not arrive within it becomes an error.
  std::uint64_t timeout_ns = core::default_timeout_ns;
  // LL regions of the signal pads for the barrier-free one-shot (core/ll.hpp): blocks x block_bytes
  // of payload per call (the pad holds 4x that). {0, 0} turns LL off (flat then uses two barriers).
  core::ll_layout ll = core::default_ll_layout();
  // Opened peer allocations kept by the LRU cache beyond those in use.
  std::size_t cache_capacity = 128;
  // Gather a call descriptor before each collective so that ranks disagreeing on count, type,
  // op, algorithm or buffers fail together (one bootstrap allgather per call: tens of us).
  // RCCLX_CHECK_CALLS=0/1 overrides it.
  bool check_calls = true;
  // Zero-copy collectives during graph capture (peer pointers patched after capture). When false,
  // captured collectives copy through the workspace and need no registration.
  bool zero_copy_capture = true;
  // Zero-copy collectives all graph captures of this communicator may hold together (each keeps
  // its own device peer table for the graph's life; ~300 bytes each at MaxRanks = 16). Allocated
  // up front: a capture must not allocate.
  int max_captured_collectives = 4096;
};

namespace detail {

template <class P>
struct envelope {
  std::uint32_t failed;
  std::uint32_t code;
  char message[248];
  P payload;
};

// The set-up exchange: what must agree, and the handles.
struct rank_setup {
  std::uint32_t magic;
  std::int32_t max_ranks;
  std::int32_t num_ranks;
  std::int32_t rank;
  std::int32_t pid;
  std::int32_t backend;
  std::int32_t max_blocks;
  std::int32_t ll_blocks;
  std::uint32_t ll_block_bytes;
  std::int16_t collective_blocks;  // launch shape of the ready-made collectives: must agree
  std::int16_t flat_threads;
  std::uint64_t buffer_bytes;
  std::uint64_t timeout_ns;
  exported_memory data;
  exported_memory pad;
};

struct registration_msg {
  exported_memory mem;
  std::uint64_t bytes;
};

inline std::string strip_prefix(const std::string& w) {
  // "rcclx: <code>: message" -> "message"
  if (w.compare(0, 7, "rcclx: ") != 0) return w;
  const auto colon = w.find(": ", 7);
  return colon == std::string::npos ? w : w.substr(colon + 2);
}

struct device_deleter {
  void operator()(void* p) const noexcept {
    try {
      gpu::device_free(p);
    } catch (...) {
    }
  }
};
struct shareable_deleter {
  void operator()(void* p) const noexcept {
    try {
      shareable_free(p);
    } catch (...) {
    }
  }
};
using device_ptr = std::unique_ptr<void, device_deleter>;
using shareable_ptr = std::unique_ptr<void, shareable_deleter>;

}  // namespace detail

template <int MaxRanks = max_ranks>
class communicator {
  using byte_table = core::peer_table<unsigned char, MaxRanks>;

 public:
  static constexpr int max_ranks_v = MaxRanks;

  explicit communicator(bootstrap& bs, communicator_options opts = {})
      : bs_(bs), opts_(opts), rank_(bs.rank()), n_(bs.num_ranks()), cache_(std::max<std::size_t>(opts.cache_capacity, 1)) {
    if (const char* v = std::getenv("RCCLX_CHECK_CALLS"); v && *v) opts_.check_calls = v[0] != '0';
    if (const char* v = std::getenv("RCCLX_COLLECTIVE_BLOCKS"); v && *v) opts_.collective_blocks = std::atoi(v);
    if (const char* v = std::getenv("RCCLX_FLAT_THREADS"); v && *v) opts_.flat_threads = std::atoi(v);
    (void)dda::detail::with_threads("communicator: flat_threads", opts_.flat_threads);  // throws if invalid
    // Local argument errors are the same on every rank (same options, same bootstrap), so they
    // may be thrown before any exchange.
    if (n_ < 2 || n_ > MaxRanks)
      throw error(errc::invalid_argument, "communicator: the bootstrap has " + std::to_string(n_) +
                                              " ranks; communicator<" + std::to_string(MaxRanks) +
                                              "> supports 2.." + std::to_string(MaxRanks));
    if (opts_.collective_blocks < 0)
      throw error(errc::invalid_argument, "communicator: collective_blocks = " + std::to_string(opts_.collective_blocks) +
                                              " must be >= 0");
    opts_.collective_blocks = std::min(opts_.collective_blocks, opts_.max_blocks);  // the pads' room
    if (opts_.max_blocks < 1 || opts_.max_blocks > 4096)
      throw error(errc::invalid_argument, "communicator: max_blocks = " + std::to_string(opts_.max_blocks) +
                                              " is outside [1, 4096]");
    if (opts_.buffer_bytes < 256)
      throw error(errc::invalid_argument, "communicator: buffer_bytes = " + std::to_string(opts_.buffer_bytes) +
                                              " is below the minimum of 256");
    if (opts_.max_captured_collectives < 0)
      throw error(errc::invalid_argument, "communicator: max_captured_collectives must be >= 0");
    core::check_ll_layout(opts_.ll);
    opts_.buffer_bytes = (opts_.buffer_bytes + 255) / 256 * 256;
    pad_bytes_ = core::signal_pad_bytes<MaxRanks>(opts_.max_blocks, opts_.ll);
    // The pads' slots this communicator uses itself: its collectives' grids (block b: slot b, up to
    // collective_blocks or the library's caps) and its barrier; reserve_tile_slots hands out others.
    const int own_slots = opts_.collective_blocks > 0 ? opts_.collective_blocks
                                                      : std::max({dda::default_launch_config().flat_max_blocks,
                                                                  dda::default_launch_config().tree_max_blocks,
                                                                  lpc::default_launch_config().max_blocks});
    slot_ranges_ = core::slot_ranges(opts_.max_blocks);
    slot_ranges_.record(detail::barrier_slot, std::min(own_slots, opts_.max_blocks),
                        "the communicator's collectives and barrier");

    // 1. Allocate and export this rank's workspace.
    detail::rank_setup mine{};
    std::string err;
    try {
      data_.reset(shareable_malloc(opts_.buffer_bytes));
      pad_.reset(detail::shareable_signal_malloc(pad_bytes_));
      mine.data = export_memory(data_.get());
      mine.pad = export_memory(pad_.get());
      table_dev_.reset(gpu::device_malloc(sizeof(byte_table)));
#if RCCLX_BACKEND_GPU
      gpu::preload_kernel(detail::barrier_kernel<MaxRanks>);  // no lazy module load behind a spinning kernel
#endif
      if (opts_.max_captured_collectives > 0) {
        const std::size_t b = sizeof(byte_table) * static_cast<std::size_t>(opts_.max_captured_collectives);
        slots_.reset(gpu::device_malloc(b));
        gpu::memset_zero(slots_.get(), b);
      }
    } catch (const std::exception& e) {
      err = "communicator set-up: " + detail::strip_prefix(e.what());
    }
    mine.magic = 0x72636d31u;
    mine.max_ranks = MaxRanks;
    mine.num_ranks = n_;
    mine.rank = rank_;
    mine.pid = static_cast<std::int32_t>(::getpid());
    mine.backend = static_cast<std::int32_t>(current_backend);
    mine.max_blocks = opts_.max_blocks;
    mine.ll_blocks = opts_.ll.blocks;
    mine.ll_block_bytes = static_cast<std::uint32_t>(opts_.ll.block_bytes);
    mine.collective_blocks = static_cast<std::int16_t>(opts_.collective_blocks);
    mine.flat_threads = static_cast<std::int16_t>(opts_.flat_threads);
    mine.buffer_bytes = opts_.buffer_bytes;
    mine.timeout_ns = opts_.timeout_ns;
    const std::vector<detail::rank_setup> all = exchange(mine, err, errc::runtime);

    // 2. Everyone's view must agree (the same data on every rank: every rank throws the same).
    std::string mismatch;
    auto differ = [&](const char* what, auto get) {
      if (!mismatch.empty()) return;
      for (int r = 1; r < n_; ++r) {
        if (get(all[static_cast<std::size_t>(r)]) == get(all[0])) continue;
        mismatch = std::string("communicator set-up: ranks disagree on ") + what + ":";
        for (int q = 0; q < n_; ++q)
          mismatch += std::string(q ? ", " : " ") + "rank " + std::to_string(q) + ": " +
                      std::to_string(get(all[static_cast<std::size_t>(q)]));
        return;
      }
    };
    differ("the world size", [](const detail::rank_setup& s) { return static_cast<long long>(s.num_ranks); });
    differ("MaxRanks (the communicator template argument)",
           [](const detail::rank_setup& s) { return static_cast<long long>(s.max_ranks); });
    differ("the backend", [](const detail::rank_setup& s) { return static_cast<long long>(s.backend); });
    differ("communicator_options::buffer_bytes", [](const detail::rank_setup& s) { return static_cast<long long>(s.buffer_bytes); });
    differ("communicator_options::max_blocks", [](const detail::rank_setup& s) { return static_cast<long long>(s.max_blocks); });
    differ("communicator_options::ll.blocks", [](const detail::rank_setup& s) { return static_cast<long long>(s.ll_blocks); });
    differ("communicator_options::ll.block_bytes", [](const detail::rank_setup& s) { return static_cast<long long>(s.ll_block_bytes); });
    differ("communicator_options::collective_blocks (or RCCLX_COLLECTIVE_BLOCKS)",
           [](const detail::rank_setup& s) { return static_cast<long long>(s.collective_blocks); });
    differ("communicator_options::flat_threads (or RCCLX_FLAT_THREADS)",
           [](const detail::rank_setup& s) { return static_cast<long long>(s.flat_threads); });
    for (int r = 0; r < n_ && mismatch.empty(); ++r)
      if (all[static_cast<std::size_t>(r)].rank != r)
        mismatch = "communicator set-up: the bootstrap's slot " + std::to_string(r) + " holds rank " +
                   std::to_string(all[static_cast<std::size_t>(r)].rank) + " (its allgather is not in rank order)";
    if (!mismatch.empty()) throw error(errc::mismatch, mismatch);
    for (int r = 0; r < n_; ++r) pids_.push_back(all[static_cast<std::size_t>(r)].pid);

    // 3. Open every peer's buffer and pad (pinned for the communicator's life).
    void* data_bases[MaxRanks] = {};
    void* pad_bases[MaxRanks] = {};
    try {
      for (int p = 0; p < n_; ++p) {
        const auto& s = all[static_cast<std::size_t>(p)];
        if (p == rank_) {
          data_bases[p] = data_.get();
          pad_bases[p] = pad_.get();
          continue;
        }
        data_bases[p] = static_cast<char*>(acquire_pinned(p, s.data.handle)) + s.data.offset;
        pad_bases[p] = static_cast<char*>(acquire_pinned(p, s.pad.handle)) + s.pad.offset;
      }
      for (int p = 0; p < n_; ++p) table_.data[p] = static_cast<unsigned char*>(data_bases[p]);
      table_.capacity_bytes = opts_.buffer_bytes;
      table_.signals = core::signal_pads<MaxRanks>::from_bases(pad_bases, rank_, n_, opts_.max_blocks, opts_.timeout_ns,
                                                               opts_.ll);
      gpu::copy(table_dev_.get(), &table_, sizeof(table_));
      err.clear();
    } catch (const std::exception& e) {
      err = "communicator set-up: opening peers' memory failed: " + detail::strip_prefix(e.what());
    }
    exchange(0, err, errc::runtime);
    // 4. Every peer has mapped our memory: its name is no longer needed (host backend).
    detail::unlink_when_mapped(data_.get());
    detail::unlink_when_mapped(pad_.get());
  }

  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;

  // Waits for this process's device work, then closes every peer handle and frees the workspace.
  // The last collective's end barrier guarantees no peer still reads this rank's memory.
  ~communicator() {
    try {
      gpu::device_synchronize();
    } catch (...) {
    }
    for (auto& kv : regs_) release_registration(kv.second);
    regs_.clear();
    cache_.clear();
  }

  int rank() const { return rank_; }
  int num_ranks() const { return n_; }
  const communicator_options& options() const { return opts_; }
  // Every rank's process id.
  const std::vector<int>& pids() const { return pids_; }
  host::bootstrap& get_bootstrap() const { return bs_; }
  ipc_cache_stats cache_stats() const { return cache_.stats(); }

  // ---- device handles for users' kernels ----------------------------------------------------

  // The workspace as seen from this rank: every rank's symmetric buffer and the signal pads.
  // Kernels take it by value; they may use up to options().max_blocks blocks of barriers.
  template <class T>
  core::peer_table<T, MaxRanks> device_handle() const {
    return table_.template as<T>();
  }

  // A slot range of the signal pads for a tile-flag kernel of up to max_tiles tiles
  // (fused::tile_allreduce, fused::combine, core/tile_flags.hpp): the highest free slots, apart
  // from this communicator's own (its collectives' and its barrier's) and every range handed out
  // before. Every rank asks for the same ranges in the same order (and gets the same ones). Throws
  // invalid_argument when options().max_blocks leaves no room.
  core::tile_slots reserve_tile_slots(int max_tiles, const std::string& owner = "a tile-flag kernel") {
    return slot_ranges_.reserve_tiles(max_tiles, owner);
  }

  // The same table in device memory (for kernels that read it through a pointer).
  template <class T>
  const core::peer_table<T, MaxRanks>* device_table() const {
    static_assert(sizeof(core::peer_table<T, MaxRanks>) == sizeof(byte_table), "peer_table layout must not depend on T");
    return static_cast<const core::peer_table<T, MaxRanks>*>(table_dev_.get());
  }

  // The table of a registered buffer: data[p] is peer p's copy of [ptr, ptr + count).
  template <class T>
  core::peer_table<T, MaxRanks> buffer_handle(const T* ptr, std::size_t count) const {
    const registration* reg = find_registration(ptr, count * sizeof(T));
    if (!reg)
      throw error(errc::invalid_argument, "buffer_handle: [ptr, ptr + " + std::to_string(count * sizeof(T)) +
                                              " bytes) is not inside a registered buffer");
    return registered_table<T>(*reg, ptr);
  }

  // ---- zero-copy buffers -----------------------------------------------------------------------

  // Collective: every rank registers its own buffer of the same size, in the same order.
  // Collectives whose input lies inside it then read it from the peers directly (no copy).
  // On GPUs any device allocation works (its allocation base is found and shared); on the host
  // backend the memory must come from shareable_malloc.
  void register_buffer(void* ptr, std::size_t bytes) {
    ensure_usable();
    detail::registration_msg mine{};
    std::string err;
    if (!ptr || bytes == 0) {
      err = "register_buffer: ptr must be non-null and bytes > 0 (bytes = " + std::to_string(bytes) + ")";
    } else if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0) {
      err = "register_buffer: ptr is not 16-byte aligned (collectives read peers' buffers in 16-byte vectors)";
    } else if (const registration* o = overlapping(ptr, bytes)) {
      err = "register_buffer: [ptr, ptr + " + std::to_string(bytes) + ") overlaps registered buffer #" +
            std::to_string(o->id) + " (" + std::to_string(o->bytes) + " bytes); unregister it first";
    } else {
      try {
        mine.mem = export_memory(ptr);
        if (mine.mem.offset + bytes > mine.mem.size)
          err = "register_buffer: " + std::to_string(bytes) + " bytes at offset " + std::to_string(mine.mem.offset) +
                " extend past the end of the allocation (" + std::to_string(mine.mem.size) + " bytes)";
      } catch (const std::exception& e) {
        err = "register_buffer: " + detail::strip_prefix(e.what());
      }
    }
    mine.bytes = bytes;
    const auto all = exchange(mine, err, errc::invalid_argument);
    for (int r = 1; r < n_; ++r) {
      if (all[static_cast<std::size_t>(r)].bytes == all[0].bytes) continue;
      std::string m = "register_buffer: ranks disagree on bytes:";
      for (int q = 0; q < n_; ++q)
        m += std::string(q ? ", " : " ") + "rank " + std::to_string(q) + ": " + std::to_string(all[static_cast<std::size_t>(q)].bytes);
      throw error(errc::mismatch, m);
    }
    registration reg{};
    reg.ptr = static_cast<char*>(ptr);
    reg.bytes = bytes;
    reg.id = ++registrations_;
    err.clear();
    int opened = 0;
    try {
      for (int p = 0; p < n_; ++p, opened = p) {
        if (p == rank_) {
          reg.peer[p] = reg.ptr;
          continue;
        }
        const auto& m = all[static_cast<std::size_t>(p)].mem;
        reg.peer[p] = static_cast<char*>(cache_.acquire(p, m.handle)) + m.offset;
        reg.handle[p] = m.handle;
      }
    } catch (const std::exception& e) {
      err = "register_buffer: opening a peer's buffer failed: " + detail::strip_prefix(e.what());
      for (int p = 0; p < opened; ++p)
        if (p != rank_) cache_.release(p, reg.handle[p]);
    }
    try {
      exchange(0, err, errc::runtime);
    } catch (...) {
      if (err.empty()) release_registration(reg);
      throw;
    }
    regs_.emplace(reinterpret_cast<std::uintptr_t>(ptr), reg);
  }

  // Local: forgets a registration (its peers' handles stay cached, closed only on eviction).
  // Every rank must unregister before the buffer is freed or reused for another registration.
  void unregister_buffer(void* ptr) {
    auto it = regs_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == regs_.end())
      throw error(errc::invalid_argument, "unregister_buffer: ptr is not the start of a registered buffer");
    release_registration(it->second);
    regs_.erase(it);
  }

  bool is_registered(const void* ptr, std::size_t bytes) const { return find_registration(ptr, bytes) != nullptr; }

  // Closes every cached peer handle no registration uses any more (they would be closed on
  // eviction or at teardown anyway): e.g. after the peers freed the buffers.
  void trim_cache() { cache_.trim(); }
  std::size_t registered_buffers() const { return regs_.size(); }

  // ---- graph capture ---------------------------------------------------------------------------

  // Starts capturing `stream` (GPU: the vendor's stream capture; host backend: collectives on this
  // communicator are recorded instead of run). Collectives captured with zero-copy inputs get
  // their peer tables patched by end_capture.
  void begin_capture(gpu::stream_t stream) {
    ensure_usable();
#if RCCLX_BACKEND_GPU
    gpu::stream_begin_capture(stream);
#else
    (void)stream;
    if (host_capturing_) throw error(errc::invalid_argument, "begin_capture: a capture is already in progress");
    host_capturing_ = true;
    host_ops_.clear();
#endif
  }

  // Collective: ends the capture, exchanges the handles of every buffer the captured collectives
  // read (register_graph_buffers) and returns the graph, ready to launch.
  graph end_capture(gpu::stream_t stream) {
#if RCCLX_BACKEND_GPU
    graph g(gpu::stream_end_capture(stream));
#else
    (void)stream;
    if (!host_capturing_) throw error(errc::invalid_argument, "end_capture: no capture in progress");
    host_capturing_ = false;
    graph g(std::move(host_ops_));
    host_ops_.clear();
#endif
    register_graph_buffers();
    return g;
  }

  // Collective: for graphs captured by the caller's own means (torch.cuda.graph, ...): opens the
  // peers' copies of every buffer the collectives captured since the last call read, and patches
  // their device peer tables. Every rank must have captured the same collectives.
  void register_graph_buffers() {
    ensure_usable();
    const std::uint64_t count = captured_.size();
    const auto counts = exchange(count, std::string(), errc::runtime);
    for (int r = 1; r < n_; ++r) {
      if (counts[static_cast<std::size_t>(r)] == counts[0]) continue;
      std::string m = "register_graph_buffers: ranks captured different numbers of zero-copy collectives:";
      for (int q = 0; q < n_; ++q)
        m += std::string(q ? ", " : " ") + "rank " + std::to_string(q) + ": " + std::to_string(counts[static_cast<std::size_t>(q)]);
      captured_.clear();
      throw error(errc::mismatch, m);
    }
    if (count == 0) return;
    std::string err;
    std::vector<exported_memory> mine(count);
    for (std::size_t i = 0; i < count && err.empty(); ++i) {
      try {
        mine[i] = export_memory(captured_[i].ptr);
      } catch (const std::exception& e) {
        err = "register_graph_buffers: the input of captured collective #" + std::to_string(i) + " (" +
              std::to_string(captured_[i].bytes) + " bytes at " + core::detail::pointer_text(captured_[i].ptr) +
              ") cannot be shared: " +
              detail::strip_prefix(e.what());
      }
    }
    exchange(0, err, errc::invalid_argument);
    std::vector<exported_memory> all(count * static_cast<std::size_t>(n_));
    bs_.allgather(mine.data(), all.data(), count * sizeof(exported_memory));
    try {
      for (std::size_t i = 0; i < count; ++i) {
        byte_table t = table_;
        for (int p = 0; p < MaxRanks; ++p) t.data[p] = nullptr;
        for (int p = 0; p < n_; ++p) {
          if (p == rank_) {
            t.data[p] = static_cast<unsigned char*>(const_cast<void*>(captured_[i].ptr));
            continue;
          }
          const exported_memory& m = all[static_cast<std::size_t>(p) * count + i];
          t.data[p] = static_cast<unsigned char*>(acquire_pinned(p, m.handle)) + m.offset;
        }
        t.capacity_bytes = captured_[i].bytes;
        gpu::copy(captured_[i].slot, &t, sizeof(t));
      }
    } catch (const std::exception& e) {
      err = "register_graph_buffers: opening a peer's buffer failed: " + detail::strip_prefix(e.what());
    }
    captured_.clear();
    exchange(0, err, errc::runtime);
  }

  // ---- collectives ------------------------------------------------------------------------------
  // Each one validates its arguments into a local error string (thrown on every rank by run()'s
  // call check), decides whether zero-copy leaves the caller's input intact, builds a call
  // descriptor (detail::make_descriptor + a collective_kind) and calls run() with a lambda that
  // launches the collective for a table by value, a device-table pointer (captured graphs) and the
  // workspace (chunked where the collective allows it).
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
  // bits as one call).
  template <class T>
  void allreduce(const T* input, T* output, std::size_t count, reduce_op op = reduce_op::sum,
                 algorithm algo = algorithm::automatic, gpu::stream_t stream = {}) {
    if (algo == algorithm::low_precision) return allreduce_low_precision(input, output, count, op, stream);
    std::string local_error;
    algorithm a = algo;
    try {
      dda::detail::validate_call<T>("allreduce", n_, MaxRanks, input, output, count, op, algo, 0);
      a = dda::resolve_algorithm<T>(algo, count, n_);
    } catch (const std::exception& e) {
      local_error = detail::strip_prefix(e.what());
    }
    const std::size_t bytes = count * sizeof(T);
    const bool disjoint = !dda::detail::overlaps(input, output, bytes);
    const bool zero_copy = local_error.empty() && (a == algorithm::flat ? disjoint : input == output);
    auto d = detail::make_descriptor<T>(detail::collective_kind::allreduce, count, static_cast<std::uint32_t>(op),
                                        to_string(op), static_cast<std::uint32_t>(a), to_string(a));
    const int n = n_;
    // This communicator's launch shape for c elements (a function of c and options that agree on
    // every rank): see launch_shape().
    const auto shape = [this, a](std::size_t c) { return launch_shape<T>(c, a); };
    run(d, input, count, zero_copy, stream,
        [=](const auto& t, bool uses_workspace) {
          if constexpr (std::is_pointer<std::decay_t<decltype(t)>>::value) {
            const auto s = shape(count);
            dda::allreduce(t, n, input, output, count, op, a, stream, s.blocks, s.threads);
          } else if (!uses_workspace) {
            const auto s = shape(count);
            dda::allreduce(t, input, output, count, op, a, stream, s.blocks, s.threads);
          } else {
            // Every chunk with the algorithm chosen for the whole call, so all ranks pair up.
            const std::size_t chunk = t.capacity_bytes / sizeof(T);
            for (std::size_t off = 0; off < count; off += chunk) {
              const std::size_t c = count - off < chunk ? count - off : chunk;
              const auto s = shape(c);
              dda::allreduce(t, input + off, output + off, c, op, a, stream, s.blocks, s.threads);
            }
          }
        },
        local_error);
  }

  // AllGather of `count` elements per rank: output[p * count + i] = rank p's input[i] (output:
  // num_ranks * count elements, disjoint from input), the same bits on every rank. Plain: exact
  // copies, zero-copy when input is registered or captured; low precision: every block is the FP8
  // round trip of its rank's input (the own block too). One launch: the workspace must hold
  // count * sizeof(T) bytes (plain, unless zero-copy) or lpc::workspace_bytes(allgather, count, N).
  template <class T>
  void allgather(const T* input, T* output, std::size_t count, algorithm algo = algorithm::automatic,
                 gpu::stream_t stream = {}) {
    run_one_shot<detail::collective_kind::allgather>("allgather", input, output, count, reduce_op::sum, algo, stream);
  }

  // ReduceScatter of `count` elements per rank (count % num_ranks == 0, C = count / num_ranks):
  // output[i] = op over ranks p of input_p[rank * C + i] (C elements, disjoint from input), reduced
  // in rank order in fp32 (plain: bit for bit block `rank` of the plain AllReduce). T: float, bf16,
  // fp16, int32_t (low precision: float, bf16). Zero-copy and workspace as allgather.
  template <class T>
  void reduce_scatter(const T* input, T* output, std::size_t count, reduce_op op = reduce_op::sum,
                      algorithm algo = algorithm::automatic, gpu::stream_t stream = {}) {
    run_one_shot<detail::collective_kind::reduce_scatter>("reduce_scatter", input, output, count, op, algo, stream);
  }

  // AlltoAll of `count` elements per rank (count % num_ranks == 0, C = count / num_ranks): block i
  // of rank r lands at block r of rank i, i.e. output[p * C + i] = input_p[rank * C + i]. input may
  // equal output (then through the workspace). Plain: exact copies; low precision: the FP8 round
  // trip (the own block exact). Zero-copy and workspace as allgather.
  template <class T>
  void alltoall(const T* input, T* output, std::size_t count, algorithm algo = algorithm::automatic,
                gpu::stream_t stream = {}) {
    run_one_shot<detail::collective_kind::alltoall>("alltoall", input, output, count, reduce_op::sum, algo, stream);
  }

  // The launch shape of an AllReduce of `count` elements by this communicator, for algorithm flat,
  // tree or low_precision (not automatic): threads per block (flat: flat_threads, or its by-size
  // rule; 0 = the library's) and blocks (the library's rule under collective_blocks; 0 = the
  // library's choice).
  struct shape {
    int blocks;
    int threads;
  };
  template <class T>
  shape launch_shape(std::size_t count, algorithm a) const {
    if (a == algorithm::low_precision) {
      if (opts_.collective_blocks == 0) return {0, 0};
      lpc::launch_config cfg = lpc::default_launch_config();
      cfg.max_blocks = opts_.collective_blocks;
      return {lpc::num_blocks_for<lpc::default_config>(lpc::collective::allreduce, count, n_, cfg), 0};
    }
    int threads = 0;
#if RCCLX_BACKEND_GPU
    if (a == algorithm::flat)
      threads = opts_.flat_threads > 0 ? opts_.flat_threads : (count * sizeof(T) <= (std::size_t(128) << 10) ? 128 : 256);
#endif
    const int cap = opts_.collective_blocks;
    if (cap == 0 && threads == 0) return {0, 0};
    dda::launch_config cfg = dda::detail::with_threads("allreduce", threads);
    if (cap > 0) cfg.flat_max_blocks = cfg.tree_max_blocks = cap;
    return {dda::num_blocks_for<T>(count, a, n_, cfg), threads};
  }

  // Every rank waits for every other on `stream` (a device barrier; the host backend blocks).
  void barrier(gpu::stream_t stream = {}) {
    ensure_usable();
    auto d = detail::make_descriptor<unsigned char>(detail::collective_kind::barrier, 0);
    d.seq = ++calls_;
    if (opts_.check_calls) check_call(d);
    const core::signal_pads<MaxRanks> s = table_.signals;
    enqueue([s, stream] { detail::launch_barrier(s, stream); });
  }

  // Collective (every rank, in the same order as its collectives): the built-in calls' agreement
  // check for a call of your own, e.g. a fused kernel launched on this communicator's handles.
  // Ranks that disagree on `name`, T, `count` or `shape` (a second size, such as a row length), or
  // a rank that passes a non-empty `local_error`, make every rank throw the same error naming each
  // rank's value. Without options().check_calls only the local error is thrown (on this rank).
  template <class T>
  void check_user_call(const char* name, std::size_t count, std::uint32_t shape = 0,
                       const std::string& local_error = std::string()) {
    ensure_usable();
    std::uint32_t h = 2166136261u;  // the name's FNV-1a hash: compared as the "algorithm"
    for (const char* c = name; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 16777619u;
    auto d = detail::make_descriptor<T>(detail::collective_kind::user, count, 0, "-", h, name);
    d.shape = shape;
    d.seq = ++calls_;
    if (opts_.check_calls) check_call(d, local_error);
    else if (!local_error.empty()) throw error(errc::invalid_argument, local_error);
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
  void check_errors() {
    core::error_record rec{};
    gpu::copy(&rec, table_.signals.err, sizeof(rec));
    if (rec.code != 0) {
      failed_ = true;
      failed_message_ = describe_device_error(rec);
      throw error(static_cast<errc>(rec.code), failed_message_);
    }
  }

 protected:
  // The common path of every collective: check the call, choose where peers read the input,
  // launch. `kernel(table_or_device_pointer, uses_workspace)`; see launch().
  // `local_error`: this rank's arguments are invalid; with call checks every rank throws it.
  template <class T, class Kernel>
  void run(detail::call_descriptor d, const T* input, std::size_t count, bool zero_copy, gpu::stream_t stream,
           Kernel kernel, const std::string& local_error = std::string()) {
    ensure_usable();
    const std::size_t bytes = count * sizeof(T);
    const registration* reg = nullptr;
    const detail::buffer_path path = select_path(input, bytes, zero_copy, stream, &reg);
    if (reg) {
      d.reg_id = reg->id;
      d.reg_offset = static_cast<std::uint64_t>(reinterpret_cast<const char*>(input) - reg->ptr);
    }
    d.path = static_cast<std::uint32_t>(path);
    d.seq = ++calls_;
    if (opts_.check_calls) check_call(d, local_error);
    else if (!local_error.empty()) throw error(errc::invalid_argument, local_error);
    switch (path) {
      case detail::buffer_path::registered: {
        const core::peer_table<T, MaxRanks> t = registered_table<T>(*reg, input);
        enqueue([kernel, t] { kernel(t, false); });
        break;
      }
      case detail::buffer_path::captured: {
        // Slots are never reused: an earlier graph may still be launched with its tables.
        if (slots_used_ >= static_cast<std::size_t>(opts_.max_captured_collectives))
          throw error(errc::invalid_argument, "graph capture: all max_captured_collectives = " +
                                                  std::to_string(opts_.max_captured_collectives) +
                                                  " zero-copy peer tables of this communicator are used; raise the "
                                                  "option or set zero_copy_capture = false");
        void* slot = static_cast<char*>(slots_.get()) + slots_used_ * sizeof(byte_table);
        ++slots_used_;
        captured_.push_back(captured_buffer{slot, input, bytes});
        const auto* t = static_cast<const core::peer_table<T, MaxRanks>*>(slot);
        enqueue([kernel, t] { kernel(t, false); });
        break;
      }
      default: {
        const core::peer_table<T, MaxRanks> t = table_.template as<T>();
        enqueue([kernel, t] { kernel(t, true); });
        break;
      }
    }
  }

 private:
  struct registration {
    char* ptr;
    std::size_t bytes;
    std::uint64_t id;
    char* peer[MaxRanks];
    gpu::ipc_handle handle[MaxRanks];
  };
  struct captured_buffer {
    void* slot;
    const void* ptr;
    std::size_t bytes;
  };

  // Where run() lets peers read `bytes` of input at `input` (zero_copy: the caller allows it).
  // Peers read zero-copy inputs with 16-byte vectors: only 16-byte aligned inputs qualify (the
  // same offset into buffers registered 16-byte aligned is aligned on every rank).
  detail::buffer_path select_path(const void* input, std::size_t bytes, bool zero_copy, gpu::stream_t stream,
                                  const registration** reg_out = nullptr) const {
    zero_copy = zero_copy && bytes > 0 && reinterpret_cast<std::uintptr_t>(input) % 16 == 0;
    const registration* reg = zero_copy ? find_registration(input, bytes) : nullptr;
    if (reg_out) *reg_out = reg;
    if (reg) return detail::buffer_path::registered;
    if (zero_copy && opts_.zero_copy_capture && (host_capturing_ || gpu::stream_is_capturing(stream)))
      return detail::buffer_path::captured;
    return detail::buffer_path::workspace;
  }

  // ---- the collectives' common parts ----------------------------------------------------------

  template <class T>
  static std::string low_precision_type_error(const std::string& who) {
    return who + ": algorithm::low_precision takes float or bf16 elements, not " + detail::type_tag<T>::name() +
           " (use flat, tree or automatic)";
  }

  // The workspace path writes this rank's symmetric buffer while peers read it: user buffers must lie
  // outside it (a plain collective's input may be the buffer itself: its copy is then skipped).
  void check_outside_workspace(const std::string& who, const void* p, std::size_t bytes, const char* name,
                               bool may_be_it) const {
    if (may_be_it && p == data_.get()) return;
    if (dda::detail::overlaps(p, bytes, data_.get(), opts_.buffer_bytes))
      throw error(errc::invalid_argument, who + ": " + name + " lies in the communicator's workspace, which peers read");
  }

  void check_workspace_holds(const std::string& who, std::size_t count, std::size_t need, const char* remedy) const {
    if (need > opts_.buffer_bytes)
      throw error(errc::invalid_argument, who + ": count = " + std::to_string(count) + " needs " + std::to_string(need) +
                                              " bytes of workspace per rank, more than communicator_options::"
                                              "buffer_bytes = " + std::to_string(opts_.buffer_bytes) + remedy);
  }

  // Elements of one low-precision AllReduce launch: the whole call when its FP8 workspace fits, else
  // the largest multiple of the quantization block that fits. A function of count, N and
  // buffer_bytes only, so every rank cuts the same chunks; whole blocks, so the chunks quantize
  // exactly the blocks one call would (each block's result depends on that block alone): the same bits.
  std::size_t low_precision_allreduce_chunk(const std::string& who, std::size_t count) const {
    using config = lpc::default_config;
    const auto fits = [&](std::size_t c) {
      return lpc::workspace_bytes<config>(lpc::collective::allreduce, c, n_) <= opts_.buffer_bytes;
    };
    if (fits(count)) return count;
    const std::size_t b = static_cast<std::size_t>(config::block_size);
    // In blocks; an element takes at least one byte of workspace, so a chunk is below buffer_bytes.
    std::size_t lo = 0, hi = std::min(count, opts_.buffer_bytes) / b;
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo + 1) / 2;
      if (fits(mid * b)) lo = mid;
      else hi = mid - 1;
    }
    if (lo == 0)
      check_workspace_holds(who, b, lpc::workspace_bytes<config>(lpc::collective::allreduce, b, n_),
                            " (one quantization block with algorithm::low_precision)");
    return lo * b;
  }

  template <class T>
  void allreduce_low_precision(const T* input, T* output, std::size_t count, reduce_op op, gpu::stream_t stream) {
    const std::string who = "allreduce";
    std::string local_error;
    std::size_t chunk = count;
    try {
      if constexpr (!lpc::is_element_v<T>) {
        throw error(errc::unsupported, low_precision_type_error<T>(who));
      } else {
        lpc::detail::validate_op(who, op);
        lpc::detail::validate_call<T>(who, lpc::collective::allreduce, n_, MaxRanks, input, output, count, 0);
        chunk = low_precision_allreduce_chunk(who, count);
        check_outside_workspace(who, input, count * sizeof(T), "input", false);
        check_outside_workspace(who, output, count * sizeof(T), "output", false);
      }
    } catch (const std::exception& e) {
      local_error = detail::strip_prefix(e.what());
    }
    auto d = detail::make_descriptor<T>(detail::collective_kind::allreduce, count, static_cast<std::uint32_t>(op),
                                        to_string(op), static_cast<std::uint32_t>(algorithm::low_precision),
                                        to_string(algorithm::low_precision));
    const int n = n_;
    const auto blocks = [this](std::size_t c) { return launch_shape<T>(c, algorithm::low_precision).blocks; };
    // Never zero-copy: the kernel writes the input's FP8 form into data[rank].
    run(d, input, count, false, stream,
        [=](const auto& t, bool) {
          if constexpr (!lpc::is_element_v<T>) {
            (void)t;  // rejected above, on every rank
          } else if constexpr (std::is_pointer<std::decay_t<decltype(t)>>::value) {
            lpc::allreduce(t, n, input, output, count, op, stream, blocks(count));
          } else {
            for (std::size_t off = 0; off < count; off += chunk) {
              const std::size_t c = count - off < chunk ? count - off : chunk;
              lpc::allreduce(t, input + off, output + off, c, op, stream, blocks(c));
            }
          }
        },
        local_error);
  }

  // AllGather, ReduceScatter, AlltoAll (detail::one_shot): one launch, plain or low precision.
  template <detail::collective_kind Kind, class T>
  void run_one_shot(const char* name, const T* input, T* output, std::size_t count, reduce_op op, algorithm algo,
                    gpu::stream_t stream) {
    using traits = detail::one_shot<Kind>;
    const std::string who = name;
    const bool low = algo == algorithm::low_precision;
    std::string local_error;
    bool zero_copy = false;
    try {
      if (!is_valid(algo))
        throw error(errc::invalid_argument, who + ": algorithm = " + std::to_string(static_cast<int>(algo)) +
                                                " is not an rcclx::algorithm");
      if (low) {
        if constexpr (!lpc::is_element_v<T>) {
          throw error(errc::unsupported, low_precision_type_error<T>(who));
        } else {
          if (traits::reduces) lpc::detail::validate_op(who, op);
          lpc::detail::validate_call<T>(who, traits::lpc_kind, n_, MaxRanks, input, output, count, 0);
        }
      } else {
        traits::validate(who, n_, MaxRanks, input, output, count, op);
      }
      const std::size_t bytes = count * sizeof(T), out_bytes = traits::output_elems(count, n_) * sizeof(T);
      // Zero-copy (plain only; low precision writes its FP8 form into data[rank]): peers read this
      // rank's registration from the input on (a capture: the input alone), so the output must lie
      // outside that; an in-place AlltoAll therefore goes through the workspace.
      if (!low && count > 0) {
        const registration* reg = find_registration(input, bytes);
        const std::size_t seen = reg ? static_cast<std::size_t>(reg->ptr + reg->bytes - reinterpret_cast<const char*>(input))
                                     : bytes;
        zero_copy = !dda::detail::overlaps(output, out_bytes, input, seen);
      }
      if (select_path(input, bytes, zero_copy, stream) == detail::buffer_path::workspace) {
        if (low) {
          check_workspace_holds(who, count, lpc::workspace_bytes<>(traits::lpc_kind, count, n_),
                                " (the FP8 form with algorithm::low_precision; one launch: raise buffer_bytes)");
        } else {
          check_workspace_holds(who, count, bytes, " (one launch: raise buffer_bytes, or register the input: zero-copy)");
        }
        check_outside_workspace(who, input, bytes, "input", !low);
        check_outside_workspace(who, output, out_bytes, "output", false);
      }
    } catch (const std::exception& e) {
      local_error = detail::strip_prefix(e.what());
    }
    auto d = detail::make_descriptor<T>(Kind, count, traits::reduces ? static_cast<std::uint32_t>(op) : 0u,
                                        traits::reduces ? to_string(op) : "-", static_cast<std::uint32_t>(algo),
                                        is_valid(algo) ? to_string(algo) : "invalid");
    const int n = n_;
    run(d, input, count, zero_copy, stream,
        [=](const auto& t, bool) {
          if (!low) {
            traits::plain(t, n, input, output, count, op, stream);
          } else if constexpr (lpc::is_element_v<T>) {
            traits::low_precision(t, n, input, output, count, op, stream);
          }
        },
        local_error);
  }

  // Allgathers {status, payload}; if any rank reported a local error, every rank throws it.
  template <class P>
  std::vector<P> exchange(const P& mine, const std::string& local_error, errc code) {
    static_assert(std::is_trivially_copyable<P>::value, "exchanged payloads are raw bytes");
    detail::envelope<P> e{};
    e.failed = local_error.empty() ? 0u : 1u;
    e.code = static_cast<std::uint32_t>(code);
    detail::copy_name(e.message, local_error.c_str());
    e.payload = mine;
    const auto all = bs_.allgather_value(e);
    int failures = 0, first = -1;
    for (int r = 0; r < n_; ++r)
      if (all[static_cast<std::size_t>(r)].failed) {
        if (first < 0) first = r;
        ++failures;
      }
    if (first >= 0) {
      const auto& f = all[static_cast<std::size_t>(first)];
      std::string m = "rank " + std::to_string(first) + ": " + f.message;
      if (failures > 1) m += " (and " + std::to_string(failures - 1) + " more rank(s) failed)";
      throw error(static_cast<errc>(f.code), m);
    }
    std::vector<P> out;
    out.reserve(all.size());
    for (const auto& x : all) out.push_back(x.payload);
    return out;
  }

  void check_call(const detail::call_descriptor& d, const std::string& local_error = std::string()) {
    const auto all = exchange(d, local_error, errc::invalid_argument);
    const std::string m = detail::compare_descriptors(all);
    if (!m.empty()) throw error(errc::mismatch, m);
  }

  void* acquire_pinned(int peer, const gpu::ipc_handle& h) {
    void* base = cache_.acquire(peer, h);  // released by cache_.clear() at teardown
    return base;
  }

  void release_registration(const registration& reg) {
    for (int p = 0; p < n_; ++p)
      if (p != rank_) cache_.release(p, reg.handle[p]);
  }

  const registration* find_registration(const void* ptr, std::size_t bytes) const {
    const auto a = reinterpret_cast<std::uintptr_t>(ptr);
    auto it = regs_.upper_bound(a);
    if (it == regs_.begin()) return nullptr;
    --it;
    const registration& r = it->second;
    if (a + bytes > it->first + r.bytes) return nullptr;
    return &r;
  }

  const registration* overlapping(const void* ptr, std::size_t bytes) const {
    const auto a = reinterpret_cast<std::uintptr_t>(ptr);
    for (const auto& kv : regs_)
      if (a < kv.first + kv.second.bytes && kv.first < a + bytes) return &kv.second;
    return nullptr;
  }

  template <class T>
  core::peer_table<T, MaxRanks> registered_table(const registration& reg, const T* input) const {
    const std::size_t offset = static_cast<std::size_t>(reinterpret_cast<const char*>(input) - reg.ptr);
    core::peer_table<T, MaxRanks> t = table_.template as<T>();
    for (int p = 0; p < n_; ++p) t.data[p] = reinterpret_cast<T*>(reg.peer[p] + offset);
    t.capacity_bytes = reg.bytes - offset;
    return t;
  }

  // Runs (or, while the host backend captures, records) one launch; on the host backend the
  // launch has finished on return, so its error record is checked at once.
  template <class F>
  void enqueue(F f) {
#if RCCLX_BACKEND_HOST
    if (host_capturing_) {
      host_ops_.emplace_back([this, f] { run_checked(f); });
      return;
    }
    run_checked(f);
#else
    f();
#endif
  }

  // Host backend: a launcher that found its barrier timed out may throw by itself; either way the
  // error record is turned into the communicator's error (which names the missing process's state).
  template <class F>
  void run_checked(const F& f) {
    try {
      f();
    } catch (const error&) {
      check_host_errors();
      throw;
    }
    check_host_errors();
  }

  void check_host_errors() {
#if RCCLX_BACKEND_HOST
    if (gpu::load_acquire_system(&table_.signals.err->code) != 0u) check_errors();
#endif
  }

  std::string describe_device_error(const core::error_record& rec) const {
    std::string m = core::describe(rec);
    const int missing = static_cast<int>(rec.missing_rank);
    if (rec.code == static_cast<std::uint32_t>(errc::timeout) && missing >= 0 && missing < n_) {
      const int pid = pids_[static_cast<std::size_t>(missing)];
      if (detail::process_gone(pid))
        m += "; rank " + std::to_string(missing) + " (pid " + std::to_string(pid) +
             ") is no longer running: its process exited or was killed";
      else
        m += "; rank " + std::to_string(missing) + " (pid " + std::to_string(pid) +
             ") is still running: it is stuck, slower than the timeout, or in a different collective";
    }
    return m;
  }

  void ensure_usable() const {
    if (failed_) throw error(errc::peer_failure, "communicator unusable after an earlier error: " + failed_message_);
  }

  host::bootstrap& bs_;
  communicator_options opts_;
  int rank_;
  int n_;
  ipc_cache<> cache_;
  std::size_t pad_bytes_ = 0;
  detail::shareable_ptr data_;
  detail::shareable_ptr pad_;
  detail::device_ptr table_dev_;
  detail::device_ptr slots_;
  core::slot_ranges slot_ranges_;  // who uses which pad slots
  byte_table table_{};
  std::vector<int> pids_;
  std::map<std::uintptr_t, registration> regs_;
  std::uint64_t registrations_ = 0;
  std::uint64_t calls_ = 0;
  std::vector<captured_buffer> captured_;
  std::size_t slots_used_ = 0;
  bool host_capturing_ = false;
  std::vector<std::function<void()>> host_ops_;
  bool failed_ = false;
  std::string failed_message_;
};

}  // namespace host
RCCLX_NAMESPACE_END
