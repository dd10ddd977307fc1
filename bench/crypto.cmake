# bench/crypto.cmake: secretbox_open throughput, 1 thread vs all hardware threads.
add_executable(crypto_bench ${CMAKE_CURRENT_SOURCE_DIR}/crypto_bench.cpp)
target_link_libraries(crypto_bench PRIVATE tz::crypto Threads::Threads)
tz_target_defaults(crypto_bench)
if(TZ_BUILD_TESTS)
  add_test(NAME crypto_bench_smoke COMMAND crypto_bench --smoke)
endif()
