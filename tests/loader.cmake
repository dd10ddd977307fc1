# loader_test: plans, filtered/lazy/caller-memory loads, fault injection, stages; loader_test_reference
# reads the reference vectors, loader_test_reference_2121 the data version 5 files of tensorizer 2.12.1.
tz_add_doctest(loader_test SOURCES loader_test.cpp LIBS tz::engine tz::backends REFERENCE REFERENCE_2121)
# ready_test: tensors as they land (load_common_options::on_tensor_ready) from host loads.
tz_add_doctest(ready_test SOURCES ready_test.cpp LIBS tz::engine tz::backends)
