// rcclx/host/detail/workspace.hpp: what a communicator allocates and exchanges at set-up: each
// rank's symmetric data buffer and signal pad, the peer table over every rank's (on the host, for
// kernels taking it by value, and in device memory), and the device tables that graph captures
// fill later. Built collectively; afterwards it only answers questions about that memory.
//
//   rcclx::host::detail::workspace<8> ws(agree, options, cache);   // every rank: collective
//   my_kernel<<<g, b, 0, s>>>(ws.table().as<float>(), ...);
//   if (ws.recorded_error().code != 0) throw rcclx::error(..., ws.describe(ws.recorded_error()));
//
// Set-up: every rank allocates its buffer and pad with shareable_malloc, exports their IPC handles
// (of the allocation bases) and the bootstrap allgathers them with the options that must agree; each
// rank opens its peers' allocations through the communicator's ipc_cache, pinned for the
// communicator's life. On the host backend the memory is POSIX shared memory whose names are
// unlinked as soon as every peer has mapped it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <unistd.h>

#include "../../core/peer_table.hpp"
#include "../../gpu/atomic.hpp"
#include "../../gpu/runtime.hpp"
#include "../ipc_cache.hpp"
#include "../options.hpp"
#include "../shareable_memory.hpp"
#include "agreement.hpp"
#include "owned_memory.hpp"
#include "pad_slots.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {
namespace detail {

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
  std::int32_t checks;  // rcclx::checks (RCCLX_CHECKS) of the rank's build: every rank must agree
};

template <int MaxRanks>
class workspace {
 public:
  using byte_table = core::peer_table<unsigned char, MaxRanks>;

  // Collective. `opts` as detail::checked_options returns them (the same on every rank).
  workspace(agreement& agree, const communicator_options& opts, ipc_cache<>& cache)
      : rank_(agree.get_bootstrap().rank()), n_(agree.get_bootstrap().num_ranks()), bytes_(opts.buffer_bytes) {
    const std::vector<rank_setup> all = allocate_and_exchange(agree, opts);
    check_agreement(all);
    for (int r = 0; r < n_; ++r) pids_.push_back(all[static_cast<std::size_t>(r)].pid);
    open_peers(agree, opts, cache, all);
    // Every peer has mapped our memory: its name is no longer needed (host backend).
    unlink_when_mapped(data_.get());
    unlink_when_mapped(pad_.get());
  }
  workspace(const workspace&) = delete;
  workspace& operator=(const workspace&) = delete;

  // Every rank's buffer and the signal pads, as seen from this rank (kernels take it by value).
  const byte_table& table() const { return table_; }
  // The same table in device memory.
  void* device_table() const { return table_dev_.get(); }
  // This rank's symmetric buffer: buffer_bytes() bytes that peers read.
  void* data() const { return data_.get(); }
  std::size_t buffer_bytes() const { return bytes_; }
  // Device tables for the collectives of graph captures (filled by the buffer registry).
  void* capture_slots() const { return slots_.get(); }
  // Every rank's process id.
  const std::vector<int>& pids() const { return pids_; }

  // The first device-side error a kernel of this rank recorded (code 0: none). GPU: read it after
  // the work has finished.
  core::error_record recorded_error() const {
    core::error_record rec{};
    gpu::copy(&rec, table_.signals.err, sizeof(rec));
    return rec;
  }
  // Host backend: whether a launch that has just returned recorded an error.
  bool error_recorded() const {
#if RCCLX_BACKEND_HOST
    return gpu::load_acquire_system(&table_.signals.err->code) != 0u;
#else
    return false;
#endif
  }
  // The record as a message; a timeout names the missing rank and whether its process still runs.
  // Every rank runs the same RCCLX_CHECKS setting (agreed at set-up): describe_context::one_binary.
  std::string describe(const core::error_record& rec) const {
    std::string m = core::describe(rec, core::describe_context{true, false});
    const int missing = static_cast<int>(rec.missing_rank);
    if (rec.code == static_cast<std::uint32_t>(errc::timeout) && missing >= 0 && missing < n_) {
      const int pid = pids_[static_cast<std::size_t>(missing)];
      if (process_gone(pid))
        m += "; rank " + std::to_string(missing) + " (pid " + std::to_string(pid) +
             ") is no longer running: its process exited or was killed";
      else
        m += "; rank " + std::to_string(missing) + " (pid " + std::to_string(pid) +
             ") is still running: it is stuck, slower than the timeout, or in a different collective";
    }
    return m;
  }

 private:
  // 1. Allocates and exports this rank's memory; every rank learns every rank's handles and options
  // (a local failure is thrown on every rank).
  std::vector<rank_setup> allocate_and_exchange(agreement& agree, const communicator_options& opts) {
    rank_setup mine{};
    std::string err;
    try {
      data_.reset(shareable_malloc(opts.buffer_bytes));
      pad_.reset(shareable_signal_malloc(pad_slots<MaxRanks>::bytes(opts)));
      mine.data = export_memory(data_.get());
      mine.pad = export_memory(pad_.get());
      table_dev_.reset(gpu::device_malloc(sizeof(byte_table)));
      pad_slots<MaxRanks>::preload();
      if (opts.max_captured_collectives > 0) {
        const std::size_t b = sizeof(byte_table) * static_cast<std::size_t>(opts.max_captured_collectives);
        slots_.reset(gpu::device_malloc(b));
        gpu::memset_zero(slots_.get(), b);
      }
    } catch (const std::exception& e) {
      err = "communicator set-up: " + strip_prefix(e.what());
    }
    mine.magic = 0x72636d31u;
    mine.max_ranks = MaxRanks;
    mine.num_ranks = n_;
    mine.rank = rank_;
    mine.pid = static_cast<std::int32_t>(::getpid());
    mine.backend = static_cast<std::int32_t>(current_backend);
    mine.max_blocks = opts.max_blocks;
    mine.ll_blocks = opts.ll.blocks;
    mine.ll_block_bytes = static_cast<std::uint32_t>(opts.ll.block_bytes);
    mine.collective_blocks = static_cast<std::int16_t>(opts.collective_blocks);
    mine.flat_threads = static_cast<std::int16_t>(opts.flat_threads);
    mine.buffer_bytes = opts.buffer_bytes;
    mine.timeout_ns = opts.timeout_ns;
    mine.checks = rcclx::checks ? 1 : 0;
    return agree.exchange(mine, err, errc::runtime);
  }

  // 2. Everyone's view must agree (the same data on every rank: every rank throws the same).
  void check_agreement(const std::vector<rank_setup>& all) const {
    std::string mismatch;
    const auto differ = [&](const char* what, auto get) {
      if (mismatch.empty())
        mismatch = agreement::differing(std::string("communicator set-up: ranks disagree on ") + what + ":", all,
                                        [&](const rank_setup& s) { return static_cast<long long>(get(s)); });
    };
    differ("the world size", [](const rank_setup& s) { return s.num_ranks; });
    differ("MaxRanks (the communicator template argument)", [](const rank_setup& s) { return s.max_ranks; });
    differ("the backend", [](const rank_setup& s) { return s.backend; });
    differ("communicator_options::buffer_bytes", [](const rank_setup& s) { return s.buffer_bytes; });
    differ("communicator_options::max_blocks", [](const rank_setup& s) { return s.max_blocks; });
    differ("communicator_options::ll.blocks", [](const rank_setup& s) { return s.ll_blocks; });
    differ("communicator_options::ll.block_bytes", [](const rank_setup& s) { return s.ll_block_bytes; });
    differ("communicator_options::collective_blocks (or RCCLX_COLLECTIVE_BLOCKS)",
           [](const rank_setup& s) { return s.collective_blocks; });
    differ("communicator_options::flat_threads (or RCCLX_FLAT_THREADS)", [](const rank_setup& s) { return s.flat_threads; });
    // The checked mode's fingerprints travel in the pads: a rank without them would make its peers
    // wait (and time out) for packets it never sends. Agreed here, describe() knows every rank
    // runs the same setting (describe_context::one_binary).
    for (int r = 1; r < n_ && mismatch.empty(); ++r)
      if (all[static_cast<std::size_t>(r)].checks != all[0].checks)
        mismatch = "communicator set-up: rank " + std::to_string(r) + " was built with RCCLX_CHECKS=" +
                   std::to_string(all[static_cast<std::size_t>(r)].checks) + ", rank 0 with " +
                   std::to_string(all[0].checks) + ": every rank must use the same setting";
    for (int r = 0; r < n_ && mismatch.empty(); ++r)
      if (all[static_cast<std::size_t>(r)].rank != r)
        mismatch = "communicator set-up: the bootstrap's slot " + std::to_string(r) + " holds rank " +
                   std::to_string(all[static_cast<std::size_t>(r)].rank) + " (its allgather is not in rank order)";
    if (!mismatch.empty()) throw error(errc::mismatch, mismatch);
  }

  // 3. Opens every peer's buffer and pad (pinned for the communicator's life) and builds the table.
  void open_peers(agreement& agree, const communicator_options& opts, ipc_cache<>& cache,
                  const std::vector<rank_setup>& all) {
    std::string err;
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
        // Released by the cache's clear() at teardown.
        data_bases[p] = static_cast<char*>(cache.acquire(p, s.data.handle)) + s.data.offset;
        pad_bases[p] = static_cast<char*>(cache.acquire(p, s.pad.handle)) + s.pad.offset;
      }
      for (int p = 0; p < n_; ++p) table_.data[p] = static_cast<unsigned char*>(data_bases[p]);
      table_.capacity_bytes = opts.buffer_bytes;
      table_.signals = pad_slots<MaxRanks>::view(pad_bases, rank_, n_, opts);
      gpu::copy(table_dev_.get(), &table_, sizeof(table_));
    } catch (const std::exception& e) {
      err = "communicator set-up: opening peers' memory failed: " + strip_prefix(e.what());
    }
    agree.exchange(0, err, errc::runtime);
  }

  int rank_;
  int n_;
  std::size_t bytes_;
  shareable_ptr data_;
  shareable_ptr pad_;
  device_ptr table_dev_;
  device_ptr slots_;
  byte_table table_{};
  std::vector<int> pids_;
};

}  // namespace detail
}  // namespace host
RCCLX_NAMESPACE_END
