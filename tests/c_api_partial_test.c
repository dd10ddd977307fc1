/* c_api_partial_test DIR: the C ABI's partial loads (tensorizer.h) from C11 against plain.tensors
 * and model.safetensors of tests/api_test_files.hpp: every rank's share of a partition, loaded
 * with tz_model_load_parts, rebuilds the whole model; a slice of "a" [2,3] equals torch.chunk's. */
#ifdef __cplusplus
#error "c_api_partial_test must be compiled as C"
#endif

#include <tensorizer.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_check.h"

/* Every rank's share of `world`, loaded into one flat buffer, equals the tensors loaded whole. */
static void partition_rebuilds_the_model(const char* file, unsigned world) {
  tz_model* m = NULL;
  CHECK(tz_model_open(file, NULL, &m) == TZ_OK);
  if (!m) return;
  size_t n = 0, need = 0;
  uint64_t total = 0, begin = 0, end = 0;
  CHECK(tz_model_plan_partition(m, world, 0, 0, NULL, NULL, 0, &need, NULL, NULL, &total) != TZ_OK || need == 0);
  unsigned char* flat = calloc(total ? total : 1, 1);
  uint64_t covered = 0;
  for (unsigned r = 0; r < world; ++r) {
    tz_tensor_part parts[16];
    uint64_t at[16];
    void* bufs[16];
    uint64_t read = 0;
    CHECK(tz_model_plan_partition(m, world, r, 0, parts, at, 16, &n, &begin, &end, &total) == TZ_OK);
    for (size_t i = 0; i < n; ++i) bufs[i] = flat + at[i];
    CHECK(tz_model_load_parts(m, parts, bufs, n, &read, NULL) == TZ_OK);
    CHECK(read >= end - begin);
    covered += end - begin;
  }
  CHECK(covered == total);
  tz_host_tensors* whole = NULL;
  CHECK(tz_model_load(m, NULL, 0, &whole) == TZ_OK);
  uint64_t off = 0;
  for (size_t i = 0; whole && i < tz_host_tensors_count(whole); ++i) {
    void* data = NULL;
    uint64_t size = 0;
    CHECK(tz_host_tensors_data(whole, i, &data, &size) == TZ_OK);
    CHECK(off + size <= total && memcmp(flat + off, data, size) == 0);
    off += size;
  }
  CHECK(off == total);
  tz_host_tensors_free(whole);
  free(flat);
  tz_model_free(m);
}

/* "a" [2,3] = 0..5 as float32: columns [2, 3) (torch.chunk(a, 2, 1)[1]) are 2 and 5. */
static void column_slice_reads_its_elements(const char* file) {
  tz_model* m = NULL;
  CHECK(tz_model_open(file, NULL, &m) == TZ_OK);
  if (!m) return;
  size_t a = 0, n = 0;
  uint64_t begin = 0, end = 0;
  CHECK(tz_model_find(m, "a", &a) == TZ_OK);
  tz_chunk_bounds(3, 2, 1, &begin, &end);
  CHECK(begin == 2 && end == 3);
  tz_tensor_part parts[4];
  uint64_t at[4];
  CHECK(tz_model_plan_slice(m, a, 1, begin, end, parts, at, 4, &n) == TZ_OK);
  CHECK(n == 2);
  float got[2] = {-1, -1};
  void* bufs[4];
  for (size_t i = 0; i < n && i < 4; ++i) bufs[i] = (unsigned char*)got + at[i];
  CHECK(tz_model_load_parts(m, parts, bufs, n, NULL, NULL) == TZ_OK);
  CHECK(got[0] == 2.0f && got[1] == 5.0f);
  CHECK(tz_model_plan_slice(m, a, 2, 0, 1, parts, at, 4, &n) == TZ_ERR_INVALID_ARGUMENT);
  tz_model_free(m);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: c_api_partial_test DIR\n");
    return 2;
  }
  char file[4200];
  const char* names[] = {"plain.tensors", "model.safetensors"};
  for (int f = 0; f < 2; ++f) {
    snprintf(file, sizeof file, "%s/%s", argv[1], names[f]);
    for (unsigned world = 1; world <= 4; ++world) partition_rebuilds_the_model(file, world);
    column_slice_reads_its_elements(file);
  }
  if (failures) fprintf(stderr, "c_api_partial_test: %d failures\n", failures);
  return failures ? 1 : 0;
}
