// verify_zip_records: every record of a torch.save archive against the CRC-32 its zip directory stores.
// LibTorch 1.13 reads records with miniz's CRC checks compiled out, so a flipped bit would load silently.
#include <zip.h>

#include <memory>
#include <string>
#include <vector>

#include "ddp/errors.h"
#include "train/checkpoint/torch_format.h"

namespace ddp::train::detail {
namespace {

std::string zip_error_text(int code) {
  zip_error_t e;
  zip_error_init_with_code(&e, code);
  std::string text = zip_error_strerror(&e);
  zip_error_fini(&e);
  return text;
}

struct ArchiveCloser {
  void operator()(zip_t* z) const { zip_discard(z); }
};

}  // namespace

void verify_zip_records(const std::string& path) {
  int code = 0;
  std::unique_ptr<zip_t, ArchiveCloser> archive(zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code));
  if (!archive)
    throw Error(path + ": not a readable torch.save file (truncated or corrupt?): libzip finds its zip structure " +
                "damaged (" + zip_error_text(code) + "): an interrupted copy, or a disk or transfer error");
  const zip_int64_t n = zip_get_num_entries(archive.get(), 0);
  std::vector<char> buffer(1 << 20);
  for (zip_int64_t i = 0; i < n; ++i) {
    zip_stat_t st;
    zip_stat_init(&st);
    const std::string name = zip_stat_index(archive.get(), i, 0, &st) == 0 && (st.valid & ZIP_STAT_NAME)
                                 ? std::string(st.name)
                                 : "#" + std::to_string(i);
    // A record marked as a folder (the DOS attribute bit, or a name ending in '/') is read as empty by
    // LibTorch 2.x's reader, which then hands back uninitialized bytes: torch.save never writes one.
    zip_uint8_t opsys = 0;
    zip_uint32_t attributes = 0;
    if ((zip_file_get_external_attributes(archive.get(), i, 0, &opsys, &attributes) == 0 && (attributes & 0x10)) ||
        (!name.empty() && name.back() == '/'))
      throw Error(path + ": corrupt checkpoint: its record '" + name + "' is marked as a folder, which torch.save " +
                  "never writes; the file changed after it was written (a disk, copy or transfer error)");
    zip_file_t* file = zip_fopen_index(archive.get(), i, 0);
    if (!file)
      throw Error(path + ": corrupt checkpoint: cannot open its record '" + name + "': " + zip_strerror(archive.get()));
    std::string failure;
    for (;;) {
      const zip_int64_t got = zip_fread(file, buffer.data(), buffer.size());
      if (got == 0) break;
      if (got < 0) {
        failure = zip_file_strerror(file);
        break;
      }
    }
    const int closed = zip_fclose(file);
    if (failure.empty() && closed != 0) failure = zip_error_text(closed);
    if (!failure.empty())
      throw Error(path + ": corrupt checkpoint: record '" + name + "' (" + std::to_string(st.size) +
                  " bytes) fails its check: " + failure + "; the file changed after it was written (a disk, " +
                  "copy or transfer error) and cannot be trusted");
  }
}

}  // namespace ddp::train::detail
