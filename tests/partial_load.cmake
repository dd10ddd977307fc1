# partial_load_test: partitions by bytes, partial and sliced loads (plain, encrypted), torch.chunk bounds.
tz_add_doctest(partial_load_test SOURCES partial_load_test.cpp LIBS tz::engine tz::backends)
