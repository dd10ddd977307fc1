# tests/api.cmake: the installable package (api/): the C++ facade's doctest suite (api_test),
# the C ABI's C11 test program (c_api_test), the exported symbol set (api_exports), and an
# out-of-tree consumer built against `cmake --install` output (install_consumer). Skipped when the
# package is not built (TZ_BUILD_PACKAGE=OFF, fuzzing builds).
if(NOT TARGET tensorizer_shared)
  return()
endif()

# The models these tests read, written by the project's writers (tests/api_test_files.hpp).
set(tz_api_files_dir ${CMAKE_BINARY_DIR}/api_files)
add_executable(api_files ${CMAKE_CURRENT_LIST_DIR}/api_files.cpp)
target_link_libraries(api_files PRIVATE tensorizer::tensorizer tz::format tz::crypto tz::signing)
tz_target_defaults(api_files)
add_test(NAME api_files COMMAND api_files ${tz_api_files_dir})
set_tests_properties(api_files PROPERTIES FIXTURES_SETUP tz_api_files)

# tests/device_access.h on this build's CUDA runtime (libcudart, or none): how api_test and c_api_test
# read back the device memory the library hands out as addresses. The library on the CUDA emulation
# carries its own copy (tests/cuda_emulation.cmake). C++ without its runtime, so C programs link it.
add_library(tz_test_device_access STATIC ${CMAKE_CURRENT_LIST_DIR}/device_access.cpp)
target_include_directories(tz_test_device_access PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_compile_options(tz_test_device_access PRIVATE -fno-exceptions -fno-rtti)
if(TZ_HAVE_CUDA)
  target_link_libraries(tz_test_device_access PRIVATE CUDA::cudart)
  target_compile_definitions(tz_test_device_access PRIVATE TZ_HAVE_CUDA=1)
else()
  target_compile_definitions(tz_test_device_access PRIVATE TZ_HAVE_CUDA=0)
endif()
tz_target_defaults(tz_test_device_access)

# The suite links the engine's format writer too (static, its own copy): the library exports none of it.
# Its "http" suite needs nginx: the entry api_test_http in tests/net_cli.cmake runs it. Its "gpu" suite
# (device loads read back) runs as api_test_gpu, skipped (77) before any case runs without a GPU.
# Its sources serve api_emulated_test too (tests/cuda_emulation.cmake).
tz_add_doctest_objects(tz_api_test_objects SOURCES ${CMAKE_CURRENT_LIST_DIR}/api_test.cpp
                       LIBS tensorizer::tensorizer tz::format tz::crypto tz::signing tz_test_device_access)
tz_add_doctest(api_test SOURCES $<TARGET_OBJECTS:tz_api_test_objects>
               LIBS tensorizer::tensorizer tz::format tz::crypto tz::signing tz_test_device_access EXCLUDE http gpu)
add_test(NAME api_test_gpu COMMAND api_test --test-suite=gpu)
set_tests_properties(api_test_gpu PROPERTIES SKIP_RETURN_CODE 77)

add_executable(c_api_test ${CMAKE_CURRENT_LIST_DIR}/c_api_test.c)
set_target_properties(c_api_test PROPERTIES LINKER_LANGUAGE C)
target_link_libraries(c_api_test PRIVATE tensorizer::tensorizer tz_test_device_access)
target_compile_options(c_api_test PRIVATE -Wall -Wextra -Wpedantic -Werror)
add_test(NAME c_api_test COMMAND c_api_test ${tz_api_files_dir})
# Its device loads read back: skipped (77) up front without a GPU.
add_test(NAME c_api_test_gpu COMMAND c_api_test ${tz_api_files_dir} device)
set_tests_properties(c_api_test PROPERTIES FIXTURES_REQUIRED tz_api_files)
set_tests_properties(c_api_test_gpu PROPERTIES FIXTURES_REQUIRED tz_api_files SKIP_RETURN_CODE 77)

add_test(NAME api_exports COMMAND ${CMAKE_CURRENT_LIST_DIR}/api_exports.sh $<TARGET_FILE:tensorizer_shared>)
add_test(NAME install_consumer COMMAND ${CMAKE_CURRENT_LIST_DIR}/install_consumer.sh ${CMAKE_BINARY_DIR}
         ${CMAKE_SOURCE_DIR} ${tz_api_files_dir})
set_tests_properties(install_consumer PROPERTIES FIXTURES_REQUIRED tz_api_files)
