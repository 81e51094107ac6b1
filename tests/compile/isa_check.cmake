# cmake -P isa_check.cmake: compile device code for one AMD target with clang (device only, no GPU
# libraries), then read its assembly.
#   -DCLANG=clang++-19 -DARCH=gfx942 -DSRC=file.cpp -DINCLUDE=dir -DOUT=file.s [-DDEFS="A=1;B"]
#   -DREQUIRE="regex;..."   every regex must match the assembly
#   -DFORBID="regex;..."    no regex may match
#   -DEXPECT=pass|fail      fail: the check itself must fail (a negative control proving it can)
foreach(v CLANG ARCH SRC INCLUDE OUT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "isa_check: ${v} is required")
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
  COMMAND ${CLANG} -x hip -std=c++17 --offload-arch=${ARCH} -nogpulib --offload-device-only -O3 -S
          -I${INCLUDE} ${def_flags} ${SRC} -o ${OUT}
  RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "isa_check: ${CLANG} failed for ${ARCH}:\n${err}")
endif()
file(READ ${OUT} isa)
set(problems)
foreach(re IN LISTS REQUIRE)
  if(NOT isa MATCHES "${re}")
    list(APPEND problems "missing: ${re}")
  endif()
endforeach()
foreach(re IN LISTS FORBID)
  if(isa MATCHES "${re}")
    list(APPEND problems "forbidden: ${re} (matched '${CMAKE_MATCH_0}')")
  endif()
endforeach()
list(LENGTH problems n)
if(EXPECT STREQUAL "pass" AND n GREATER 0)
  string(REPLACE ";" "\n  " text "${problems}")
  message(FATAL_ERROR "isa_check FAILED for ${SRC} on ${ARCH}:\n  ${text}\nassembly: ${OUT}")
elseif(EXPECT STREQUAL "fail" AND n EQUAL 0)
  message(FATAL_ERROR "isa_check negative control PASSED but should have failed: the check cannot detect "
                      "the defect it exists for (${SRC}, DEFS=${DEFS})")
endif()
message(STATUS "isa_check ${SRC} ${ARCH} (expect ${EXPECT}): ${n} problem(s) ${problems}")
