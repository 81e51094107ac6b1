// The exchanges of a communicator's ranks through its shared-memory mailbox, in C++: the fast path
// of rcclx._exchange's _Mailbox (same slot layout, same crc, so a rank on this path and a rank on
// Python's read each other's slots). A call's exchange posts this rank's slot and polls the peers'
// for a short while without Python; a peer that is later than that, a payload larger than a slot,
// and every error (a peer that never arrives, or exited) go to Python's path, which waits with the
// communicator's timeout and names the rank.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace rcclx_torch {

// crc32 as zlib.crc32 computes it (IEEE 802.3, reflected), continued from `crc`.
inline std::uint32_t crc32(const void* data, std::size_t bytes, std::uint32_t crc = 0) {
  static const auto table = [] {
    std::vector<std::uint32_t> t(256);
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (std::size_t i = 0; i < bytes; ++i) crc = table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

// One communicator's mailbox as this rank sees it: attached by Python (StoreAllgather) once every
// rank has mapped the file; `seq` is the number of the next exchange, shared with Python's path.
// A slot of rank r for exchange k is at (2 r + k % 2) * slot_bytes: seq (u64, written last), length
// (u64), crc32 of seq and the payload (u32), 4 bytes of padding, the payload.
class native_mailbox {
 public:
  static constexpr std::size_t head_bytes = 24;

  void attach(std::uintptr_t base, int rank, int n, std::size_t slot_bytes) {
    base_ = reinterpret_cast<unsigned char*>(base);
    rank_ = rank;
    n_ = n;
    slot_ = slot_bytes;
    attached_.store(base != 0 && n > 1 && slot_bytes > head_bytes, std::memory_order_release);
  }
  void detach() { attached_.store(false, std::memory_order_release); }
  bool attached() const { return attached_.load(std::memory_order_acquire); }
  std::uint64_t seq = 0;

  // Posts this rank's payload for exchange `seq` (`bytes` at most slot_bytes - head_bytes) and puts
  // it at its place in `out` (every rank's payload, rank order).
  void post(const void* in, std::size_t bytes, void* out) {
    const std::uint64_t k = seq;
    unsigned char* mine = slot(rank_, k);
    const std::uint64_t size = bytes;
    const std::uint32_t crc = crc32(in, bytes, seq_crc(k));
    std::memcpy(mine + 8, &size, 8);
    std::memcpy(mine + 16, &crc, 4);
    std::memcpy(mine + head_bytes, in, bytes);
    __atomic_store_n(reinterpret_cast<std::uint64_t*>(mine), k, __ATOMIC_RELEASE);  // last: the slot is ready
    std::memcpy(static_cast<unsigned char*>(out) + static_cast<std::size_t>(rank_) * bytes, in, bytes);
  }

  // After post(): polls the peers' slots of exchange `seq` for up to `spin`; true with every peer's
  // payload in `out`, false when one has not arrived by then (this rank's slot stays posted).
  bool collect(std::size_t bytes, void* out, std::chrono::microseconds spin) const {
    const std::uint64_t k = seq;
    const std::uint32_t seed = seq_crc(k);
    auto* to = static_cast<unsigned char*>(out);
    std::uint64_t left = 0;
    for (int r = 0; r < n_; ++r)
      if (r != rank_) left |= std::uint64_t{1} << r;
    const auto until = std::chrono::steady_clock::now() + spin;
    for (unsigned polls = 1;; ++polls) {
      for (int r = 0; r < n_; ++r)
        if (((left >> r) & 1u) && take(r, k, seed, bytes, to + static_cast<std::size_t>(r) * bytes))
          left &= ~(std::uint64_t{1} << r);
      if (left == 0u) return true;
      if (polls % 64u == 0u) {
        if (std::chrono::steady_clock::now() >= until) return false;
        std::this_thread::yield();
      }
    }
  }
  // Does an exchange of `bytes` per rank go here (attached, and the payload fits in a slot)?
  bool takes(std::size_t bytes) const { return attached() && bytes + head_bytes <= slot_; }

 private:
  unsigned char* slot(int r, std::uint64_t k) const {
    return base_ + (2 * static_cast<std::size_t>(r) + static_cast<std::size_t>(k & 1u)) * slot_;
  }
  static std::uint32_t seq_crc(std::uint64_t k) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(k >> (8 * i));  // little-endian, as "<Q"
    return crc32(b, 8);
  }
  // Rank r's payload of exchange k when its slot holds it whole (seq, length and crc agree).
  bool take(int r, std::uint64_t k, std::uint32_t seed, std::size_t bytes, unsigned char* to) const {
    const unsigned char* s = slot(r, k);
    const auto* seqp = reinterpret_cast<const std::uint64_t*>(s);
    if (__atomic_load_n(seqp, __ATOMIC_ACQUIRE) != k) return false;
    std::uint64_t size;
    std::uint32_t crc;
    std::memcpy(&size, s + 8, 8);
    std::memcpy(&crc, s + 16, 4);
    if (size != bytes) return false;  // a torn read, or a payload through the store: Python's path
    std::memcpy(to, s + head_bytes, bytes);
    std::atomic_thread_fence(std::memory_order_acquire);
    return crc32(to, bytes, seed) == crc && __atomic_load_n(seqp, __ATOMIC_ACQUIRE) == k;
  }

  std::atomic<bool> attached_{false};
  unsigned char* base_ = nullptr;
  int rank_ = 0, n_ = 0;
  std::size_t slot_ = 0;
};

}  // namespace rcclx_torch
