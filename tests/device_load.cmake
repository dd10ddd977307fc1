# device_load_test: loads straight to GPU memory. Suite "host" (planning, dtypes) runs everywhere as
# device_load_test_host; device_load_test (suite "gpu") and device_load_test_reference (the cases
# reading the reference vectors) exit 77 (skipped) before any case runs without a GPU.
# Its sources serve device_load_emulated_test too (tests/cuda_emulation.cmake).
tz_add_doctest_objects(tz_device_load_test_objects SOURCES device_load_test.cpp LIBS tz::engine tz::backends)
tz_add_doctest(device_load_test SOURCES $<TARGET_OBJECTS:tz_device_load_test_objects> LIBS tz::engine tz::backends REFERENCE ONLY gpu)
add_test(NAME device_load_test_host COMMAND device_load_test --test-suite=host)
