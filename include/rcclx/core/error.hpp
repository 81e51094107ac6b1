// rcclx/core/error.hpp: the one host-side error type, and the device-side error record that a
// kernel writes into its signal pad when a bounded wait expires.
//
//   try { comm.allreduce(...); } catch (const rcclx::error& e) { e.code(); e.what(); }
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "../config.hpp"

RCCLX_NAMESPACE_BEGIN

enum class errc : int {
  ok = 0,
  invalid_argument,   // a value outside its documented range (names the argument and the limit)
  misaligned,         // a pointer or size not aligned as the algorithm needs
  unsupported,        // a type / op / rank count / size the algorithm does not support
  mismatch,           // ranks disagree on an argument that must be identical on all of them
  timeout,            // a bounded wait expired: a peer never arrived
  runtime,            // the HIP/CUDA runtime or the operating system reported an error
  peer_failure,       // a peer process died or reported an error
};

inline const char* to_string(errc c) {
  switch (c) {
    case errc::ok: return "ok";
    case errc::invalid_argument: return "invalid_argument";
    case errc::misaligned: return "misaligned";
    case errc::unsupported: return "unsupported";
    case errc::mismatch: return "mismatch";
    case errc::timeout: return "timeout";
    case errc::runtime: return "runtime";
    case errc::peer_failure: return "peer_failure";
  }
  return "unknown";
}

class error : public std::runtime_error {
 public:
  error(errc code, const std::string& message)
      : std::runtime_error(std::string("rcclx: ") + to_string(code) + ": " + message), code_(code) {}
  errc code() const noexcept { return code_; }

 private:
  errc code_;
};

namespace core {

// Kinds of barrier, recorded in error records so the host can say which one timed out.
enum class barrier_kind : std::uint32_t {
  start = 1,  // acquire: peers' inputs are ready to be read
  mid = 2,    // between phases (tree, LPC): release own partial results, acquire peers'
  end = 3,    // release: this rank has finished reading peers' buffers
  tile = 4,   // a per-tile flag of a fused epilogue
  ll = 5,     // LL packets (one-shot flat, fused two-shot): a peer's flagged packet (core/ll.hpp) never came
};

inline const char* to_string(barrier_kind k) {
  switch (k) {
    case barrier_kind::start: return "start";
    case barrier_kind::mid: return "mid";
    case barrier_kind::end: return "end";
    case barrier_kind::tile: return "tile";
    case barrier_kind::ll: return "LL packet";
  }
  return "unknown";
}

// Written by the first thread whose bounded wait expired; `code` doubles as the "set" word
// (0 = no error), claimed with a compare-and-swap so the first failure wins.
struct error_record {
  std::uint32_t code;          // 0: none; otherwise static_cast<uint32_t>(errc::timeout)
  std::uint32_t waiting_rank;  // the rank that waited
  std::uint32_t missing_rank;  // the peer whose flag never arrived
  std::uint32_t kind;          // barrier_kind
  std::uint32_t block;         // block index of the barrier
  std::uint32_t call;          // barrier call number on that block (the counter value awaited)
  std::uint32_t observed;      // the flag value seen at expiry
  std::uint32_t reserved;
};
static_assert(sizeof(error_record) == 32, "error_record layout is shared with peers' hosts");

inline std::string describe(const error_record& r) {
  if (r.code == static_cast<std::uint32_t>(errc::mismatch))
    return "rank " + std::to_string(r.waiting_rank) + " (block " + std::to_string(r.block) +
           "): the launch disagrees with the device-side peer table (check " + std::to_string(r.observed) +
           ": 1 = rank count, 2 = capacity, 3 = more blocks than the signal pads hold); nothing was touched";
  return "rank " + std::to_string(r.waiting_rank) + " timed out in the " +
         to_string(static_cast<barrier_kind>(r.kind)) + " barrier (block " + std::to_string(r.block) +
         ", call " + std::to_string(r.call) + ") waiting for rank " + std::to_string(r.missing_rank) +
         " (its flag read " + std::to_string(r.observed) + "): rank " + std::to_string(r.missing_rank) +
         " never arrived";
}

// Throws rcclx::error(timeout) naming the missing rank if the record holds an error.
inline void throw_if_error(const error_record& r) {
  if (r.code != 0) throw error(static_cast<errc>(r.code), describe(r));
}

}  // namespace core
RCCLX_NAMESPACE_END
