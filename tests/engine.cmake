# engine_test: scheduler, lease ring, io_uring file source and the fault-injecting memory source.
tz_add_doctest(engine_test SOURCES engine_test.cpp LIBS tz::engine tz::backends)
if(TZ_SANITIZE AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(engine_test PRIVATE -Wno-maybe-uninitialized)  # GCC 12 false positives in variant2
endif()
if(TZ_SANITIZE STREQUAL "thread" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(engine_test PRIVATE -Wno-tsan)  # Asio's atomic_thread_fence: GCC 12 warns under TSan
endif()
