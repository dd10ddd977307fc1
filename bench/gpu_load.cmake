# gpu_load_bench: load_to_device (warm page cache and cold O_DIRECT) against the pinned H2D limit.
add_executable(gpu_load_bench ${CMAKE_CURRENT_SOURCE_DIR}/gpu_load_bench.cpp)
target_link_libraries(gpu_load_bench PRIVATE tz::engine tz::backends)
tz_target_defaults(gpu_load_bench)
if(TZ_BUILD_TESTS)
  add_test(NAME gpu_load_bench_smoke COMMAND gpu_load_bench --smoke)
  set_tests_properties(gpu_load_bench_smoke PROPERTIES SKIP_RETURN_CODE 77)
endif()

# c_load_bench: the C ABI's device load, first load and later ones in one process (bench/gpu_table.py).
if(TARGET tensorizer_shared)
  add_executable(c_load_bench ${CMAKE_CURRENT_SOURCE_DIR}/c_load_bench.c)
  target_link_libraries(c_load_bench PRIVATE tensorizer::tensorizer)
  target_compile_options(c_load_bench PRIVATE -Wall -Wextra -Werror)
endif()
