# cmake -P ptxas_check.cmake: compile device code for one NVIDIA target with nvcc to a cubin, then
# read ptxas's report (-Xptxas -v) of every kernel.
#   -DNVCC=nvcc -DARCH=sm_90 -DSRC=file.cu -DINCLUDE=dir -DOUT=file.cubin [-DDEFS="A=1;B"]
#   -DREQUIRE="regex;..."   every regex must match the report
#   -DFORBID="regex;..."    no regex may match
#   -DEXPECT=pass|fail      fail: the check itself must fail (a negative control proving it can)
include(${CMAKE_CURRENT_LIST_DIR}/check_common.cmake)
check_arguments(ptxas_check NVCC ARCH SRC INCLUDE OUT)
check_defs(def_flags)
execute_process(
  COMMAND ${NVCC} -std=c++17 -arch=${ARCH} -cubin -O3 -DNDEBUG --expt-relaxed-constexpr -Xptxas -v
          -I${INCLUDE} ${def_flags} -x cu ${SRC} -o ${OUT}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE report)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ptxas_check: ${NVCC} failed for ${ARCH}:\n${report}")
endif()
check_text(ptxas_check "${report}" "ptxas:\n${report}")
