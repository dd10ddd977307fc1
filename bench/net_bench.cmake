# bench/net_bench.cmake: HTTP range source vs curl on the same server (see net_bench.cpp).
add_executable(net_bench ${CMAKE_CURRENT_LIST_DIR}/net_bench.cpp)
target_link_libraries(net_bench PRIVATE tz::net)
tz_target_defaults(net_bench)
# Its CI smoke run (tiny parameters) is registered in tests/net.cmake, next to the nginx fixture.
