// JSON-lines metrics: exact text (escaping, doubles, null), Python's json
// reading every value back bit for bit, append/truncate, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

#include "ddp/dist/errors.h"
#include "ddp/train/metrics_log.h"
#include "train/test_files.h"

namespace ddp::train {
namespace {

using Fields = std::vector<std::pair<std::string, JsonlWriter::Value>>;
using test::read_file;
using test::TempDir;

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

std::string double_bits(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  std::string be;
  for (int i = 7; i >= 0; --i) be.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
  return hex(be);
}

TEST(JsonLine, ExactText) {
  EXPECT_EQ(to_json_line({}), "{}");
  EXPECT_EQ(to_json_line({{"epoch", int64_t{3}}, {"split", std::string("val")}, {"loss", 0.4213}, {"best", true}}),
            R"({"epoch":3,"split":"val","loss":0.4213,"best":true})");
  // Literals: a string literal stays a string, an int becomes int64.
  Fields f = {{"name", "run \"7\""}, {"n", 7}, {"off", false}};
  EXPECT_EQ(to_json_line(f), R"({"name":"run \"7\"","n":7,"off":false})");
  EXPECT_TRUE(std::holds_alternative<std::string>(f[0].second));
  EXPECT_TRUE(std::holds_alternative<int64_t>(f[1].second));
}

TEST(JsonLine, EscapesQuotesBackslashesAndControlCharacters) {
  std::string s = std::string("a\"b\\c/d\n\t\r\b\f") + '\x01' + '\x1f' + '\x7f' + std::string(1, '\0') + "e";
  EXPECT_EQ(to_json_line({{"k\"\n", s}}), "{\"k\\\"\\n\":\"a\\\"b\\\\c/d\\n\\t\\r\\b\\f\\u0001\\u001f\x7f\\u0000e\"}");
  // Valid multi-byte UTF-8 passes through unchanged.
  EXPECT_EQ(to_json_line({{"\xCE\xB5", std::string("\xE2\x82\xAC \xF0\x9F\x98\x80")}}),
            "{\"\xCE\xB5\":\"\xE2\x82\xAC \xF0\x9F\x98\x80\"}");
}

TEST(JsonLine, Numbers) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(to_json_line({{"a", std::nan("")}, {"b", inf}, {"c", -inf}}), R"({"a":null,"b":null,"c":null})");
  EXPECT_EQ(to_json_line({{"a", 1.0},
                          {"b", -0.0},
                          {"c", 0.1 + 0.2},
                          {"d", 1e300},
                          {"e", 5e-324},
                          {"f", 100.0},
                          {"g", 1e22},
                          {"h", 123456.789}}),
            R"({"a":1.0,"b":-0.0,"c":0.30000000000000004,"d":1e+300,"e":5e-324,"f":100.0,"g":1e+22,"h":123456.789})");
  EXPECT_EQ(to_json_line({{"min", std::numeric_limits<int64_t>::min()}, {"max", std::numeric_limits<int64_t>::max()}}),
            R"({"min":-9223372036854775808,"max":9223372036854775807})");
}

TEST(JsonLine, RejectsDuplicateKeysAndInvalidUtf8) {
  try {
    to_json_line({{"loss", 1.0}, {"lr", 0.1}, {"loss", 2.0}});
    ADD_FAILURE() << "duplicate key accepted";
  } catch (const ddp::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("key \"loss\" appears twice"), std::string::npos) << e.what();
  }
  for (std::string bad : {"ab\xFF", "ab\xC3", "ab\xC0\xAF", "ab\xED\xA0\x80", "ab\xF4\x90\x80\x80"}) {
    try {
      to_json_line({{"path", bad}});
      ADD_FAILURE() << "invalid UTF-8 accepted: " << hex(bad);
    } catch (const ddp::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("value of key \"path\" is not valid UTF-8"), std::string::npos) << e.what();
      // Which byte, and where (nlohmann's words: "invalid UTF-8 byte at index 2: 0xFF", or "incomplete ...").
      EXPECT_NE(std::string(e.what()).find("0x"), std::string::npos) << e.what();
    }
  }
}

TEST(JsonlWriter, PythonReadsEveryValueBack) {
  TempDir tmp;
  std::string path = tmp / "logs/run1/metrics.jsonl";  // parents are created
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> unit(-1, 1);
  std::uniform_int_distribution<int> exponent(-300, 300);
  std::ostringstream want;
  {
    JsonlWriter log(path);
    for (int line = 0; line < 200; ++line) {
      double d = unit(rng) * std::pow(10.0, exponent(rng));
      uint64_t bits = rng();
      double raw;
      std::memcpy(&raw, &bits, 8);  // any bit pattern, NaNs and infinities included
      std::string text = "line " + std::to_string(line) + " \"q\" \\ \t\x01 \xCE\xB5";
      log.write({{"step", int64_t(line) - 100}, {"d", d}, {"raw", raw}, {"text", text}, {"ok", line % 2 == 0}});
      want << hex("step") << ":int:" << (line - 100) << " " << hex("d") << ":float:" << double_bits(d) << " "
           << hex("raw") << (std::isfinite(raw) ? ":float:" + double_bits(raw) : std::string(":null:null")) << " "
           << hex("text") << ":str:" << hex(text) << " " << hex("ok") << ":bool:" << (line % 2 == 0 ? "true" : "false")
           << "\n";
    }
  }
  std::string out;
  ASSERT_EQ(test::run_command(std::string(DDP_PYTHON " ") + JSONL_READER + " '" + path + "'", out), 0) << out;
  EXPECT_EQ(out, want.str());
}

TEST(JsonlWriter, AppendsOrTruncates) {
  TempDir tmp;
  std::string path = tmp / "m.jsonl";
  JsonlWriter(path).write({{"a", int64_t{1}}});
  JsonlWriter(path).write({{"a", int64_t{2}}});
  EXPECT_EQ(read_file(path), "{\"a\":1}\n{\"a\":2}\n");
  {
    JsonlWriter log(path, /*append=*/false);
    EXPECT_EQ(read_file(path), "");
    log.write({{"a", int64_t{3}}});
    EXPECT_EQ(read_file(path), "{\"a\":3}\n");  // on disk after each line
  }
  EXPECT_EQ(read_file(path), "{\"a\":3}\n");
}

TEST(JsonlWriter, IoErrorsNameThePath) {
  TempDir tmp;
  test::write_file(tmp / "file", "x");
  try {
    JsonlWriter log(tmp / "file/sub/m.jsonl");
    ADD_FAILURE() << "created a directory under a file";
  } catch (const ddp::Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("JsonlWriter: cannot create directory '" + (tmp / "file") + "': Not a directory"),
        std::string::npos)
        << e.what();
  }
  JsonlWriter full("/dev/full");  // every write fails with ENOSPC
  try {
    full.write({{"loss", 0.5}});
    ADD_FAILURE() << "write to /dev/full succeeded";
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("JsonlWriter: cannot write to '/dev/full': No space left on device"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(JsonlWriter(""), ddp::InvalidArgument);
}

}  // namespace
}  // namespace ddp::train
