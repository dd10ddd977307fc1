// Sequential tensor walk over the synchronous reader (the CLI's reference path).
#include "tensor_walk.hpp"

#include <vector>

namespace tz::cli {

result<void> walk_tensors(const format::file_reader& reader, const walk_options& options, const tensor_visitor& visit) {
  const auto& index = reader.index();
  TZ_CHECK(format::check_decryption_mode(index.header, options.decryption != nullptr, index.source));
  std::vector<std::byte> data;
  for (std::size_t i = 0; i < index.tensors.size(); ++i) {
    const auto& e = index.tensors[i];
    TZ_TRY(header, reader.read_header(i));
    data.resize(e.data_length);  // bounded by the file size (checked by parse_index)
    TZ_CHECK(reader.read_data(i, data));
    if (options.decryption) TZ_CHECK(format::decrypt_tensor(header, data, *options.decryption, index.source));
    if (options.verify) TZ_CHECK(format::verify_tensor(header, data, index.source));
    TZ_CHECK(visit(i, e, header, data));
  }
  return {};
}

}  // namespace tz::cli
