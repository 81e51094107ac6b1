# cmake -P isa_check.cmake: compile device code for one AMD target with clang (device only, no GPU
# libraries), then read its assembly.
#   -DCLANG=clang++-19 -DARCH=gfx942 -DSRC=file.cpp -DINCLUDE=dir -DOUT=file.s [-DDEFS="A=1;B"]
#   -DREQUIRE="regex;..."   every regex must match the assembly
#   -DFORBID="regex;..."    no regex may match
#   -DEXPECT=pass|fail      fail: the check itself must fail (a negative control proving it can)
include(${CMAKE_CURRENT_LIST_DIR}/check_common.cmake)
check_arguments(isa_check CLANG ARCH SRC INCLUDE OUT)
check_defs(def_flags)
execute_process(
  COMMAND ${CLANG} -x hip -std=c++17 --offload-arch=${ARCH} -nogpulib --offload-device-only -O3 -S
          -I${INCLUDE} ${def_flags} ${SRC} -o ${OUT}
  RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "isa_check: ${CLANG} failed for ${ARCH}:\n${err}")
endif()
file(READ ${OUT} isa)
check_text(isa_check "${isa}" "assembly: ${OUT}")
