// The misuse suite: what a kernel author plausibly gets wrong when fusing collectives into their
// own kernel (docs/fusion.md's rules broken one at a time), each on emulated ranks with a 0.5 s wait
// bound and guard bytes around every buffer. Built with RCCLX_CHECKS=1, every misuse must end in a
// named rcclx::error (its code, the misuse recorded with both values, or the audit's words), no
// byte written outside a buffer, nothing written where the fault was knowable before the output,
// and a correct call on the same world after reset(). The correct-usage controls (a GEMV ->
// AllReduce -> residual -> RMSNorm -> FP8 kernel and a split-KV attention merge, on the API
// without regions) must pass against float64 with every rank holding the same bits.
//
// Built without checks (rcclx_test_misuse_unchecked) the same runs show what the checked mode
// prevents: the count of silent corruptions is a pinned expectation.
#include <cstdio>
#include <string>
#include <vector>

#include "../support/catch.hpp"
#include "misuse_runs.hpp"

namespace {

using misuse_suite::outcome;
using misuse_suite::stage_abuse;
using misuse_suite::tile_abuse;
using rcclx::core::misuse;
using rcclx::errc;

#if RCCLX_CHECKS
// Does the text name value v (in decimal, or as the hex bits a float value is printed with)?
bool names_value(const std::string& what, std::uint32_t v) {
  char hex[16];
  std::snprintf(hex, sizeof(hex), "0x%08x", v);
  return what.find(std::to_string(v)) != std::string::npos || what.find(hex) != std::string::npos;
}

// Every misuse refused with `code`, recorded as `m` (both values in the text), no guard touched,
// a correct call after reset().
void require_named(const outcome& o, errc code, misuse m) {
  INFO("what(): " << o.what);
  REQUIRE(o.threw);
  CHECK(o.code == code);
  std::uint32_t a = 0, b = 0;
  REQUIRE(o.has(m, &a, &b));
  INFO("values " << a << ", " << b);
  CHECK(names_value(o.what, a));
  CHECK(names_value(o.what, b));
  CHECK(o.guards_intact);
  CHECK(o.outputs_corrupted == 0);
  INFO("after reset: " << o.after_reset_error);
  CHECK(o.after_reset_ok);
}
#endif

}  // namespace

#if RCCLX_CHECKS

TEST_CASE("misuse suite: correct usage passes (one call, two regions of one plan, a plain stage)", "[misuse]") {
  for (tile_abuse a : {tile_abuse::none, tile_abuse::two_regions}) {
    const outcome o = misuse_suite::run_tile_case(a);
    INFO(misuse_suite::name(a) << ": " << o.what);
    CHECK_FALSE(o.threw);
    CHECK(o.outputs_wrong == 0);
    CHECK(o.guards_intact);
    CHECK(o.after_reset_ok);
  }
  const outcome s = misuse_suite::run_stage_case(stage_abuse::none);
  INFO(s.what);
  CHECK_FALSE(s.threw);
  CHECK(s.outputs_wrong == 0);
  CHECK(s.guards_intact);
}

TEST_CASE("misuse suite: regions and arguments are refused on the device before any write", "[misuse]") {
  const struct {
    tile_abuse a;
    misuse m;
  } cases[] = {
      {tile_abuse::two_legacy_calls, misuse::region_overlap_bytes},
      {tile_abuse::overlapping_region_bytes, misuse::region_overlap_bytes},
      {tile_abuse::overlapping_region_slots, misuse::region_overlap_slots},
      {tile_abuse::tree_in_flat_region, misuse::region_too_small},
      {tile_abuse::too_many_tiles, misuse::arg_num_tiles},
      {tile_abuse::slots_beyond_pads, misuse::arg_slots},
      {tile_abuse::tile_elems_odd, misuse::arg_tile_elems},
      {tile_abuse::null_peer_buffer, misuse::arg_buffer},
      {tile_abuse::misaligned_peer_buffer, misuse::arg_buffer},
      {tile_abuse::region_past_buffer, misuse::region_outside_buffer},
      {tile_abuse::strided_step_zero, misuse::arg_step},
      {tile_abuse::parts_stride_zero, misuse::arg_step},
  };
  for (const auto& c : cases) {
    const outcome o = misuse_suite::run_tile_case(c.a);
    INFO(misuse_suite::name(c.a));
    require_named(o, errc::invalid_argument, c.m);
    // the call could be refused before any output: nothing was written
    CHECK(o.outputs_changed == 0);
  }
}

TEST_CASE("misuse suite: ranks that give one call different bytes are refused before any output", "[misuse]") {
  // Same slots, other bytes of the buffer on one rank: the call's fingerprint carries the region.
  for (tile_abuse a : {tile_abuse::region_per_rank, tile_abuse::whole_buffer_on_one_rank}) {
    const outcome o = misuse_suite::run_tile_case(a);
    INFO(misuse_suite::name(a) << ": " << o.what);
    REQUIRE(o.threw);
    CHECK(o.code == errc::mismatch);
    CHECK(o.what.find("different region") != std::string::npos);
    CHECK(o.guards_intact);
    CHECK(o.outputs_corrupted == 0);
    CHECK(o.outputs_changed == 0);
    INFO("after reset: " << o.after_reset_error);
    CHECK(o.after_reset_ok);
  }
}

TEST_CASE("misuse suite: the tile protocol broken by one block is named", "[misuse]") {
  const struct {
    tile_abuse a;
    misuse m, alt;  // alt: the other name the same fault may get, depending on timing
  } cases[] = {
      {tile_abuse::publish_twice, misuse::published_twice, misuse::published_twice},
      {tile_abuse::reduce_other_block, misuse::reducer_not_publisher, misuse::reduced_before_publish},
      {tile_abuse::reduce_before_publish, misuse::reduced_before_publish, misuse::reduced_before_publish},
      {tile_abuse::finish_count, misuse::finish_count, misuse::finish_count},
      {tile_abuse::finish_twice, misuse::finish_twice, misuse::finish_twice},
      {tile_abuse::table_of_rank0, misuse::wrong_rank_table, misuse::published_twice},
      {tile_abuse::epilogue_into_input, misuse::stage_writes_symmetric, misuse::stage_writes_symmetric},
  };
  for (const auto& c : cases) {
    const outcome o = misuse_suite::run_tile_case(c.a);
    INFO(misuse_suite::name(c.a));
    require_named(o, errc::invalid_argument, o.has(c.m) ? c.m : c.alt);
  }
}

TEST_CASE("misuse suite: the audit words name unpublished and unreduced tiles", "[misuse]") {
  const struct {
    tile_abuse a;
    misuse m;
    const char* words;
  } cases[] = {
      {tile_abuse::stale_stride, misuse::tile_not_published, "publish"},
      {tile_abuse::skip_reduce, misuse::tile_not_reduced, "reduc"},
  };
  for (const auto& c : cases) {
    const outcome o = misuse_suite::run_tile_case(c.a);
    INFO(misuse_suite::name(c.a) << ": " << o.what);
    REQUIRE(o.threw);
    CHECK(o.code == errc::invalid_argument);
    CHECK_THAT(o.what, RCCLX_CONTAINS(c.words));
    CHECK_THAT(o.what, RCCLX_CONTAINS("tile"));
    CHECK(o.guards_intact);
    CHECK(o.after_reset_ok);
  }
}

// A store into a tile's symmetric input after its publish (peers may be reading it): the tile's
// input hash taken at publish and again at the end of its reduce differs (input_changed).
TEST_CASE("misuse suite: a store into the input after publish is named", "[misuse]") {
  const outcome o = misuse_suite::run_tile_case(tile_abuse::store_after_publish);
  INFO(o.what);
  REQUIRE(o.threw);
  CHECK(o.code == errc::invalid_argument);
  std::uint32_t tile = 0, call = 0;
  REQUIRE(o.has(misuse::input_changed, &tile, &call));
  CHECK_THAT(o.what, RCCLX_CONTAINS("symmetric input of tile " + std::to_string(tile) + " changed"));
  CHECK(o.guards_intact);
  INFO("after reset: " << o.after_reset_error);
  CHECK(o.after_reset_ok);
}

TEST_CASE("misuse suite: bad epilogue stages are refused before any output", "[misuse]") {
  const struct {
    stage_abuse a;
    misuse m;
  } cases[] = {
      {stage_abuse::fp8_scale_zero, misuse::stage_scale},   {stage_abuse::fp8_scale_negative, misuse::stage_scale},
      {stage_abuse::fp8_scale_nan, misuse::stage_scale},    {stage_abuse::fp8_scale_inf, misuse::stage_scale},
      {stage_abuse::ld_short, misuse::stage_ld_short},      {stage_abuse::misaligned_out, misuse::stage_misaligned},
      {stage_abuse::rms_cols_padded, misuse::stage_cols},   {stage_abuse::eps_negative, misuse::stage_eps},
      {stage_abuse::rms_half_rows, misuse::stage_row_map},  {stage_abuse::map_tile_small, misuse::map_tile_too_large},
      {stage_abuse::residual_next_row, misuse::stage_aliases}, {stage_abuse::residual_null, misuse::stage_misaligned},
  };
  for (const auto& c : cases) {
    const outcome o = misuse_suite::run_stage_case(c.a);
    INFO(misuse_suite::name(c.a));
    require_named(o, errc::invalid_argument, c.m);
    CHECK(o.outputs_changed == 0);
  }
  // A row's 16 vectors in a group that holds fewer at once: on the host a block is one thread
  // (VecsPerThread 1 holds 1); a GPU block of 64 threads holds the whole row, and the call is right.
  const outcome o = misuse_suite::run_stage_case(stage_abuse::rms_row_split);
  INFO(misuse_suite::name(stage_abuse::rms_row_split) << ": " << o.what);
  if (rcclx::current_backend == rcclx::backend::host) {
    require_named(o, errc::invalid_argument, misuse::stage_row_split);
    CHECK(o.outputs_changed == 0);
  } else {
    CHECK_FALSE(o.threw);
    CHECK(o.outputs_wrong == 0);
  }
}

TEST_CASE("misuse suite: a combine whose ranks pass other records is refused before any output", "[misuse]") {
  using misuse_suite::combine_abuse;
  const auto good = misuse_suite::run_combine_case(combine_abuse::none);
  INFO(good.error);
  CHECK(good.error.empty());
  CHECK(good.wrong == 0);
  const struct {
    combine_abuse a;
    const char* field;
  } cases[] = {{combine_abuse::fewer_records, "called combine with different record count"},
               {combine_abuse::records_per_tile, "called combine with different records per tile"}};
  for (const auto& c : cases) {
    const auto r = misuse_suite::run_combine_case(c.a);
    INFO(misuse_suite::name(c.a) << ": " << r.error);
    CHECK_THAT(r.error, RCCLX_CONTAINS(c.field));
    CHECK(r.changed == 0);
  }
}

TEST_CASE("misuse suite: diagnostics say what was seen (reset, one binary)", "[misuse]") {
  {
    const outcome o = misuse_suite::run_tile_case(tile_abuse::not_reset);
    INFO(o.what);
    REQUIRE(o.threw);
    CHECK(o.code == errc::invalid_argument);
    CHECK_THAT(o.what, RCCLX_CONTAINS("reset"));
    CHECK(o.outputs_changed == 0);
    CHECK(o.after_reset_ok);
  }
  {
    const outcome o = misuse_suite::run_tile_case(tile_abuse::timeout_one_binary);
    INFO(o.what);
    REQUIRE(o.threw);
    CHECK(o.code == errc::timeout);
    CHECK_THAT(o.what, RCCLX_CONTAINS("rank 2"));
    CHECK_THAT(o.what, !RCCLX_CONTAINS("RCCLX_CHECKS"));
    CHECK(o.guards_intact);
    CHECK(o.after_reset_ok);
  }
}

#else  // the same runs without the checked mode: what it prevents

TEST_CASE("misuse suite without checks: the misuses corrupt silently", "[misuse]") {
  // The cases whose outcome without checks does not depend on timing (a null peer buffer would
  // crash, a tile reduced early or by another block may or may not see its input yet: left out).
  int silent = 0;
  for (tile_abuse a : {tile_abuse::two_legacy_calls, tile_abuse::overlapping_region_bytes, tile_abuse::tree_in_flat_region,
                       tile_abuse::too_many_tiles, tile_abuse::misaligned_peer_buffer, tile_abuse::stale_stride,
                       tile_abuse::skip_reduce, tile_abuse::epilogue_into_input}) {
    const outcome o = misuse_suite::run_tile_case(a);
    UNSCOPED_INFO(misuse_suite::name(a) << ": " << (o.silent_corruption() ? "silent corruption" : o.threw ? o.what : "correct"));
    silent += o.silent_corruption();
  }
  for (stage_abuse a : {stage_abuse::fp8_scale_zero, stage_abuse::ld_short, stage_abuse::misaligned_out,
                        stage_abuse::rms_cols_padded, stage_abuse::eps_negative, stage_abuse::rms_half_rows,
                        stage_abuse::map_tile_small, stage_abuse::residual_next_row}) {
    const outcome o = misuse_suite::run_stage_case(a);
    UNSCOPED_INFO(misuse_suite::name(a) << ": " << (o.silent_corruption() ? "silent corruption" : o.threw ? o.what : "correct"));
    silent += o.silent_corruption();
  }
  for (misuse_suite::combine_abuse a : {misuse_suite::combine_abuse::fewer_records, misuse_suite::combine_abuse::records_per_tile}) {
    const auto r = misuse_suite::run_combine_case(a);
    UNSCOPED_INFO(misuse_suite::name(a) << ": " << (r.error.empty() && r.wrong > 0 ? "silent corruption" : r.error));
    silent += r.error.empty() && r.wrong > 0;
  }
  // Every one gives wrong outputs or writes outside a buffer with no error; the checked build turns
  // each into a named error.
  CHECK(silent == 17);
}

#endif

TEST_CASE("misuse suite controls: GEMV -> AllReduce -> residual -> RMSNorm -> FP8 and a split-KV merge", "[misuse]") {
  for (int n : {2, 3, 5, 8})
    for (rcclx::algorithm algo : {rcclx::algorithm::flat, rcclx::algorithm::tree}) {
      for (bool bf16 : {true, false}) {
        const auto r = misuse_suite::run_gemv_rmsnorm_fp8(n, bf16, algo);
        INFO("GEMV kernel, " << n << " ranks, " << (bf16 ? "bf16" : "float") << ", "
                             << (algo == rcclx::algorithm::tree ? "tree" : "flat") << ": " << r.error
                             << " max |error| " << r.max_err);
        CHECK(r.error.empty());
        CHECK(r.checked > 0);
        CHECK(r.wrong == 0);
        CHECK(r.differ == 0);
      }
      const auto m = misuse_suite::run_split_kv_merge(n, algo);
      INFO("split-KV merge, " << n << " ranks: " << m.error << " max |error| " << m.max_err);
      CHECK(m.error.empty());
      CHECK(m.checked > 0);
      CHECK(m.wrong == 0);
      CHECK(m.differ == 0);
    }
}
