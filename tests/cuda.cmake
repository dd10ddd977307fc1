# cuda_test: the CUDA stage's "gpu" suite, skipped (77) before any case runs without a GPU;
# cuda_test_host runs the cases that need none (parsing, DLPack host export, the no-GPU contract).
tz_add_doctest(cuda_test SOURCES cuda_test.cpp LIBS tz::cuda ONLY gpu)
add_test(NAME cuda_test_host COMMAND cuda_test --test-suite=host)
