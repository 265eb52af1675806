# Run after a gtest binary is built (ddp_gtest_suites in tests/CMakeLists.txt): one ctest entry per test suite, named
# after it, that runs the suite's cases in one process (`--gtest_filter=Suite.*`). Every process that links LibTorch
# spends ~0.7 s of a core starting it; a ctest entry per case spent that ~1,900 times a CI run.
# Per case, tests/support/gtest_main.cpp keeps what ctest did: a deadline (DDP_TEST_CASE_TIMEOUT, the declared
# TIMEOUT), named when missed; a skipped case reports the entry skipped (exit 77).
# cmake -D TEST_BINARY=... -D OUT_FILE=... -D NAMES_DIR=... -D WORKING_DIR=... -D CASE_TIMEOUT=s -D LABELS=a,b
#       -P discover_suites.cmake
foreach(_var TEST_BINARY OUT_FILE NAMES_DIR WORKING_DIR CASE_TIMEOUT LABELS)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "discover_suites.cmake: -D ${_var}=... is missing")
  endif()
endforeach()

execute_process(COMMAND "${TEST_BINARY}" --gtest_list_tests WORKING_DIRECTORY "${WORKING_DIR}" TIMEOUT 60
                OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "discover_suites.cmake: '${TEST_BINARY} --gtest_list_tests' failed (${_rc}):\n${_out}${_err}")
endif()

# gtest lists "Suite." then its cases indented, a parameter's value after "  # " (which may hold ; [ ]).
string(REGEX REPLACE "  #[^\n]*" "" _out "${_out}")
string(REGEX REPLACE "[][;]" "_" _out "${_out}")
string(REPLACE "\n" ";" _lines "${_out}")
set(_suites)
foreach(_line IN LISTS _lines)
  if(_line MATCHES "^([A-Za-z0-9_/]+)\\.$")
    set(_suite ${CMAKE_MATCH_1})
    list(APPEND _suites ${_suite})
    set(_cases_${_suite} 0)
  elseif(_line MATCHES "^  [^ ]" AND DEFINED _suite)
    math(EXPR _cases_${_suite} "${_cases_${_suite}} + 1")
  endif()
endforeach()
if(NOT _suites)
  message(FATAL_ERROR "discover_suites.cmake: '${TEST_BINARY} --gtest_list_tests' listed no suite:\n${_out}")
endif()

string(REPLACE "," ";" _labels "${LABELS}")
file(MAKE_DIRECTORY "${NAMES_DIR}")
set(_text "# Written by tests/discover_suites.cmake from '${TEST_BINARY} --gtest_list_tests'.\n")
foreach(_suite IN LISTS _suites)
  # One name, one binary: a suite of the same name in another binary would be a second entry of that name.
  string(REPLACE "/" "%" _mark "${_suite}")
  set(_mark "${NAMES_DIR}/${_mark}")
  if(EXISTS "${_mark}")
    file(READ "${_mark}" _owner)
    if(NOT _owner STREQUAL TEST_BINARY)
      message(FATAL_ERROR "discover_suites.cmake: test suite '${_suite}' is in ${TEST_BINARY} and in ${_owner}: "
                          "rename one (a ctest entry per suite needs unique names; if ${_owner} no longer has it, "
                          "remove ${_mark})")
    endif()
  endif()
  file(WRITE "${_mark}" "${TEST_BINARY}")
  math(EXPR _timeout "${CASE_TIMEOUT} * ${_cases_${_suite}}")  # every case's deadline: only a hang in between
  string(APPEND _text
    "add_test([==[${_suite}]==] \"${TEST_BINARY}\" [==[--gtest_filter=${_suite}.*]==])\n"
    "set_tests_properties([==[${_suite}]==] PROPERTIES WORKING_DIRECTORY \"${WORKING_DIR}\" TIMEOUT ${_timeout} "
    "LABELS \"${_labels}\" SKIP_RETURN_CODE 77 "
    "ENVIRONMENT \"DDP_CHECK_HOOK_WAITS=1;DDP_TEST_CASE_TIMEOUT=${CASE_TIMEOUT}\")\n")
endforeach()
file(WRITE "${OUT_FILE}" "${_text}")
