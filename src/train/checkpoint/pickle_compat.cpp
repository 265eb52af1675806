// rewrite_pickle_for_libtorch: Python's pickles made readable by LibTorch 1.13 (see torch_format.h).
#include "train/checkpoint/torch_format.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ddp/errors.h"

namespace ddp::train::detail {
namespace {

// The protocol-2 opcodes LibTorch 1.13 reads, plus SETITEM, APPEND (rewritten). Names as in Python's pickletools.
enum Op : uint8_t {
  MARK = '(',
  STOP = '.',
  BINPUT = 'q',
  LONG_BINPUT = 'r',
  BINGET = 'h',
  LONG_BINGET = 'j',
  EMPTY_TUPLE = ')',
  EMPTY_LIST = ']',
  EMPTY_DICT = '}',
  NONE = 'N',
  BININT = 'J',
  BININT1 = 'K',
  BININT2 = 'M',
  BINUNICODE = 'X',
  BINFLOAT = 'G',
  TUPLE = 't',
  APPEND = 'a',
  APPENDS = 'e',
  SETITEM = 's',
  SETITEMS = 'u',
  GLOBAL = 'c',
  REDUCE = 'R',
  BUILD = 'b',
  BINPERSID = 'Q',
  PROTO = 0x80,
  NEWOBJ = 0x81,
  TUPLE1 = 0x85,
  TUPLE2 = 0x86,
  TUPLE3 = 0x87,
  NEWTRUE = 0x88,
  NEWFALSE = 0x89,
  LONG1 = 0x8a,
};

// Opcodes LibTorch cannot read, named for the error message.
const char* unsupported_name(uint8_t op) {
  static const std::pair<uint8_t, const char*> names[] = {
      {'0', "POP"},           {'1', "POP_MARK"},       {'2', "DUP"},
      {'B', "BINBYTES"},      {'C', "SHORT_BINBYTES"}, {'F', "FLOAT"},
      {'I', "INT"},           {'L', "LONG"},           {'P', "PERSID"},
      {'S', "STRING"},        {'T', "BINSTRING"},      {'U', "SHORT_BINSTRING"},
      {'V', "UNICODE"},       {'d', "DICT"},           {'g', "GET"},
      {'i', "INST"},          {'l', "LIST"},           {'o', "OBJ"},
      {'p', "PUT"},           {0x82, "EXT1"},          {0x83, "EXT2"},
      {0x84, "EXT4"},         {0x8b, "LONG4"},         {0x8c, "SHORT_BINUNICODE"},
      {0x8d, "BINUNICODE8"},  {0x8e, "BINBYTES8"},     {0x8f, "EMPTY_SET"},
      {0x90, "ADDITEMS"},     {0x91, "FROZENSET"},     {0x92, "NEWOBJ_EX"},
      {0x93, "STACK_GLOBAL"}, {0x94, "MEMOIZE"},       {0x95, "FRAME"},
      {0x96, "BYTEARRAY8"},   {0x97, "NEXT_BUFFER"},   {0x98, "READONLY_BUFFER"}};
  for (const auto& [code, name] : names)
    if (code == op) return name;
  return "unknown";
}

const char kTypeTag[] = "Dict[Any, Any]";

std::string binunicode(const std::string& s) {
  std::string out(1, static_cast<char>(BINUNICODE));
  const auto n = static_cast<uint32_t>(s.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + s;
}

enum class Kind { kValue, kEmptyTuple, kOrderedDictClass, kOrderedDict };

struct Slot {
  Kind kind = Kind::kValue;
  size_t begin = 0;        // offset of the first opcode that built this value
  size_t reduce_edit = 0;  // Kind::kOrderedDict: the edit that replaced its REDUCE
};

struct Edit {
  size_t offset;
  size_t length;  // input bytes replaced; 0 for an insertion
  std::string bytes;
  size_t seq;
};

class Rewriter {
 public:
  Rewriter(const std::string& in, const std::string& where) : in_(in), where_(where) {}

  std::string run() {
    if (in_.size() < 2 || static_cast<uint8_t>(in_[0]) != PROTO) fail(0, "not a pickle (no PROTO opcode at the start)");
    if (in_[1] != 2)
      fail(1, "pickle protocol " + std::to_string(static_cast<uint8_t>(in_[1])) +
                  "; LibTorch reads protocol 2 only, torch.save's default (save without pickle_protocol=)");
    pos_ = 2;
    while (!step()) {
    }
    return apply();
  }

 private:
  [[noreturn]] void fail(size_t offset, const std::string& what) const {
    throw Error(where_ + ": pickle offset " + std::to_string(offset) + ": " + what);
  }

  const uint8_t* take(size_t n, size_t at) {
    if (in_.size() - pos_ < n) fail(at, "the pickle ends in the middle of an opcode (truncated file?)");
    const auto* p = reinterpret_cast<const uint8_t*>(in_.data()) + pos_;
    pos_ += n;
    return p;
  }
  uint32_t u32(size_t at) {
    const uint8_t* p = take(4, at);
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  }
  std::string line(size_t at) {
    const size_t end = in_.find('\n', pos_);
    if (end == std::string::npos) fail(at, "GLOBAL without a terminating newline");
    std::string s = in_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }

  size_t floor() const { return marks_.empty() ? 0 : marks_.back().first; }
  // Pops one value; the OrderedDict class may only be the callable of a REDUCE (see step()).
  Slot pop(size_t at, bool class_ok = false) {
    if (stack_.size() <= floor()) fail(at, "stack underflow (corrupt pickle)");
    Slot s = stack_.back();
    stack_.pop_back();
    if (s.kind == Kind::kOrderedDictClass && !class_ok)
      fail(at, "collections.OrderedDict is used other than as OrderedDict(); not supported");
    return s;
  }
  // Pops down to the last MARK; returns the MARK's offset.
  size_t pop_mark(size_t at) {
    if (marks_.empty()) fail(at, "no MARK to pop to (corrupt pickle)");
    while (stack_.size() > marks_.back().first) pop(at);
    const size_t begin = marks_.back().second;
    marks_.pop_back();
    return begin;
  }
  Slot& top(size_t at) {
    if (stack_.size() <= floor()) fail(at, "stack underflow (corrupt pickle)");
    return stack_.back();
  }
  void push(size_t begin, Kind kind = Kind::kValue) { stack_.push_back({kind, begin, 0}); }
  void skip_and_push(size_t n, size_t at) {
    take(n, at);
    push(at);
  }
  size_t edit(size_t offset, size_t length, std::string bytes) {
    edits_.push_back({offset, length, std::move(bytes), edits_.size()});
    return edits_.size() - 1;
  }
  void memo_put(uint32_t id, size_t at) {
    memo_[id] = top(at).kind == Kind::kOrderedDictClass ? Kind::kOrderedDictClass : Kind::kValue;
  }
  void memo_get(uint32_t id, size_t at) {
    auto it = memo_.find(id);
    if (it == memo_.end()) fail(at, "memo entry " + std::to_string(id) + " read before it is written");
    push(at, it->second);
  }

  // One opcode; true at STOP.
  bool step() {
    const size_t at = pos_;
    const uint8_t op = *take(1, at);
    switch (op) {
      case MARK:
        marks_.emplace_back(stack_.size(), at);
        break;
      case STOP:
        if (stack_.size() != 1 || !marks_.empty()) fail(at, "STOP with a malformed stack (corrupt pickle)");
        return true;
      case BINPUT:
        memo_put(*take(1, at), at);
        break;
      case LONG_BINPUT:
        memo_put(u32(at), at);
        break;
      case BINGET:
        memo_get(*take(1, at), at);
        break;
      case LONG_BINGET:
        memo_get(u32(at), at);
        break;
      case EMPTY_TUPLE:
        push(at, Kind::kEmptyTuple);
        break;
      case EMPTY_LIST:
      case EMPTY_DICT:
      case NONE:
      case NEWTRUE:
      case NEWFALSE:
        push(at);
        break;
      case BININT1:
        skip_and_push(1, at);
        break;
      case BININT2:
        skip_and_push(2, at);
        break;
      case BININT:
        skip_and_push(4, at);
        break;
      case BINFLOAT:
        skip_and_push(8, at);
        break;
      case BINUNICODE:
        skip_and_push(u32(at), at);
        break;
      case LONG1:
        long1(at);
        break;
      case GLOBAL: {
        const std::string module = line(at), name = line(at);
        const bool od = module == "collections" && name == "OrderedDict";
        if (od) edit(at, pos_ - at, "ctorch.jit._pickle\nrestore_type_tag\n");
        push(at, od ? Kind::kOrderedDictClass : Kind::kValue);
      } break;
      case TUPLE:
        push(pop_mark(at));
        break;
      case TUPLE1:
      case TUPLE2:
      case TUPLE3: {
        size_t begin = 0;
        for (int i = 0; i < op - TUPLE1 + 1; ++i) begin = pop(at).begin;
        push(begin);
      } break;
      case APPENDS:
      case SETITEMS:
        pop_mark(at);
        top(at);  // the container
        break;
      case APPEND:
      case SETITEM: {  // container, [key,] value -> MARK before the first popped, then the plural op
        size_t begin = pop(at).begin;
        if (op == SETITEM) begin = pop(at).begin;
        top(at);
        edit(begin, 0, std::string(1, static_cast<char>(MARK)));
        edit(at, 1, std::string(1, static_cast<char>(op == SETITEM ? SETITEMS : APPENDS)));
      } break;
      case REDUCE:
        reduce(at);
        break;
      case NEWOBJ: {
        pop(at);
        push(pop(at).begin);
      } break;
      case BUILD:
        build(at);
        break;
      case BINPERSID:
        push(pop(at).begin);
        break;
      default: {
        char code[8];
        std::snprintf(code, sizeof code, "0x%02x", op);
        fail(at, std::string("opcode ") + unsupported_name(op) + " (" + code +
                     ") is not readable by LibTorch 1.13: the file holds a Python object other than tensors, "
                     "dicts, lists, tuples, strings, numbers, bools and None");
      }
    }
    return false;
  }

  void long1(size_t at) {
    const uint8_t n = *take(1, at);
    const uint8_t* p = take(n, at);
    if (n > 8) fail(at, "integer of " + std::to_string(n) + " bytes does not fit in 64 bits");
    if (n != 8) {  // sign-extend to the 8 bytes LibTorch requires
      std::string out{static_cast<char>(LONG1), 8};
      out.append(reinterpret_cast<const char*>(p), n);
      const char fill = (n > 0 && (p[n - 1] & 0x80)) ? '\xff' : '\0';
      out.append(8 - n, fill);
      edit(at, 2 + n, out);
    }
    push(at);
  }

  // OrderedDict(): restore_type_tag (already swapped in by GLOBAL) applied to (dict, type tag).
  void reduce(size_t at) {
    Slot args = pop(at);
    Slot fn = pop(at, /*class_ok=*/true);
    if (fn.kind != Kind::kOrderedDictClass) return push(fn.begin);
    if (args.kind != Kind::kEmptyTuple)
      fail(at, "OrderedDict with constructor arguments is not supported (expected OrderedDict() and SETITEMS)");
    edit(args.begin, 1, std::string(1, static_cast<char>(EMPTY_DICT)));
    const size_t e = edit(at, 1, binunicode(kTypeTag) + static_cast<char>(TUPLE2) + static_cast<char>(REDUCE));
    stack_.push_back({Kind::kOrderedDict, fn.begin, e});
  }

  // BUILD on an OrderedDict sets attributes (_metadata): the REDUCE moves here and the state becomes a
  // third tuple element: restore_type_tag((dict, "Dict[Any, Any]", state)).
  void build(size_t at) {
    Slot state = pop(at);
    Slot& obj = top(at);
    if (obj.kind == Kind::kOrderedDictClass) fail(at, "BUILD on collections.OrderedDict itself (corrupt pickle)");
    if (obj.kind != Kind::kOrderedDict) return;  // LibTorch's own BUILD handling
    edits_[obj.reduce_edit].bytes.clear();
    edit(state.begin, 0, binunicode(kTypeTag));
    edit(at, 1, std::string{static_cast<char>(TUPLE3), static_cast<char>(REDUCE)});
    obj.kind = Kind::kValue;
  }

  std::string apply() {
    // By offset; insertions before a replacement at the same offset; among insertions, the outer
    // construct (recorded later) first.
    std::sort(edits_.begin(), edits_.end(), [](const Edit& a, const Edit& b) {
      if (a.offset != b.offset) return a.offset < b.offset;
      if ((a.length == 0) != (b.length == 0)) return a.length == 0;
      return a.seq > b.seq;
    });
    std::string out;
    out.reserve(in_.size() + 32 * edits_.size());
    size_t cur = 0;
    for (const Edit& e : edits_) {
      out.append(in_, cur, e.offset - cur);
      out += e.bytes;
      cur = e.offset + e.length;
    }
    out.append(in_, cur, std::string::npos);
    return out;
  }

  const std::string& in_;
  const std::string& where_;
  size_t pos_ = 0;
  std::vector<Slot> stack_;
  std::vector<std::pair<size_t, size_t>> marks_;  // (stack size, offset of the MARK)
  std::unordered_map<uint32_t, Kind> memo_;
  std::vector<Edit> edits_;
};

}  // namespace

std::string rewrite_pickle_for_libtorch(const std::string& pickle, const std::string& where) {
  return Rewriter(pickle, where).run();
}

}  // namespace ddp::train::detail
