# cache_test: the node-local cache of remote objects (backends/cache.cpp) over in-memory sources.
tz_add_doctest(cache_test SOURCES cache_test.cpp LIBS tz::sources tz::backends)
