// tests/misuse/misuse_runs.hpp: the kernels and runs of the misuse suite, in a translation unit of
// their own (misuse_runs.cpp, without Catch2: nvcc's front end does not finish a unit that holds
// both Catch2 v3's headers and the checked tile AllReduce kernel; tests/checks does the same).
//
// Every run launches on emulated ranks of an emulated_world with a 0.5 s wait bound, with guard
// bytes around every output, after the symmetric buffer's bytes in use and in the pads' words no
// call of the run may touch, and reports what came back: the error thrown (if any), every rank's
// error record, whether a guard changed, how many outputs changed or are wrong against a float64
// reference, and whether a correct call on the same world after reset() gives the right values.
#pragma once

#include <rcclx/core/error.hpp>
#include <rcclx/core/ops.hpp>
#include <rcclx/core/types.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace misuse_suite {

inline constexpr float sentinel = -12345.0f;
inline constexpr std::uint64_t timeout_ns = 500ull * 1000 * 1000;  // 0.5 s: a refused call's peers wait that long

struct outcome {
  bool threw = false;
  rcclx::errc code{};
  std::string what;                                // the error's what()
  std::vector<rcclx::core::error_record> records;  // every rank's after the launch, with the audit of the last calls
  bool guards_intact = true;       // no byte changed outside the buffers the calls may write
  std::size_t outputs_changed = 0;  // output elements that differ from the sentinel
  std::size_t outputs_wrong = 0;    // output elements that differ from the float64 reference
  std::size_t outputs_corrupted = 0;  // ... of those, changed from the sentinel (written wrong)
  std::size_t outputs = 0;          // output elements the kernel meant to write
  bool after_reset_ok = false;      // a correct call on the same world after reset(): right values
  std::string after_reset_error;

  // A rank recorded misuse `m`; a and b: its two values (observed, reserved) of the first such record.
  bool has(rcclx::core::misuse m, std::uint32_t* a = nullptr, std::uint32_t* b = nullptr) const;
  // Silent corruption: no error, but outputs wrong or a guard changed.
  bool silent_corruption() const { return !threw && (outputs_wrong > 0 || !guards_intact); }
};

// Tile AllReduce misuses (3 ranks, 4 blocks per rank, 8 tiles of 64 floats, one row per tile).
enum class tile_abuse {
  none,                      // control: one correct call
  two_regions,               // control: two calls in one kernel, each on a region of one plan
  two_legacy_calls,          // two calls in one kernel on separate slot ranges of the same bytes
  overlapping_region_bytes,  // two hand-made regions sharing bytes
  overlapping_region_slots,  // two hand-made regions sharing pad slots
  tree_in_flat_region,       // a tree call in a region (and buffer) sized for flat, 4 KiB guard after it
  too_many_tiles,            // num_tiles above the slot range's max_tiles
  slots_beyond_pads,         // a slot range that ends past the pads
  tile_elems_odd,            // tile_elems not whole 16-byte vectors
  null_peer_buffer,          // rank 0's table has no buffer for rank 1
  misaligned_peer_buffer,    // rank 0's table has rank 1's buffer 4 bytes off
  publish_twice,             // a block publishes its tile twice
  reduce_other_block,        // tile t reduced by the block that published t + 1 (same_block)
  reduce_before_publish,     // block 0 reduces its tiles before it publishes them
  stale_stride,              // both loops step by 5 on a grid of 4 blocks: tile 4 never published
  skip_reduce,               // the reduce loop skips tile 1
  store_after_publish,       // a hand store into input(t) after publish(t)
  epilogue_into_input,       // the epilogue's store writes the sums into the symmetric input
  finish_count,              // finish(g, 3) on a grid of 4 blocks
  finish_twice,              // finish() twice per block
  table_of_rank0,            // tables[0] on every rank
  not_reset,                 // a correct call on pads that still hold an error (no reset)
  timeout_one_binary,        // a rank that never arrives: the timeout text, in one binary
  region_per_rank,           // rank 1 passes the call another region (same slots, other bytes)
  whole_buffer_on_one_rank,  // rank 1 uses the constructor without a region, the others a region
  region_past_buffer,        // a hand-made region that starts past the end of the buffer
  strided_step_zero,         // publish_strided(g, block, 0) after writing the block's tiles
  parts_stride_zero,         // reduce_parts(g, t, 2, 0, ...): the same slot as both parts
};
outcome run_tile_case(tile_abuse a);
const char* name(tile_abuse a);

// Epilogue stage misuses (3 ranks, 4 blocks, 8 rows of 64 floats).
enum class stage_abuse {
  none,                // control: store
  fp8_scale_zero,      // fp8_out with *scale = 0
  fp8_scale_negative,  // -1
  fp8_scale_nan,       // NaN
  fp8_scale_inf,       // +inf
  ld_short,            // store with ld = cols - 4
  misaligned_out,      // store to out + 1 (not 16-byte aligned)
  rms_cols_padded,     // rms_norm::cols = 72 on 64-column rows
  eps_negative,        // rms_norm::eps = -1
  rms_row_split,       // rms_norm with VecsPerThread 1 on the host (a block of one thread holds 1 of a row's 16 vectors)
  rms_half_rows,       // rms_norm on a tile_map of two half rows per tile
  map_tile_small,      // a tile_map of half rows (32 elements) on the call's 64-element tiles, a plain store
  residual_next_row,   // residual_add whose updated residual is the next row of the residual it reads
  residual_null,       // residual_add with a null residual
};
outcome run_stage_case(stage_abuse a);
const char* name(stage_abuse a);

// Correct-usage controls, against float64: every element within its bound (wrong = those outside),
// every rank the same bits (differ = elements that differ from rank 0's).
struct control_result {
  std::size_t checked = 0, wrong = 0, differ = 0;
  std::size_t changed = 0;  // outputs written (changed from their initial zeros), on any rank
  double max_err = 0;
  std::string error;  // an error thrown, if any
};
// A row-parallel GEMV -> tile AllReduce -> residual add -> RMSNorm -> FP8 e4m3 (the legacy API,
// one call per kernel), `n` ranks, bf16 or float, flat or tree.
control_result run_gemv_rmsnorm_fp8(int n, bool bf16, rcclx::algorithm algo);
// Split-KV decode attention's merge: combine<lse_merge<bf16, 64>> of every rank's partial outputs
// and log-sum-exps (some ranks without keys: L = -inf), the legacy API, `n` ranks, flat or tree.
control_result run_split_kv_merge(int n, rcclx::algorithm algo);

// The same merge with one rank's arguments changed (3 ranks, flat).
enum class combine_abuse {
  none,
  fewer_records,     // rank 1 passes one record less (the same tiles)
  records_per_tile,  // rank 1 passes 5 records per tile instead of 6 (6 tiles of the same bytes as 5 of 6)
};
control_result run_combine_case(combine_abuse a);
const char* name(combine_abuse a);

}  // namespace misuse_suite
