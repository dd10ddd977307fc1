// open_signed_load: the files a load of an opened model reads, for its signature check.
#include "tz/sources/signed_load.hpp"

#include <filesystem>

namespace tz {
namespace fs = std::filesystem;

result<std::unique_ptr<signing::signed_load>> open_signed_load(const loader& l, const std::string& input,
                                                               const std::string& root, const std::string& signature,
                                                               const signing::trust& who) {
  std::vector<signing::signed_load::loaded_file> loaded;
  if (l.shards().empty()) {
    loaded.push_back({input, 0});
  } else {
    // A shard is named as the index names it (beside the index) or by its path.
    std::error_code ec;
    const fs::path dir = fs::is_directory(input, ec) ? fs::path(input) : fs::path(input).parent_path();
    for (const auto& shard : l.shards()) {
      const fs::path named(shard.name);
      loaded.push_back({named.is_absolute() || fs::exists(named, ec) ? named : dir / named, shard.base});
    }
  }
  return signing::signed_load::open(loaded, root, signature, who);
}

}  // namespace tz
