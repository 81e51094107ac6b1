# LPC AllReduce on gfx942 (MI300), included by tests/compile/CMakeLists.txt: the whole kernel
# (quantize, reduce-scatter with re-quantization, all-gather) converts with the hardware FP8
# instructions: v_cvt_pk_fp8_f32 to encode, v_cvt_pk_f32_fp8 to decode; the lanes of a block share
# its amax with ds_swizzle (no LDS round trip); 16-byte accesses; nothing spills to scratch.
# Negative control: forcing the software codec must make the check fail.
rcclx_isa_test(isa_gfx942_lpc_allreduce_hardware_fp8 isa_lpc.cpp gfx942
  REQUIRE "v_cvt_pk_fp8_f32" "v_cvt_pk_f32_fp8" "ds_swizzle_b32" "global_load_dwordx4" "global_store_dwordx4"
  FORBID "ScratchSize: [1-9]" "scratch_load" "scratch_store"
  NEGATIVE "RCCLX_FP8_FORCE_SOFTWARE=1")
