# cuda_bench: pinned vs pageable host->device copy bandwidth over tz::cuda::uploader.
add_executable(cuda_bench ${CMAKE_CURRENT_SOURCE_DIR}/cuda_bench.cpp)
target_link_libraries(cuda_bench PRIVATE tz::cuda)
tz_target_defaults(cuda_bench)
if(TZ_BUILD_TESTS)
  add_test(NAME cuda_bench_smoke COMMAND cuda_bench --smoke)
  set_tests_properties(cuda_bench_smoke PROPERTIES SKIP_RETURN_CODE 77)
endif()
