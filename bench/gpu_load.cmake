# gpu_load_bench: load_to_device (warm page cache and cold O_DIRECT) against the pinned H2D limit.
add_executable(gpu_load_bench ${CMAKE_CURRENT_SOURCE_DIR}/gpu_load_bench.cpp)
target_link_libraries(gpu_load_bench PRIVATE tz::engine tz::backends)
tz_target_defaults(gpu_load_bench)
if(TZ_BUILD_TESTS)
  add_test(NAME gpu_load_bench_smoke COMMAND gpu_load_bench --smoke)
  set_tests_properties(gpu_load_bench_smoke PROPERTIES SKIP_RETURN_CODE 77)
endif()
