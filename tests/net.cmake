# tests/net.cmake: net_test (HTTP/HTTPS, S3, Redis byte sources) registered as one CTest entry per
# doctest suite, each needing its server through a CTest fixture that runs scripts/servers/*.sh.
# A suite whose server binary is absent exits 77 (skipped).
set(tz_net_dir ${CMAKE_BINARY_DIR}/net-servers)
# Ports derive from the build dir so two build trees can run their net tests at the same time.
string(MD5 tz_net_hash "${CMAKE_BINARY_DIR}")
string(SUBSTRING "${tz_net_hash}" 0 3 tz_net_hex)
math(EXPR tz_net_port_base "20000 + (0x${tz_net_hex} % 12) * 1000")
# Below the Linux ephemeral range (32768+); override with -DTZ_NET_PORT_BASE=N.
if(NOT DEFINED TZ_NET_PORT_BASE)
  set(TZ_NET_PORT_BASE ${tz_net_port_base})
endif()
set(tz_net_scripts ${CMAKE_CURRENT_LIST_DIR}/../scripts/servers)

add_executable(net_test ${CMAKE_CURRENT_LIST_DIR}/net_test.cpp ${CMAKE_CURRENT_LIST_DIR}/net_http_test.cpp ${CMAKE_CURRENT_LIST_DIR}/net_redis_test.cpp ${CMAKE_CURRENT_LIST_DIR}/net_s3_test.cpp ${CMAKE_CURRENT_LIST_DIR}/net_fault_test.cpp ${CMAKE_CURRENT_LIST_DIR}/net_test_support.hpp $<TARGET_OBJECTS:tz_doctest_main>)
target_link_libraries(net_test PRIVATE doctest::doctest tz::net)
target_compile_definitions(net_test PRIVATE TZ_NET_WORKDIR="${tz_net_dir}"
                           TZ_NET_SCRIPTS="${tz_net_scripts}" TZ_NET_PORT_BASE=${TZ_NET_PORT_BASE})
tz_target_defaults(net_test)

set(tz_net_env TZ_NET_WORKDIR=${tz_net_dir} TZ_NET_PORT_BASE=${TZ_NET_PORT_BASE})
foreach(server nginx redis rgw)
  add_test(NAME net_${server}_start COMMAND ${tz_net_scripts}/${server}.sh start ${tz_net_dir} ${TZ_NET_PORT_BASE})
  add_test(NAME net_${server}_stop COMMAND ${tz_net_scripts}/${server}.sh stop ${tz_net_dir} ${TZ_NET_PORT_BASE})
  set_tests_properties(net_${server}_start PROPERTIES FIXTURES_SETUP net_${server} SKIP_RETURN_CODE 77)
  set_tests_properties(net_${server}_stop PROPERTIES FIXTURES_CLEANUP net_${server})
endforeach()

# suite -> fixture it needs ("" = none)
foreach(pair "offline:" "faults:" "http:nginx" "redis:redis" "s3:rgw")
  string(REPLACE ":" ";" parts "${pair}")
  list(GET parts 0 suite)
  list(LENGTH parts n)
  add_test(NAME net_test_${suite} COMMAND net_test --test-suite=${suite})
  set_tests_properties(net_test_${suite} PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT "${tz_net_env}")
  if(n GREATER 1)
    list(GET parts 1 fixture)
    if(fixture)
      set_tests_properties(net_test_${suite} PROPERTIES FIXTURES_REQUIRED net_${fixture})
    endif()
  endif()
endforeach()

# Benchmark smoke run (bench/net_bench.cmake) on the file the http suite placed in nginx's root.
if(TARGET net_bench)
  math(EXPR tz_net_http_port "${TZ_NET_PORT_BASE} + 80")
  add_test(NAME net_bench_smoke COMMAND net_bench http://127.0.0.1:${tz_net_http_port}/data64.bin 2 1)
  set_tests_properties(net_bench_smoke PROPERTIES FIXTURES_REQUIRED net_nginx DEPENDS net_test_http)
endif()
