# load_bench: how close to the limit is a load? (raw pread references vs the engine, warm and cold)
add_executable(load_bench ${CMAKE_CURRENT_SOURCE_DIR}/load_bench.cpp)
target_link_libraries(load_bench PRIVATE tz::engine tz::backends)
tz_target_defaults(load_bench)
if(TZ_BUILD_TESTS)
  add_test(NAME load_bench_smoke COMMAND load_bench --smoke)
  # Its fixed-name temporary file is shared with charts_smoke (charts.cmake): one at a time.
  set_tests_properties(load_bench_smoke PROPERTIES RESOURCE_LOCK tz_load_bench_smoke_file)
endif()

# load_bench_uring: Asio random_access_file vs raw liburing per thread vs IOSQE_ASYNC (DESIGN.md).
add_executable(load_bench_uring ${CMAKE_CURRENT_SOURCE_DIR}/load_bench_uring.cpp)
target_link_libraries(load_bench_uring PRIVATE Boost::headers PkgConfig::URING Threads::Threads)
tz_target_defaults(load_bench_uring)
if(TZ_BUILD_TESTS)
  # Smoke: read its own executable.
  add_test(NAME load_bench_uring_smoke COMMAND load_bench_uring $<TARGET_FILE:load_bench_uring> 1)
endif()
