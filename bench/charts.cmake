# bench/charts.cmake: charts_smoke, the chart pipeline end to end: load_bench --smoke --json, then
# bench/charts.py on it must write a PNG (bench/charts_smoke.sh; skipped without matplotlib).
if(TZ_BUILD_TESTS)
  set(Python3_FIND_UNVERSIONED_NAMES FIRST)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  set(tz_charts_python python3)  # not found: fails at test time with the reason, not silently
  if(Python3_Interpreter_FOUND)
    set(tz_charts_python ${Python3_EXECUTABLE})
  endif()
  add_test(NAME charts_smoke
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/charts_smoke.sh $<TARGET_FILE:load_bench> ${tz_charts_python}
                   ${CMAKE_CURRENT_BINARY_DIR}/charts_smoke)
  # load_bench --smoke writes and removes one temporary file by a fixed name: the lock (shared with
  # load_bench_smoke, load.cmake) runs them one at a time.
  set_tests_properties(charts_smoke PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 RESOURCE_LOCK tz_load_bench_smoke_file)
endif()
