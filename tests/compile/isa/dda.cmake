# gfx942 ISA of the DDA AllReduce (included by tests/compile/CMakeLists.txt).
# 1. The whole flat kernel (copy, barriers, reduction): 16-byte vector loads and stores
#    (global_load_dwordx4 / global_store_dwordx4) and no scratch (private) memory: no spills, peer
#    pointers and the peer batch stay in registers. Negative control: the same kernel with the peers'
#    pointers also kept in an array indexed at run time (isa_dda.cpp, RCCLX_ISA_SCRATCH_CONTROL), in
#    scratch, which the check must see.
rcclx_isa_test(isa_gfx942_dda_flat_vectors_no_scratch isa_dda.cpp gfx942
  REQUIRE "global_load_dwordx4" "global_store_dwordx4" "private_segment_fixed_size: 0\n"
  FORBID "scratch_load" "scratch_store"
  NEGATIVE "RCCLX_ISA_SCRATCH_CONTROL=1")

# 2. The reduction step alone (its loads are the only 16-byte loads there): the 8 peers' loads are
#    issued back to back with no s_waitcnt between them, 8 x 16 bytes in flight per thread.
#    Negative control: batches of 4 peers put a wait between the two halves, and the check must fail.
set(_line_not_wait "(\t[^s\n][^\n]*\n|\ts[^_\n][^\n]*\n|\ts_[^w\n][^\n]*\n|[^\t\n][^\n]*\n|\n)*")
set(_load "\tglobal_load_dwordx4[^\n]*\n")
string(REPEAT "${_load}${_line_not_wait}" 7 _first_seven)
rcclx_isa_test(isa_gfx942_dda_eight_peer_loads_in_flight isa_dda_reduce.cpp gfx942
  REQUIRE "${_first_seven}${_load}" "global_store_dwordx4"
  FORBID "scratch_load" "scratch_store"
  NEGATIVE "RCCLX_DETAIL_PEER_BATCH=4")

# 3. The LL one-shot: packets stored and loaded as 64-bit words at system scope (sc0 sc1), no
#    acquire (no buffer_inv: the flag travels with the data), no scratch. Negative control: flags at
#    agent scope lose sc0, and the check must fail.
rcclx_isa_test(isa_gfx942_dda_ll_packets_no_acquire isa_dda_ll.cpp gfx942
  REQUIRE "global_load_dwordx2[^\n]*sc0 sc1" "global_store_dwordx2[^\n]*sc0 sc1" "private_segment_fixed_size: 0\n"
  FORBID "buffer_inv" "scratch_load" "scratch_store"
  NEGATIVE "RCCLX_DETAIL_HIP_FLAG_SCOPE=__HIP_MEMORY_SCOPE_AGENT")
