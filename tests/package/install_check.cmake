# cmake -DSRC=<rcclx source> -DWORK=<scratch dir> -DGENERATOR=<gen> -DCXX=<c++ compiler> -P install_check.cmake
# The path of a user without Catch2 and without GPU runtimes: a default configure of the source tree
# succeeds with Catch2 hidden, says the tests are skipped, looks for no HIP/CUDA runtime, installs;
# then a host consumer builds and runs against the installed package.
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC} -B ${WORK}/build -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX}
                        -DCMAKE_DISABLE_FIND_PACKAGE_Catch2=ON -DRCCLX_BUILD_EXAMPLES=OFF -DRCCLX_BUILD_BENCH=OFF
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configure without Catch2 failed:\n${out}\n${err}")
endif()
if(NOT out MATCHES "Catch2 not found, tests not built")
  message(FATAL_ERROR "configure without Catch2 did not say the tests are skipped:\n${out}")
endif()
if("${out}${err}" MATCHES "hip::|amdhip|rocprim|CUDA::|CUDAToolkit")
  message(FATAL_ERROR "a host configure looked for a GPU runtime:\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --install ${WORK}/build --prefix ${WORK}/prefix RESULT_VARIABLE rc
                OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "install without Catch2 failed")
endif()
execute_process(COMMAND ${CMAKE_CTEST_COMMAND} --build-and-test ${SRC}/tests/package/kernel_consumer ${WORK}/consumer
                        --build-generator ${GENERATOR}
                        --build-options -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_CXX_COMPILER=${CXX}
                        --test-command ${CMAKE_CTEST_COMMAND} --output-on-failure
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "host consumer against the installed package failed:\n${out}\n${err}")
endif()
message(STATUS "installed without Catch2; host consumer built and ran")
