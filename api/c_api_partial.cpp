// The C ABI's partial loads (tensorizer.h: tz_chunk_bounds, tz_model_plan_partition,
// tz_model_plan_slice, tz_model_load_parts, tz_model_load_parts_to_device) over the facade's.
#include "c_api.hpp"

namespace {

using tensorizer::errc;
using tz_c::fail;

tz_status too_small(const char* where, std::size_t need, std::size_t capacity) {
  return fail(tensorizer::error{errc::invalid_argument, std::string(where) + ": " + std::to_string(need) +
                                                            " parts do not fit a capacity of " + std::to_string(capacity)});
}

tz_tensor_part to_c(const tensorizer::tensor_part& p) { return {p.index, p.begin_bytes, p.length_bytes}; }

}  // namespace

extern "C" {

void tz_chunk_bounds(uint64_t size, uint64_t parts, uint64_t k, uint64_t* begin, uint64_t* end) {
  const auto [b, e] = tensorizer::chunk_bounds(size, parts, k);
  if (begin) *begin = b;
  if (end) *end = e;
}

tz_status tz_model_plan_partition(const tz_model* model, unsigned world, unsigned rank, int whole_tensors,
                                  tz_tensor_part* parts, uint64_t* flat_offsets, size_t capacity, size_t* count,
                                  uint64_t* begin, uint64_t* end, uint64_t* total) {
  TZ_C_REQUIRE(model && count && (capacity == 0 || parts), "tz_model_plan_partition");
  return tz_c::guarded("tz_model_plan_partition", [&] {
    if (rank >= world) return fail(errc::invalid_argument, "tz_model_plan_partition: rank out of range of world");
    auto plan = model->m.plan_partition(world, whole_tensors != 0);
    if (!plan) return fail(plan.error());
    const auto& mine = plan->parts[rank];
    *count = mine.size();
    if (begin) *begin = plan->begin[rank];
    if (end) *end = plan->begin[rank + 1];
    if (total) *total = plan->begin[world];
    if (mine.size() > capacity) return too_small("tz_model_plan_partition", mine.size(), capacity);
    for (std::size_t i = 0; i < mine.size(); ++i) {
      parts[i] = to_c(mine[i]);
      if (flat_offsets) flat_offsets[i] = plan->flat_offset[mine[i].index] + mine[i].begin_bytes;
    }
    return TZ_OK;
  });
}

tz_status tz_model_plan_slice(const tz_model* model, size_t index, unsigned dim, uint64_t start, uint64_t stop,
                              tz_tensor_part* parts, uint64_t* out_offsets, size_t capacity, size_t* count) {
  TZ_C_REQUIRE(model && count && (capacity == 0 || parts), "tz_model_plan_slice");
  return tz_c::guarded("tz_model_plan_slice", [&] {
    auto plan = model->m.plan_slice(index, dim, start, stop);
    if (!plan) return fail(plan.error());
    *count = plan->size();
    if (plan->size() > capacity) return too_small("tz_model_plan_slice", plan->size(), capacity);
    for (std::size_t i = 0; i < plan->size(); ++i) {
      parts[i] = to_c((*plan)[i].part);
      if (out_offsets) out_offsets[i] = (*plan)[i].out_offset_bytes;
    }
    return TZ_OK;
  });
}

tz_status tz_model_load_parts(const tz_model* model, const tz_tensor_part* parts, void* const* buffers, size_t count,
                              uint64_t* read_bytes, tz_timings* timings) {
  TZ_C_REQUIRE(model && (count == 0 || (parts && buffers)), "tz_model_load_parts");
  return tz_c::guarded("tz_model_load_parts", [&] {
    std::vector<tensorizer::part_destination> dst;
    for (std::size_t i = 0; i < count; ++i) {
      if (!buffers[i] && parts[i].length_bytes != 0)
        return fail(errc::invalid_argument, "tz_model_load_parts: a buffer is NULL");
      dst.push_back({{parts[i].index, parts[i].begin_bytes, parts[i].length_bytes},
                     {static_cast<std::byte*>(buffers[i]), static_cast<std::size_t>(parts[i].length_bytes)}});
    }
    auto got = model->m.load_parts(dst);
    if (!got) return fail(got.error());
    if (read_bytes) *read_bytes = got->read_bytes;
    tz_c::put_timings(got->timings, timings);
    return TZ_OK;
  });
}

tz_status tz_model_load_parts_to_device(const tz_model* model, int device, const tz_tensor_part* parts,
                                        void* const* device_buffers, size_t count, uint64_t* read_bytes,
                                        uint64_t* pinned_bytes, tz_timings* timings) {
  TZ_C_REQUIRE(model && (count == 0 || (parts && device_buffers)), "tz_model_load_parts_to_device");
  return tz_c::guarded("tz_model_load_parts_to_device", [&] {
    std::vector<tensorizer::device_part_destination> dst;
    for (std::size_t i = 0; i < count; ++i)
      dst.push_back({{parts[i].index, parts[i].begin_bytes, parts[i].length_bytes}, device_buffers[i]});
    auto got = model->m.load_parts_to_device(device, dst);
    if (!got) return fail(got.error());
    if (read_bytes) *read_bytes = got->read_bytes;
    if (pinned_bytes) *pinned_bytes = got->pinned_bytes;
    tz_c::put_timings(got->timings, timings);
    return TZ_OK;
  });
}

}  // extern "C"
