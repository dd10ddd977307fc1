/* The README's C example, built against the installed package with pkg-config by
 * tests/install_consumer.sh: open a file, load every tensor, print each with its size. */
#include <tensorizer.h>

#include <stdio.h>

int main(int argc, char** argv) {
  tz_model* model = NULL;
  tz_host_tensors* loaded = NULL;
  size_t i;
  if (argc != 2) return fprintf(stderr, "usage: capp FILE|URI\n"), 2;
  if (tz_model_open(argv[1], NULL, &model) != TZ_OK) return fprintf(stderr, "%s\n", tz_last_error_message()), 1;
  if (tz_model_load(model, NULL, 0, &loaded) != TZ_OK) {
    fprintf(stderr, "%s\n", tz_last_error_message());
    tz_model_free(model);
    return 1;
  }
  for (i = 0; i < tz_host_tensors_count(loaded); ++i) {
    tz_tensor_info info;
    void* data;
    uint64_t size;
    tz_host_tensors_info(loaded, i, &info);
    tz_host_tensors_data(loaded, i, &data, &size);
    printf("%s %s %llu bytes\n", info.name, info.dtype, (unsigned long long)size);
  }
  tz_host_tensors_free(loaded);
  tz_model_free(model);
  return 0;
}
