# engine_test: scheduler, lease ring, io_uring file source and the fault-injecting memory source.
tz_add_doctest(engine_test SOURCES engine_test.cpp LIBS tz::engine tz::backends)
