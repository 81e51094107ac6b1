# LPC AllReduce on gfx942 (MI300), included by tests/compile/CMakeLists.txt: the whole kernel
# (quantize, reduce-scatter with re-quantization, all-gather) converts with the hardware FP8
# instructions: v_cvt_pk_fp8_f32 to encode, v_cvt_pk_f32_fp8 to decode; the lanes of a block share
# its amax with ds_swizzle (no LDS round trip); 16-byte accesses; nothing spills to scratch.
# Negative control: forcing the software codec must make the check fail.
rcclx_isa_test(isa_gfx942_lpc_allreduce_hardware_fp8 isa_lpc.cpp gfx942
  REQUIRE "v_cvt_pk_fp8_f32" "v_cvt_pk_f32_fp8" "ds_swizzle_b32" "global_load_dwordx4" "global_store_dwordx4"
  FORBID "ScratchSize: [1-9]" "scratch_load" "scratch_store"
  NEGATIVE "RCCLX_FP8_FORCE_SOFTWARE=1")

# The reduce-scatter step alone: the 8 ranks' 16-byte code loads are issued back to back with no
# s_waitcnt between them (8 x 20 bytes in flight per lane, scales included). Negative control: batches
# of 4 ranks put a wait between the two halves, and the check must fail.
set(_lpc_line_not_wait "(\t[^s\n][^\n]*\n|\ts[^_\n][^\n]*\n|\ts_[^w\n][^\n]*\n|[^\t\n][^\n]*\n|\n)*")
set(_lpc_load "\tglobal_load_dwordx4[^\n]*\n")
string(REPEAT "${_lpc_load}${_lpc_line_not_wait}" 7 _lpc_first_seven)
rcclx_isa_test(isa_gfx942_lpc_eight_rank_loads_in_flight isa_lpc_reduce.cpp gfx942
  REQUIRE "${_lpc_first_seven}${_lpc_load}" "v_cvt_pk_f32_fp8"
  FORBID "scratch_load" "scratch_store"
  NEGATIVE "RCCLX_DETAIL_LPC_REDUCE_BATCH=4")
