# cmake -P ptxas_check.cmake: compile device code for one NVIDIA target with nvcc to a cubin, then
# read ptxas's report (-Xptxas -v) of every kernel.
#   -DNVCC=nvcc -DARCH=sm_90 -DSRC=file.cu -DINCLUDE=dir -DOUT=file.cubin [-DDEFS="A=1;B"]
#   -DREQUIRE="regex;..."   every regex must match the report
#   -DFORBID="regex;..."    no regex may match
#   -DEXPECT=pass|fail      fail: the check itself must fail (a negative control proving it can)
foreach(v NVCC ARCH SRC INCLUDE OUT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "ptxas_check: ${v} is required")
  endif()
endforeach()
if(NOT DEFINED EXPECT)
  set(EXPECT pass)
endif()
set(def_flags)
foreach(d IN LISTS DEFS)
  list(APPEND def_flags "-D${d}")
endforeach()
execute_process(
  COMMAND ${NVCC} -std=c++17 -arch=${ARCH} -cubin -O3 -DNDEBUG --expt-relaxed-constexpr -Xptxas -v
          -I${INCLUDE} ${def_flags} -x cu ${SRC} -o ${OUT}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE report)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ptxas_check: ${NVCC} failed for ${ARCH}:\n${report}")
endif()
set(problems)
foreach(re IN LISTS REQUIRE)
  if(NOT report MATCHES "${re}")
    list(APPEND problems "missing: ${re}")
  endif()
endforeach()
foreach(re IN LISTS FORBID)
  if(report MATCHES "${re}")
    list(APPEND problems "forbidden: ${re} (matched '${CMAKE_MATCH_0}')")
  endif()
endforeach()
list(LENGTH problems n)
message(STATUS "ptxas_check ${SRC} ${ARCH} (expect ${EXPECT}): ${n} problem(s) ${problems}")
if(EXPECT STREQUAL "pass" AND n GREATER 0)
  string(REPLACE ";" "\n  " text "${problems}")
  message(FATAL_ERROR "ptxas_check FAILED for ${SRC} on ${ARCH}:\n  ${text}\nptxas:\n${report}")
elseif(EXPECT STREQUAL "fail" AND n EQUAL 0)
  message(FATAL_ERROR "ptxas_check negative control PASSED but should have failed: the check cannot detect "
                      "the defect it exists for (${SRC}, DEFS=${DEFS})")
endif()
