# tests/safetensors.cmake: the safetensors reader/writer suite. Two CTest entries from one executable:
# the self-contained cases, and the "python" suite that checks files against the python safetensors
# library (skipped, exit 77, when python3 with safetensors and torch is not importable).
add_executable(safetensors_test ${CMAKE_CURRENT_LIST_DIR}/safetensors_test.cpp ${CMAKE_CURRENT_LIST_DIR}/safetensors_python_test.cpp
               $<TARGET_OBJECTS:tz_doctest_main>)
target_link_libraries(safetensors_test PRIVATE doctest::doctest tz::format tz::crypto)
target_compile_definitions(safetensors_test PRIVATE TZ_ST_PYTHON_DIR="${CMAKE_CURRENT_LIST_DIR}/python")
tz_target_defaults(safetensors_test)
add_test(NAME safetensors_test COMMAND safetensors_test --test-suite-exclude=python)
add_test(NAME safetensors_test_python COMMAND safetensors_test --test-suite=python)
set_tests_properties(safetensors_test safetensors_test_python PROPERTIES SKIP_RETURN_CODE 77)
