// The signature check of a load (signing/) for an opened model: the files the load reads, one file
// or a sharded checkpoint's shards, each where the loader's source holds it. What every front end
// calls for `--signature` / options::signature_file / signature=.
#pragma once

#include "tz/engine/loader.hpp"
#include "tz/signing/model_signing.hpp"

#include <memory>
#include <string>

namespace tz {

// `input` is what the model was opened from (a file, a checkpoint's directory or index); `root` the
// signed model's directory ("" = the loaded files' directory, or the file alone when the signature
// covers one file). Set the result's observer() in the load's options and call finish() after it.
result<std::unique_ptr<signing::signed_load>> open_signed_load(const loader& l, const std::string& input,
                                                               const std::string& root, const std::string& signature,
                                                               const signing::trust& who);

}  // namespace tz
