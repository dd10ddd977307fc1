// Opening a model wherever and however it is stored: one .tensors or safetensors file, or a
// checkpoint split over safetensors shards (its index, a directory, a remote prefix, or the files).
#pragma once

#include "tz/backends/cache.hpp"
#include "tz/engine/loader.hpp"
#include "tz/sources/sources.hpp"

#include <span>
#include <string>

namespace tz {

struct checkpoint_options {
  remote_options remote;  // how http(s)://, s3:// and redis:// inputs are reached
  bool direct = false;    // O_DIRECT reads of local files (see file_options::direct)
};

// Opens `inputs` as one loader (a sharded checkpoint is one: loader::open_shards):
//   - one FILE or URI: that file (.tensors or safetensors), as loader::open;
//   - a `*.index.json` FILE or URI: the index, then the shards it names, beside it;
//   - a local directory: its model.safetensors.index.json (or its one *.safetensors.index.json),
//     else its *.safetensors files (in name order), else its one *.tensors file;
//   - an http(s):// or s3:// prefix ending in '/': PREFIX/model.safetensors.index.json;
//   - several FILEs or URIs: safetensors shards without an index (no tensor may be in two).
// Fails with errc::not_found naming what was looked for, errc::format for a bad index (naming the
// index) or shard (naming the shard), errc::invalid_argument for an index URI with a query
// string (its shards' URIs could not be formed) or no inputs, and as open_any does.
result<loader> open_checkpoint(scheduler& sched, std::span<const std::string> inputs, const checkpoint_options& options);

// What the node-local cache did for the model's source (tz::cache_status): for a sharded
// checkpoint, "NAME: STATUS" per cached shard, joined by "; ". Empty when nothing is cached.
std::string cache_status(const loader& l);

}  // namespace tz
