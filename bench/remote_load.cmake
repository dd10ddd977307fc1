# bench/remote_load.cmake: the loader over HTTP / S3 / Redis vs raw clients and the real tensorizer
# (see remote_load_bench.cpp; the driver bench/remote_load_bench.sh prepares the servers and the file).
pkg_check_modules(TZ_BENCH_HIREDIS REQUIRED IMPORTED_TARGET hiredis)
add_executable(remote_load_bench ${CMAKE_CURRENT_LIST_DIR}/remote_load_bench.cpp)
target_link_libraries(remote_load_bench PRIVATE tz::net tz::engine tz::backends PkgConfig::TZ_BENCH_HIREDIS)
tz_target_defaults(remote_load_bench)
