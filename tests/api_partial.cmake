# c_api_partial_test: the C ABI's partitions, slices and partial loads (api/c_api_partial.cpp), on the
# files of the tz_api_files fixture (tests/api.cmake).
if(NOT TARGET tensorizer_shared)
  return()
endif()
add_executable(c_api_partial_test ${CMAKE_CURRENT_LIST_DIR}/c_api_partial_test.c)
set_target_properties(c_api_partial_test PROPERTIES LINKER_LANGUAGE C)
target_link_libraries(c_api_partial_test PRIVATE tensorizer::tensorizer)
target_compile_options(c_api_partial_test PRIVATE -Wall -Wextra -Wpedantic -Werror)
add_test(NAME c_api_partial_test COMMAND c_api_partial_test ${CMAKE_BINARY_DIR}/api_files)
set_tests_properties(c_api_partial_test PROPERTIES FIXTURES_REQUIRED tz_api_files)
