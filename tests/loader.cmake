# loader_test: plans, filtered/lazy/caller-memory loads, fault injection, stages; loader_test_reference
# reads the reference vectors.
tz_add_doctest(loader_test SOURCES loader_test.cpp LIBS tz::engine tz::backends REFERENCE)
