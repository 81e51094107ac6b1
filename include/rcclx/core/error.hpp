// rcclx/core/error.hpp: the one host-side error type, and the device-side error record that a
// kernel writes into its signal pad when a bounded wait expires.
//
//   try { comm.allreduce(...); } catch (const rcclx::error& e) { e.code(); e.what(); }
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
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
  check = 6,  // checked mode (RCCLX_CHECKS): a peer's call fingerprint (core/call_check.hpp) never came
};

inline const char* to_string(barrier_kind k) {
  switch (k) {
    case barrier_kind::start: return "start";
    case barrier_kind::mid: return "mid";
    case barrier_kind::end: return "end";
    case barrier_kind::tile: return "tile";
    case barrier_kind::ll: return "LL packet";
    case barrier_kind::check: return "call check";
  }
  return "unknown";
}

// Written by the first thread whose bounded wait expired (or whose check failed); `code` doubles
// as the "set" word (0 = no error), claimed with a compare-and-swap so the first failure wins.
//   timeout:  kind = barrier_kind, call = the flag awaited, observed = the flag seen
//   mismatch: kind = 0: a launch that disagrees with a device-side table (observed = which check);
//             kind = (collective << 8) | call_field (core/call_check.hpp): a peer passed other
//             arguments; missing_rank = that peer, observed = its value, reserved = this rank's
//   invalid_argument: kind = misuse (core/call_check.hpp), observed and reserved its two values
struct error_record {
  std::uint32_t code;          // 0: none; otherwise static_cast<uint32_t>(errc)
  std::uint32_t waiting_rank;  // the rank that waited (that recorded)
  std::uint32_t missing_rank;  // the peer whose flag never arrived (whose arguments differ)
  std::uint32_t kind;          // barrier_kind (timeout), field (mismatch), misuse (invalid_argument)
  std::uint32_t block;         // block index of the barrier (the tile of a tile wait)
  std::uint32_t call;          // barrier call number on that block (the counter value awaited)
  std::uint32_t observed;      // the flag value seen at expiry; the peer's value
  std::uint32_t reserved;      // this rank's value (mismatch, invalid_argument)
};
static_assert(sizeof(error_record) == 32, "error_record layout is shared with peers' hosts");

// What the checked mode compares (error_record::kind of a mismatch: (collective << 8) | field).
enum class call_field : std::uint32_t {
  collective = 1,    // which collective (AllReduce, tile AllReduce)
  element_type = 2,  // T
  op = 3,            // reduce_op
  algorithm = 4,     // flat / tree (as resolved)
  count = 5,         // elements (low 32 bits) / tiles of a tile AllReduce
  blocks = 6,        // blocks per rank (grid)
  shape = 7,         // threads per block / elements per tile
  map_tiles = 8,     // a tile map's tile count
  map_tile_rows = 9,
  map_tile_cols = 10,
  map_cols = 11,     // the output's columns
};

// Misuse the checked mode detects on one rank (error_record::kind of an invalid_argument record).
enum class misuse : std::uint32_t {
  missing_finish = 1,     // a tile AllReduce call whose blocks did not all call finish()
  map_vector_width = 2,   // a tile map's columns are not whole 16-byte vectors
  map_tile_too_large = 3,  // a tile map's tile holds more elements than the tile (a tile_map's: fewer, too)
  map_too_many_tiles = 4,  // a tile map has more tiles than the call
  // A call's arguments, checked on the device in checked builds (the host check() throws the same
  // text). (observed, reserved) = (a, b) below; block = the tile (or the first slot).
  arg_tile_elems = 5,          // (tile_elems, vector width in elements): not whole 16-byte vectors
  arg_num_tiles = 6,           // (num_tiles, max_tiles of the slot range)
  arg_slots = 7,               // (end of the slot range, slots the pads hold)
  arg_buffer = 8,              // (rank, 0 null | 1 misaligned): a table's buffer pointer
  region_outside_buffer = 9,   // (region end, buffer capacity)
  region_too_small = 10,       // (bytes the resolved algorithm needs, region bytes); call = sized_for << 8 | algo
  region_overlap_bytes = 11,   // (the other call's region id / first slot, this call's): bytes shared
  region_overlap_slots = 12,   // (the other call's first slot, this call's first slot): pad slots shared
  tile_out_of_range = 13,      // (tile, num_tiles)
  published_twice = 14,        // (first publishing block, second)
  reducer_not_publisher = 15,  // (publishing block, reducing block) under tile_reducer::same_block
  reduced_before_publish = 16, // (tile, reducing block): this rank's own tile not yet published
  input_changed = 17,          // (tile, call): the symmetric input changed while peers could read it
  tile_not_published = 18,     // (tile, call): the call finished without publishing the tile
  tile_not_reduced = 19,       // (tile, call): the call finished without reducing the tile
  finish_count = 20,           // (num_blocks passed to finish, blocks of the grid)
  finish_twice = 21,           // (arrivals, num_blocks)
  stage_misaligned = 22,       // (address low bits, alignment needed); call = stage_id << 8 | index
  stage_ld_short = 23,         // (ld, columns)
  stage_scale = 24,            // (the scale's float bits, 0)
  stage_cols = 25,             // (the stage's columns, the map's columns)
  stage_writes_symmetric = 26, // (offset into the symmetric buffer, rank)
  stage_eps = 27,              // (epsilon's float bits, 0)
  wrong_rank_table = 28,       // (the table's rank, the launch's rank)
  arg_step = 29,               // (the step passed, first tile): a strided publish or wait's step is not positive, or reduce_parts' stride is 0
  stage_row_split = 30,        // (vectors of the row, vectors the group holds at once: VecsPerThread x threads)
  stage_row_map = 31,          // (tile rows, tiles per output row): a row-wide stage on tiles that are not one whole row
  stage_aliases = 32,          // (bytes between a stage's input and output rows, bytes of the rows read)
};

// What the host knows about where a record came from, for describe(): one_binary: every rank is
// this program (emulated ranks, or a communicator whose set-up compared the checked setting), so a
// call-check timeout cannot mean "built without RCCLX_CHECKS"; one_launch: all ranks ran in this
// launch (emulated), so a rank that never published ran with another table or slot range.
struct describe_context {
  bool one_binary = false;
  bool one_launch = false;
};

namespace detail {
// A pointer as errors print it ("0x7f..."; host code).
inline std::string pointer_text(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}

inline const char* collective_name(std::uint32_t c) {
  switch (c) {
    case 1: return "AllReduce";
    case 2: return "tile AllReduce";
    case 3: return "Broadcast";
    case 4: return "Reduce";
    case 5: return "combine";
  }
  return "a collective";
}
inline const char* field_name(std::uint32_t collective, std::uint32_t f) {
  const bool tiles = collective == 2, records = collective == 5;
  switch (static_cast<call_field>(f)) {
    case call_field::collective: return "collective";
    case call_field::element_type: return records ? "record type" : "element type";
    case call_field::op: return records ? "combine op" : "reduce op";
    case call_field::algorithm: return "algorithm";
    case call_field::count: return tiles ? "tile count" : records ? "record count (low 32 bits)" : "count (elements, low 32 bits)";
    case call_field::blocks:
      return tiles || records ? "region (a 16-bit digest of its byte offset and size)" : "blocks per rank";
    case call_field::shape:
      return tiles ? "elements per tile" : records ? "records per tile" : collective == 3 || collective == 4 ? "root" : "threads per block";
    case call_field::map_tiles: return "tile map's tile count";
    case call_field::map_tile_rows: return "tile map's tile rows";
    case call_field::map_tile_cols: return "tile map's tile columns";
    case call_field::map_cols: return "tile map's output columns";
  }
  return "argument";
}
// A combine op's identity on the wire (fused::combine: the built-ins' check_id, else a digest).
inline std::string combine_op_name(std::uint32_t v) {
  switch (v) {
    case 1: return "lse_merge";
    case 2: return "argmax";
    case 3: return "topk";
    case 4: return "softmax_stats";
  }
  return "a combine of your own (digest " + std::to_string(v) + ")";
}
inline std::string field_value(std::uint32_t f, std::uint32_t v, std::uint32_t collective = 0) {
  if (collective == 5 && static_cast<call_field>(f) == call_field::op) return combine_op_name(v);
  switch (static_cast<call_field>(f)) {
    case call_field::collective: return collective_name(v);
    case call_field::element_type:
      switch (v) {
        case 1: return "float";
        case 2: return "bf16";
        case 3: return "fp16";
        case 4: return "int32";
        case 5: return "float64";
        case 6: return "int64";
        case 7: return "int8";
        case 8: return "uint8";
        case 9: return "bool";
        default:
          return (v & 0x80u) ? "a type of " + std::to_string(v & 0x7Fu) + " bytes (modulo 128)" : std::to_string(v);
      }
    case call_field::op:
      return v == 0 ? "sum" : v == 1 ? "min" : v == 2 ? "max" : v == 3 ? "product" : v == 4 ? "avg"
             : v == 5 ? "premul_sum" : std::to_string(v);
    case call_field::algorithm: return v == 0 ? "flat" : v == 1 ? "tree" : std::to_string(v);
    default: return std::to_string(v);
  }
}
// A 32-bit field of a record that counts bytes: the device saturates larger values.
inline std::string bytes_value(std::uint32_t v) {
  return v == 0xFFFFFFFFu ? std::string("\u2265 4 GiB") : std::to_string(v);
}
inline std::string bytes_text(std::uint32_t v) {
  return v == 0xFFFFFFFFu ? std::string("\u2265 4 GiB") : std::to_string(v) + " bytes";
}
inline std::string float_bits(std::uint32_t bits) {
  float f;
  static_assert(sizeof(f) == sizeof(bits), "float is 32 bits");
  std::memcpy(&f, &bits, sizeof(f));
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g (bits 0x%08x)", static_cast<double>(f), bits);
  return buf;
}
inline const char* stage_name(std::uint32_t id) {
  switch (id) {
    case 1: return "residual_add";
    case 2: return "rms_norm";
    case 3: return "fp8_out";
    case 4: return "bias";
    case 5: return "swiglu_store";
    case 6: return "store";
    case 7: return "fp8_out_per_token";
    case 8: return "silu";
    case 9: return "gelu";
  }
  return "a user stage";
}
inline const char* algorithm_name(std::uint32_t a) { return a == 0 ? "flat" : a == 1 ? "tree" : "another algorithm"; }
inline const char* sized_for_name(std::uint32_t s) {
  return s == 1 ? "flat" : s == 2 ? "tree" : s == 3 ? "flat and tree" : "nothing known";
}

// describe() of an invalid_argument record: the misuse, its field and both values, and what was written.
inline std::string misuse_text(const error_record& r) {
  const std::string rank = "rank " + std::to_string(r.waiting_rank);
  const std::string a = std::to_string(r.observed), b = std::to_string(r.reserved);
  const std::string at = std::to_string(r.block);
  const std::string none = "; no output was written";
  const std::string stopped = "; this rank's call stopped there: outputs of tiles it reduced before may have been written, none after";
  const std::string stage = " (tile " + at + "): epilogue stage " + std::to_string(r.call & 0xFFu) + " (" +
                            stage_name(r.call >> 8) + ")";
  switch (static_cast<misuse>(r.kind)) {
    case misuse::missing_finish:
      return rank + ": the previous tile AllReduce call on these pad slots (from slot " + at +
             ") did not call finish() in every block, or is still running (two launches in flight on one slot "
             "range): its call counter stayed at call " + a +
             ", so its flags would pass this call's waits. Call finish(g, num_blocks) once per block and call, and "
             "give kernels that may run at once their own slots (fused::region_plan)" + none;
    case misuse::map_vector_width:
      return rank + " (tile " + at + "): the tile map's columns (" + a + ") are not a multiple of the vector width (" + b +
             " elements): a vector would straddle the edge of the output" + none;
    case misuse::map_tile_too_large:
      return rank + " (tile " + at + "): the tile map's tiles have " + a + " elements but the call's tiles hold " + b +
             (r.observed < r.reserved ? " (a tile_map's tile must fill the call's tile: the elements past it would land in "
                                        "the next tile's rows)"
                                      : "") +
             none;
    case misuse::map_too_many_tiles:
      return rank + " (tile " + at + "): the tile map has " + a + " tiles but the call has " + b + none;
    case misuse::arg_tile_elems:
      return rank + ": tile_elems = " + a + " is not a whole number of 16-byte vectors (a positive multiple of " + b +
             " elements)" + none;
    case misuse::arg_num_tiles:
      return rank + ": num_tiles = " + a + " is more than the slot range's max_tiles = " + b + " (tile_slots from slot " +
             at + ")" + none + " and no flag was raised";
    case misuse::arg_slots:
      return rank + ": the slot range from slot " + at + " ends at slot " + a + " but the pads hold " + b +
             " slots (max_blocks)" + none + " and no flag was raised";
    case misuse::arg_buffer:
      return rank + ": table.data[" + a + "] is " +
             (r.reserved == 0 ? "null" : "not 16-byte aligned (or the region's offset is not)") + none;
    case misuse::region_outside_buffer:
      return rank + ": the call's region (slots from " + at + ") ends " + bytes_text(r.observed) +
             " into the buffer but the buffer holds " + bytes_text(r.reserved) + " (capacity)" + none;
    case misuse::region_too_small:
      return rank + ": the call (slots from " + at + ") runs " + algorithm_name(r.call & 0xFFu) + " and needs " +
             bytes_text(r.observed) + " but its region has " + bytes_text(r.reserved) + " (sized for " +
             sized_for_name(r.call >> 8) + "): size the region with the class's need() for its algorithm" + none;
    case misuse::region_overlap_bytes:
      return rank + ": the call on slots from " + b + " shares buffer bytes with another call in flight (on slots "
             "from " + a + "): give each call its own region (fused::region_plan)" + none;
    case misuse::region_overlap_slots:
      return rank + ": the call on slots from " + b + " shares pad slots with another call in flight (on slots "
             "from " + a + "): give each call its own slots (fused::region_plan)" + none;
    case misuse::tile_out_of_range:
      return rank + ": tile " + a + " is outside [0, num_tiles = " + b + "); nothing was written for it";
    case misuse::published_twice:
      return rank + " (tile " + at + "): the tile was published by block " + a + " and again by block " + b +
             ": one block of one rank publishes a tile (a grid-stride constant or a table of another rank?)" + stopped;
    case misuse::reducer_not_publisher:
      return rank + " (tile " + at + "): the tile was published by block " + a + " but reduced by block " + b +
             " under tile_reducer::same_block (reduce it in its publishing block, or pass tile_reducer::any_block)" +
             stopped;
    case misuse::reduced_before_publish:
      return rank + ": block " + b + " reduced tile " + a + " before this rank published it" + stopped;
    case misuse::input_changed:
      return rank + ": the symmetric input of tile " + a + " changed in call " + b +
             " after it was published, while peers could read it (write a tile's input only before publish()); "
             "outputs of that call may be wrong";
    case misuse::tile_not_published:
      return rank + ": call " + b + " finished without publishing tile " + a +
             " (a grid-stride loop that skips tiles?): the peers' outputs of that tile were not written; found by "
             "the next call on these slots (refused before any output) or, on emulated ranks, after the launch";
    case misuse::tile_not_reduced:
      return rank + ": call " + b + " finished without reducing tile " + a +
             " (a grid-stride loop that skips tiles?): this rank's output of that tile was not written; found by "
             "the next call on these slots (refused before any output) or, on emulated ranks, after the launch";
    case misuse::finish_count:
      return rank + ": finish() was passed num_blocks = " + a + " but the grid has " + b +
             " blocks: the call counter would not advance once per call (found in finish(): the call's outputs were written)";
    case misuse::finish_twice:
      return rank + ": finish() arrived " + a + " times for num_blocks = " + b +
             " (called twice in a block?) (found in finish(): the call's outputs were written)";
    case misuse::stage_misaligned:
      if (r.observed == 0)  // (an aligned non-null pointer has low bits 0 but is not recorded)
        return rank + stage + ": a pointer it reads or writes is null (it needs a " + b + "-byte aligned address)" + none;
      return rank + stage + ": a pointer or leading dimension is misaligned (address low bits " + a + ", needs " + b +
             "-byte alignment)" + none;
    case misuse::stage_ld_short:
      return rank + stage + ": ld = " + a + " is less than the row's " + b + " columns" + none;
    case misuse::stage_scale:
      return rank + stage + ": scale = " + float_bits(r.observed) + " must be finite and > 0" + none;
    case misuse::stage_cols:
      return rank + stage + ": the stage's cols = " + a + " but the map's output has " + b +
             " columns (padded columns give the wrong RMS)" + none;
    case misuse::stage_writes_symmetric:
      return rank + stage + ": its output overlaps the symmetric buffer at offset " + bytes_value(r.observed) +
             " of rank " + b + ", which peers may still read in this call" + none;
    case misuse::stage_eps:
      return rank + stage + ": eps = " + float_bits(r.observed) + " must be finite and >= 0" + none;
    case misuse::wrong_rank_table:
      return rank + ": the kernel was given rank " + a + "'s table but runs as rank " + b +
             " (tables[0] on every rank?)" + none;
    case misuse::arg_step:
      return rank + " (tile " + at + "): a strided publish or wait (publish_strided, wait_inputs_strided, "
             "wait_results_strided) was passed step = " + std::to_string(static_cast<std::int32_t>(r.observed)) +
             " from tile " + b + ": the step must be positive (the grid's block count); reduce_parts with "
             "several parts needs a stride other than 0" + none;
    case misuse::stage_row_split:
      return rank + stage + ": the stage needs a whole row's sum, but the row has " + a +
             " vectors and the group holds " + b + " at once (VecsPerThread x threads): raise VecsPerThread or "
             "the group's threads, or split the row's sum yourself" + none;
    case misuse::stage_aliases:
      return rank + stage + ": it writes its rows " + a + " bytes from the rows it reads, within their " + b +
             " bytes: a block's stores would overwrite rows other blocks still read (pass the same pointer for an "
             "in-place update, or arrays apart)" + none;
    case misuse::stage_row_map:
      return rank + stage + ": the stage needs a whole row's sum, but the tile map's tiles are " + a +
             " rows high and " + b + " to an output row: a row-wide stage needs tiles of one whole row (tile_rows = 1, "
             "tile_cols >= cols, or row_tiles)" + none;
  }
  return rank + ": invalid argument (misuse " + std::to_string(r.kind) + ", values " + a + " and " + b + ")";
}

// describe() of a timeout record: what the flag said against the call awaited, and what that means.
inline std::string timeout_text(const error_record& r, const describe_context& ctx) {
  const bool check = r.kind == static_cast<std::uint32_t>(barrier_kind::check);
  const bool tile = r.kind == static_cast<std::uint32_t>(barrier_kind::tile);  // records the tile, not the block
  const std::string missing = "rank " + std::to_string(r.missing_rank);
  const std::string where = (tile ? "tile " : "block ") + std::to_string(r.block);
  const std::string call = std::to_string(r.call);
  std::string m = "rank " + std::to_string(r.waiting_rank) + " timed out in the " +
                  to_string(static_cast<barrier_kind>(r.kind)) + " barrier (" + where + ", call " + call +
                  ") waiting for " + missing + ": " + missing + "'s flag says call " + std::to_string(r.observed) +
                  ", this is call " + call + ": ";
  const auto d = static_cast<std::int32_t>(r.call - r.observed);
  if (r.observed == 0 && r.call != 0) {
    m += missing + " never published on these slots since the pads were reset";
    if (ctx.one_launch)
      m += check ? " (it ran in this launch, so it published no fingerprint for this call here: its blocks used another "
                   "table or slot range, or declared the tile map (declare_map) after their first publish)"
                 : " (it ran in this launch, so it skipped this publish: a publish loop or publish_strided that misses "
                   "the tile, or blocks that used another table or slot range)";
  } else if (d > 0) {
    m += missing + " never arrived at " + (tile ? where : "the barrier of " + where) + " of call " + call +
         (tile ? " (not launched, its grid skips the tile, or it made fewer calls)"
               : " (not launched, its grid has fewer blocks, or it made fewer calls)");
  } else if (d < 0) {
    m += missing + " is ahead: this rank's pads are behind (an earlier call failed here, finish() counts differ, "
         "or only some pads were reset): reset every rank's pads";
  } else {
    m += missing + " arrived as the wait expired (slower than the timeout)";
  }
  if (check && !ctx.one_binary)
    m += " (or was not built with RCCLX_CHECKS: every rank must use the same setting)";
  return m;
}
}  // namespace detail

inline std::string describe(const error_record& r, const describe_context& ctx = {}) {
  const std::string rank = "rank " + std::to_string(r.waiting_rank);
  if (r.code == static_cast<std::uint32_t>(errc::mismatch)) {
    if (r.kind == 0)
      return rank + " (block " + std::to_string(r.block) +
             "): the launch disagrees with the device-side peer table (check " + std::to_string(r.observed) +
             ": 1 = rank count, 2 = capacity, 3 = more blocks than the signal pads hold); nothing was touched";
    const std::uint32_t c = r.kind >> 8, f = r.kind & 0xFFu;
    return rank + " and rank " + std::to_string(r.missing_rank) + " called " + detail::collective_name(c) +
           " with different " + detail::field_name(c, f) + ": rank " + std::to_string(r.waiting_rank) + " passed " +
           detail::field_value(f, r.reserved, c) + ", rank " + std::to_string(r.missing_rank) + " passed " +
           detail::field_value(f, r.observed, c) + " (found by block " + std::to_string(r.block) +
           "); no output was written";
  }
  if (r.code == static_cast<std::uint32_t>(errc::invalid_argument)) return detail::misuse_text(r);
  return detail::timeout_text(r, ctx);
}

// Throws rcclx::error (the record's code) with describe(r, ctx) if the record holds an error.
inline void throw_if_error(const error_record& r, const describe_context& ctx = {}) {
  if (r.code != 0) throw error(static_cast<errc>(r.code), describe(r, ctx));
}

}  // namespace core
RCCLX_NAMESPACE_END
