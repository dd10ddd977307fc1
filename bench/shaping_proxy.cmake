# bench/shaping_proxy.cmake: a TCP proxy adding latency and rate caps in front of nginx / RGW, so that
# loopback looks like a cloud link (see shaping_proxy.cpp; driven by bench/cloud_bench.sh).
add_executable(shaping_proxy ${CMAKE_CURRENT_LIST_DIR}/shaping_proxy.cpp)
target_link_libraries(shaping_proxy PRIVATE Boost::headers Threads::Threads)
tz_target_defaults(shaping_proxy)
