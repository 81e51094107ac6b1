# Shared by isa_check.cmake and ptxas_check.cmake (included, in cmake -P scripts): their arguments,
# the -D flags of DEFS, and the verdict on the compiler's text.
#   check_arguments(<name> <required variable>...)  fails naming any that is not set; EXPECT: pass
#   check_defs(<out>)                                 -D<def> for every entry of DEFS
#   check_text(<name> <text> <where>)                 every REQUIRE regex must match `text` and no
#       FORBID regex may; EXPECT=fail turns a clean text into the failure (a negative control that
#       cannot fail proves nothing). `where`: what a failure shows besides the problems.
macro(check_arguments name)
  foreach(v ${ARGN})
    if(NOT DEFINED ${v})
      message(FATAL_ERROR "${name}: ${v} is required")
    endif()
  endforeach()
  if(NOT DEFINED EXPECT)
    set(EXPECT pass)
  endif()
endmacro()

function(check_defs out)
  set(flags)
  foreach(d IN LISTS DEFS)
    list(APPEND flags "-D${d}")
  endforeach()
  set(${out} ${flags} PARENT_SCOPE)
endfunction()

function(check_text name text where)
  set(problems)
  foreach(re IN LISTS REQUIRE)
    if(NOT text MATCHES "${re}")
      list(APPEND problems "missing: ${re}")
    endif()
  endforeach()
  foreach(re IN LISTS FORBID)
    if(text MATCHES "${re}")
      list(APPEND problems "forbidden: ${re} (matched '${CMAKE_MATCH_0}')")
    endif()
  endforeach()
  list(LENGTH problems n)
  if(EXPECT STREQUAL "pass" AND n GREATER 0)
    string(REPLACE ";" "\n  " listed "${problems}")
    message(FATAL_ERROR "${name} FAILED for ${SRC} on ${ARCH}:\n  ${listed}\n${where}")
  elseif(EXPECT STREQUAL "fail" AND n EQUAL 0)
    message(FATAL_ERROR "${name} negative control PASSED but should have failed: the check cannot detect "
                        "the defect it exists for (${SRC}, DEFS=${DEFS})")
  endif()
  message(STATUS "${name} ${SRC} ${ARCH} (expect ${EXPECT}): ${n} problem(s) ${problems}")
endfunction()
