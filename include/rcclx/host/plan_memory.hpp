// rcclx/host/plan_memory.hpp: the symmetric memory of a region plan (fused/region_plan.hpp) on a
// communicator: one shareable allocation of plan.bytes() per rank, registered, and the plan placed
// on it and on pad slots reserved from the communicator. Collective (every rank, the same plan).
//
//   rcclx::fused::region_plan plan;
//   const auto ar1 = plan.add(fz::tile_allreduce<bf16, 8>::need(tile_elems, max_tiles), "o_proj");
//   const auto ar2 = plan.add(fz::tile_allreduce<bf16, 8>::need(tile_elems, max_tiles), "down_proj");
//   rcclx::host::plan_memory<8> mem(comm, plan, "decode layer");
//   my_kernel k{mem.table<bf16>(), plan[ar1], plan[ar2]};      // launch with launch_rank / your own
//
// Host backend: the allocation's /dev/shm name is removed once every peer has mapped it (after
// register_buffer), so nothing is left there even if a process is killed.
// The destructor (collective too) waits for every rank (a barrier), unregisters and frees the
// memory and gives the slots back; the plan is then unplaced and may be placed again. The plan and
// the communicator must outlive the object.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "../config.hpp"
#include "../core/error.hpp"
#include "../core/peer_table.hpp"
#include "../core/region.hpp"
#include "../fused/region_plan.hpp"
#include "../gpu/runtime.hpp"
#include "communicator.hpp"
#include "shareable_memory.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {

template <int MaxRanks = max_ranks>
class plan_memory {
 public:
  plan_memory(communicator<MaxRanks>& comm, fused::region_plan& plan, std::string owner)
      : comm_(&comm), plan_(&plan), owner_(std::move(owner)) {
    if (plan.placed())
      throw error(errc::invalid_argument, "plan_memory(\"" + owner_ + "\"): the plan is already placed");
    // At least one alignment unit: a plan of slots only still gets a registrable allocation.
    bytes_ = plan.bytes() > 0 ? plan.bytes() : fused::region_plan::alignment;
    data_ = shareable_malloc(bytes_);
    try {
      gpu::memset_zero(data_, bytes_);
      comm.register_buffer(data_, bytes_);
      registered_ = true;
      unlink_when_mapped(data_);  // every peer has mapped it: no /dev/shm name left (host backend)
      if (plan.slots() > 0) {
        block_ = comm.reserve_tile_slots(plan.slots() - 1, owner_);
        reserved_ = true;
      }
      plan.place(block_, bytes_, 0);
    } catch (...) {
      release();
      throw;
    }
  }
  plan_memory(const plan_memory&) = delete;
  plan_memory& operator=(const plan_memory&) = delete;
  ~plan_memory() {
    try {
      comm_->barrier();  // no rank frees its bytes while a peer may still read them
      gpu::device_synchronize();
    } catch (...) {  // an unusable communicator: free anyway
    }
    release();
  }

  // Every rank's allocation and the communicator's pads, as seen from this rank: regions of the plan
  // are offsets into it (kernels narrow it with core::region_table, or pass it to the region
  // constructors of tile_allreduce / combine).
  template <class T>
  core::peer_table<T, MaxRanks> table() const {
    return comm_->buffer_handle(static_cast<const T*>(data_), bytes_ / sizeof(T));
  }
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  core::tile_slots slots() const { return block_; }
  const fused::region_plan& plan() const { return *plan_; }

 private:
  void release() noexcept {
    if (plan_->placed()) plan_->unplace();
    if (reserved_) {
      try {
        comm_->release_tile_slots(block_, owner_);
      } catch (...) {
      }
      reserved_ = false;
    }
    if (registered_) {
      try {
        comm_->unregister_buffer(data_);
      } catch (...) {
      }
      registered_ = false;
    }
    if (data_) {
      try {
        shareable_free(data_);
      } catch (...) {
      }
      data_ = nullptr;
    }
  }

  communicator<MaxRanks>* comm_;
  fused::region_plan* plan_;
  std::string owner_;
  std::size_t bytes_ = 0;
  void* data_ = nullptr;
  bool registered_ = false;
  bool reserved_ = false;
  core::tile_slots block_{0, -1};
};

}  // namespace host
RCCLX_NAMESPACE_END
