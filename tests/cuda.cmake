# cuda_test: the CUDA stage. The whole suite is skipped (77) without a GPU; cuda_test_host runs the
# cases that need none (parsing, DLPack host export, the no-GPU contract) everywhere.
tz_add_doctest(cuda_test SOURCES cuda_test.cpp LIBS tz::cuda)
add_test(NAME cuda_test_host COMMAND cuda_test --test-suite=host)
