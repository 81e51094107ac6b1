// tests/checks/call_runs.hpp: tile AllReduce calls with one misuse each, run on emulated ranks with
// RCCLX_CHECKS=1 (call_runs.cpp, without Catch2: see tile_runs.hpp), for call_checks_test.cpp.
#pragma once

#include <rcclx/core/error.hpp>
#include <rcclx/core/region.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace call_checks {

inline constexpr float sentinel = -12345.0f;
inline constexpr int ranks = 3;
inline constexpr std::size_t guard_bytes = 4096;

enum class algo_kind { flat, tree };

// One call of every rank: each block writes its tiles (element value (rank + 1) / 2 + tile), publishes
// them and reduces them into its rank's output (row t = tile t), then calls finish(). The fields
// below bend it into a misuse; the defaults are a correct call.
struct call_args {
  algo_kind algo = algo_kind::flat;
  bool use_region = false;
  rcclx::core::region region{};     // with use_region
  rcclx::core::tile_slots slots{0, 16};  // without
  std::size_t tile_elems = 64;
  int num_tiles = 8;
  std::size_t capacity = 0;         // the tables' capacity_bytes (0: the setup's buffer bytes)
  int null_rank = -1;               // this rank's data pointer is null in every table
  int misaligned_rank = -1;         // this rank's data pointer is 4 bytes off in every table
  bool tables_of_rank0 = false;     // every rank runs with rank 0's table
  int publish_stride = 0;           // grid-stride of the publish loop (0: the grid)
  int reduce_stride = 0;            // of the reduce loop
  int reduce_shift = 0;             // tile t is reduced by block (t + shift) % blocks
  int skip_reduce_tile = -1;        // this tile is not reduced
  bool publish_twice = false;
  bool publish_past_end = false;    // also publishes tile num_tiles
  int reduce_first_rank = -1;       // this rank's blocks reduce each tile before publishing it
  int finish_blocks = -1;           // finish(g, this) (-1: the grid)
  // The epilogue: 0 fused::epilogue<store>; 1 a store with a check() of its own (fused/stage_check.hpp)
  // into the output; 2 the same store into this rank's symmetric input; 3 the same with columns
  // other than the map's; 4 a functor of the test (no check()) that stores the sums into the tile's
  // own symmetric input, ar.input(t).
  int epilogue = 0;
  int store_rank = -1, store_tile = -1;  // this rank's block adds 1000 to input(tile)[0] after publishing it
};

struct call_result {
  std::vector<rcclx::core::error_record> errors;  // every rank's record
  std::vector<std::vector<float>> out;            // every rank's output (num_tiles * tile_elems + 64)
  bool guard_intact = true;                       // the 4 KiB after every rank's buffer
  bool pads_intact = true;                        // every pad word but the error records
};

// Two tile AllReduce calls in one kernel (flat, 8 tiles of 64 floats each): every block constructs
// both, then writes, publishes and reduces the tiles of the first, then of the second, and finishes
// both. Call c in region[c] (use_region) or in slots[c] over the whole buffer.
struct two_args {
  bool use_region = false;
  rcclx::core::region region[2]{};
  rcclx::core::tile_slots slots[2]{{0, 8}, {10, 8}};
};
struct two_result {
  std::vector<rcclx::core::error_record> errors;
  std::vector<std::vector<float>> out[2];  // [call][rank]: 8 * 64 floats + 64
};

// A fused::combine (argmax, tree) of 64 records in tiles of 16 in `region` (rank r's record i:
// value (7 i + 3 r) % 11, index 10 i + r). Returns every rank's error record and its 64 results
// (value, index) as pairs of words (sentinel bits where not written).
struct combine_result {
  std::vector<rcclx::core::error_record> errors;
  std::vector<std::vector<std::uint32_t>> out;  // [rank][2 * 64 + 16]
};

// Three emulated ranks, 4 blocks per rank on the host (8 on GPUs), pads of 40 slots, buffers of
// `buffer_bytes` each followed by a 4 KiB guard, waits bounded at 0.5 s.
class call_setup {
 public:
  explicit call_setup(std::size_t buffer_bytes);
  ~call_setup();
  call_setup(const call_setup&) = delete;
  call_setup& operator=(const call_setup&) = delete;

  void reset(std::uint32_t value = 0);
  call_result run(const call_args& a);
  two_result run_two(const two_args& a);
  combine_result run_combine(const rcclx::core::region& region);
  int blocks() const;
  std::size_t buffer_bytes() const;
  int max_blocks() const;
  // The world's recorded errors with the audit of the last calls (emulated_world::describe_errors).
  std::string described_errors(rcclx::errc* code) const;

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

// The expected output of a correct call: row t = sum over ranks of (rank + 1) / 2 + t, in float64.
std::vector<double> reference(int num_tiles, std::size_t tile_elems);

}  // namespace call_checks
