# tests/net_cli.cmake: the CLI and the loader over remote sources, against the servers of tests/net.cmake
# (its fixtures and port scheme): net_cli_test (C++ loader API, whole and filtered loads), net_cli.sh
# (synth, copy up/down, hash --json, load, sharded checkpoints, error messages, encrypted over HTTP) and
# tests/python/check_remote_cross.py (the real tensorizer reads what ours uploaded). Skips: exit 77.
add_executable(net_cli_test ${CMAKE_CURRENT_LIST_DIR}/net_cli_test.cpp $<TARGET_OBJECTS:tz_doctest_main>)
target_link_libraries(net_cli_test PRIVATE doctest::doctest tz::net tz::engine tz::backends)
target_compile_definitions(net_cli_test PRIVATE TZ_NET_WORKDIR="${tz_net_dir}" TZ_NET_SCRIPTS="${tz_net_scripts}"
                           TZ_NET_PORT_BASE=${TZ_NET_PORT_BASE} TZ_CLI="$<TARGET_FILE:tensorizer>")
tz_target_defaults(net_cli_test)
add_dependencies(net_cli_test tensorizer)

find_package(Python3 COMPONENTS Interpreter QUIET)
foreach(pair "http:nginx" "s3:rgw" "redis:redis")
  string(REPLACE ":" ";" parts "${pair}")
  list(GET parts 0 suite)
  list(GET parts 1 fixture)
  add_test(NAME net_cli_test_${suite} COMMAND net_cli_test --test-suite=${suite})
  add_test(NAME net_cli_sh_${suite} COMMAND ${CMAKE_CURRENT_LIST_DIR}/net_cli.sh ${suite} $<TARGET_FILE:tensorizer>)
  set(tests net_cli_test_${suite} net_cli_sh_${suite})
  if(Python3_FOUND)
    add_test(NAME net_cli_cross_${suite} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/python/check_remote_cross.py
             ${suite} $<TARGET_FILE:tensorizer>)
    list(APPEND tests net_cli_cross_${suite})
  endif()
  set_tests_properties(${tests} PROPERTIES SKIP_RETURN_CODE 77 FIXTURES_REQUIRED net_${fixture}
                       ENVIRONMENT "${tz_net_env};TZ_NET_SCRIPTS=${tz_net_scripts}")
endforeach()

# The node-local cache through the CLI against nginx and RGW (tests/net_cache.sh).
foreach(pair "http:nginx" "s3:rgw")
  string(REPLACE ":" ";" parts "${pair}")
  list(GET parts 0 suite)
  list(GET parts 1 fixture)
  add_test(NAME net_cache_${suite} COMMAND ${CMAKE_CURRENT_LIST_DIR}/net_cache.sh ${suite} $<TARGET_FILE:tensorizer>)
  set_tests_properties(net_cache_${suite} PROPERTIES SKIP_RETURN_CODE 77 FIXTURES_REQUIRED net_${fixture}
                       ENVIRONMENT "${tz_net_env};TZ_NET_SCRIPTS=${tz_net_scripts}")
endforeach()

# The public C++ API's cache options against nginx (tests/api_test.cpp, suite "http").
if(TARGET api_test)
  add_test(NAME api_test_http COMMAND api_test --test-suite=http)
  set_tests_properties(api_test_http PROPERTIES FIXTURES_REQUIRED net_nginx SKIP_RETURN_CODE 77
                       ENVIRONMENT "${tz_net_env};TZ_NET_SCRIPTS=${tz_net_scripts}")
endif()

# `load --device` over HTTP on the CUDA emulation (tests/cuda_emulation.cmake, tools/CMakeLists.txt).
if(TARGET tensorizer_emulated)
  add_test(NAME cli_device_emulated_http COMMAND ${CMAKE_CURRENT_LIST_DIR}/cli_device_emulated.sh http
           $<TARGET_FILE:tensorizer_emulated>)
  set_tests_properties(cli_device_emulated_http PROPERTIES FIXTURES_REQUIRED net_nginx SKIP_RETURN_CODE 77
                       ENVIRONMENT "${tz_net_env}")
endif()

# Benchmark smoke run (bench/remote_load.cmake) with tiny parameters, so it cannot rot.
if(TARGET remote_load_bench)
  add_test(NAME remote_load_bench_smoke
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/../bench/remote_load_bench.sh ${CMAKE_BINARY_DIR} 16 2 1 --no-peer)
  set_tests_properties(remote_load_bench_smoke PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT "${tz_net_env}"
                       FIXTURES_REQUIRED "net_nginx;net_redis;net_rgw")
endif()

# The cache benchmark (bench/cache_bench.py) at a smoke size: fill, hit and their references run.
if(Python3_FOUND)
  add_test(NAME cache_bench_smoke
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/../bench/cache_bench.py ${CMAKE_BINARY_DIR}
                   --size-mib 16 --runs 2)
  set_tests_properties(cache_bench_smoke PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT "${tz_net_env}"
                       FIXTURES_REQUIRED net_nginx)
endif()

# Name resolution is bounded too: a DNS server that never answers (tests/net_dns_timeout.sh).
add_test(NAME net_dns_timeout COMMAND ${CMAKE_CURRENT_LIST_DIR}/net_dns_timeout.sh $<TARGET_FILE:tensorizer>)
set_tests_properties(net_dns_timeout PROPERTIES SKIP_RETURN_CODE 77)
