# FP8 on gfx942 (MI300): the packed FNUZ codecs use the hardware conversions (v_cvt_pk_fp8_f32 /
# v_cvt_pk_bf8_f32 to encode, v_cvt_pk_f32_fp8 to decode); the bulk quantize combines a block's
# amax with ds_swizzle (no LDS round trip through ds_bpermute) and spills nothing to scratch.
# Negative control: forcing the software path must make the check fail.
rcclx_isa_test(isa_gfx942_fp8_hardware_codecs isa_fp8.cpp gfx942
  REQUIRE "v_cvt_pk_fp8_f32" "v_cvt_pk_bf8_f32" "v_cvt_pk_f32_fp8" "ds_swizzle_b32"
  FORBID "ScratchSize: [1-9]" "ds_bpermute_b32"
  NEGATIVE "RCCLX_FP8_FORCE_SOFTWARE=1")
