// The error every data reader throws when a file is missing, truncated or
// corrupt. The message names the file, the byte offset and what was expected,
// and says what to do:
//
//   try {
//     auto train = ddp::data::load_mnist_format(dir, /*train=*/true);
//   } catch (const ddp::data::DataError& e) {
//     std::cerr << e.what() << "\n";   // "/d/train-images-idx3-ubyte.gz: truncated at byte 1234 ..."
//   }
//
// Bad arguments (a negative padding, a rank out of range) are ddp::InvalidArgument instead.
#pragma once
#include "ddp/errors.h"

namespace ddp::data {

// A data file is missing, truncated or corrupt. Message names the file, the byte offset and what was expected.
class DataError : public ddp::Error {
 public:
  using ddp::Error::Error;
};

}  // namespace ddp::data
