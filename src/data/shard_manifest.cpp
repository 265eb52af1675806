#include "shard_manifest.h"

#include <sys/stat.h>

#include <fstream>
#include <map>
#include <sstream>

#include "ddp/data/data_error.h"

namespace ddp::data::detail {
namespace {

constexpr const char* kHeader = "ddp-shards-manifest 1";

// Values are one line each: backslashes and newlines are escaped.
std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      ++i;
      out += s[i] == 'n' ? '\n' : s[i];
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

std::string format_manifest(const Manifest& m) {
  std::ostringstream out;
  out << kHeader << "\n"
      << "name=" << escape(m.name) << "\n"
      << "num_shards=" << m.num_shards << "\n"
      << "seed=" << m.seed << "\n"
      << "samples=" << m.samples << "\n"
      << "per_shard=" << m.per_shard << "\n"
      << "source_id=" << escape(m.source_id) << "\n"
      << "fingerprint=" << escape(m.fingerprint) << "\n"
      << "write_id=" << escape(m.write_id) << "\n";
  for (size_t r = 0; r < m.files.size(); ++r)
    out << "shard." << r << "=" << escape(m.files[r].first) << " " << m.files[r].second << "\n";
  return out.str();
}

std::optional<Manifest> read_manifest(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  std::ifstream in(path);
  if (!in) throw DataError(path + ": cannot open the shard manifest");
  auto bad = [&](int line, const std::string& what) -> DataError {
    return DataError(path + ": " + (line > 0 ? "line " + std::to_string(line) + ": " : std::string()) + what +
                     "; the manifest is corrupt: delete it and write the shards again");
  };
  std::string line;
  if (!std::getline(in, line) || line != kHeader)
    throw bad(1, "expected the header '" + std::string(kHeader) + "', found '" + line.substr(0, 40) + "'");
  std::map<std::string, std::pair<std::string, int>> kv;  // key -> (value, line)
  for (int n = 2; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) throw bad(n, "expected key=value, found '" + line.substr(0, 40) + "'");
    kv[line.substr(0, eq)] = {unescape(line.substr(eq + 1)), n};
  }
  auto text = [&](const std::string& key) -> const std::string& {
    auto it = kv.find(key);
    if (it == kv.end()) throw bad(0, "missing key '" + key + "'");
    return it->second.first;
  };
  auto number = [&](const std::string& key, const std::string& s, int at) -> uint64_t {
    size_t used = 0;
    uint64_t v = 0;
    try {
      v = std::stoull(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != s.size() || s[0] == '-') throw bad(at, key + ": '" + s + "' is not a number");
    return v;
  };
  auto integer = [&](const std::string& key) {
    const std::string& value = text(key);
    return number(key, value, kv.at(key).second);
  };
  Manifest m;
  m.name = text("name");
  m.num_shards = static_cast<int64_t>(integer("num_shards"));
  m.seed = integer("seed");
  m.samples = static_cast<int64_t>(integer("samples"));
  m.per_shard = static_cast<int64_t>(integer("per_shard"));
  m.source_id = text("source_id");
  m.fingerprint = text("fingerprint");
  m.write_id = text("write_id");
  if (m.num_shards < 1 || m.num_shards > (int64_t{1} << 24))
    throw bad(kv.at("num_shards").second, "num_shards out of range");
  for (int64_t r = 0; r < m.num_shards; ++r) {
    const std::string key = "shard." + std::to_string(r);
    const std::string& v = text(key);
    const int line = kv.at(key).second;
    const auto space = v.rfind(' ');
    if (space == std::string::npos) throw bad(line, key + ": expected '<file> <bytes>'");
    m.files.emplace_back(v.substr(0, space), number(key, v.substr(space + 1), line));
  }
  return m;
}

}  // namespace ddp::data::detail
