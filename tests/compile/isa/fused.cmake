# gfx942 ISA of the fused AllReduce + residual + RMSNorm (included by tests/compile/CMakeLists.txt).
# The flat and tree blocks: row flags stored with release at system scope (L2 write-back, then a
# store with sc0 sc1) and polled with acquire at system scope (sc0 sc1 load, then an invalidate);
# peers' rows read with 16-byte loads; no scratch loads or stores in either (the row, the preloaded
# residual and weight, the tree's row copies stay in registers); the flat block has no private
# segment at all. (The tree block reserves 48 bytes of stack in this device-only compile, where the
# ockl library functions stay external calls; nothing in it loads or stores scratch.) Negative control: flags
# at agent scope must make the check fail.
rcclx_isa_test(isa_gfx942_fused_rmsnorm_flags_and_vectors isa_fused.cpp gfx942
  REQUIRE "buffer_wbl2 sc0 sc1" "global_store_dword [^\n]* sc0 sc1" "global_load_dword [^\n]* sc0 sc1"
          "buffer_inv sc0 sc1" "global_load_dwordx4" "private_segment_fixed_size: 0\n"
  FORBID "scratch_load" "scratch_store" "[^0] sc1\n"
  NEGATIVE "RCCLX_DETAIL_HIP_FLAG_SCOPE=__HIP_MEMORY_SCOPE_AGENT")
