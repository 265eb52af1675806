// torch_save_bytes: the torch.save format, written as Python writes it (see torch_format.h).
#include "train/checkpoint/torch_format.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <utility>

#include "ddp/errors.h"
#include "train/checkpoint/host_copies.h"

namespace ddp::train::detail {
namespace {

// Protocol-2 opcodes (pickletools names).
enum Op : char {
  MARK = '(',
  STOP = '.',
  BINPERSID = 'Q',
  REDUCE = 'R',
  GLOBAL = 'c',
  NONE = 'N',
  NEWTRUE = '\x88',
  NEWFALSE = '\x89',
  BININT = 'J',
  BININT1 = 'K',
  BININT2 = 'M',
  LONG1 = '\x8a',
  BINFLOAT = 'G',
  BINUNICODE = 'X',
  EMPTY_LIST = ']',
  APPENDS = 'e',
  EMPTY_TUPLE = ')',
  TUPLE = 't',
  TUPLE1 = '\x85',
  EMPTY_DICT = '}',
  SETITEMS = 'u',
  PROTO = '\x80',
};

class Writer {
 public:
  explicit Writer(const std::string& where) : where_(where) {}

  std::vector<char> save(const c10::IValue& obj) {
    put(PROTO);
    put('\x02');
    value(obj, "");
    put(STOP);
    std::vector<char> out;
    caffe2::serialize::PyTorchStreamWriter zip([&](const void* data, size_t n) {
      const char* p = static_cast<const char*>(data);
      out.insert(out.end(), p, p + n);
      return n;
    });
    zip.writeRecord("data.pkl", pickle_.data(), pickle_.size());
    for (size_t i = 0; i < storages_.size(); ++i)
      zip.writeRecord("data/" + std::to_string(i), storages_[i].data(), storages_[i].nbytes());
    zip.writeEndOfFile();
    return out;
  }

 private:
  void put(char c) { pickle_.push_back(c); }
  void put_le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) put(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void global(const char* module, const char* name) {
    put(GLOBAL);
    pickle_ += std::string(module) + "\n" + name + "\n";
  }
  void string(const std::string& s) {
    put(BINUNICODE);
    put_le(s.size(), 4);
    pickle_ += s;
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      put(BININT1);
      put_le(static_cast<uint64_t>(v), 1);
    } else if (v >= 0 && v < 65536) {
      put(BININT2);
      put_le(static_cast<uint64_t>(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      put(BININT);
      put_le(static_cast<uint64_t>(v), 4);
    } else {  // two's complement, 8 bytes (the width LibTorch's unpickler reads)
      put(LONG1);
      put('\x08');
      put_le(static_cast<uint64_t>(v), 8);
    }
  }
  void real(double d) {
    uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    put(BINFLOAT);
    for (int i = 7; i >= 0; --i) put(static_cast<char>((bits >> (8 * i)) & 0xff));  // big-endian
  }
  void tuple_of_ints(at::IntArrayRef v) {
    if (v.empty()) return put(EMPTY_TUPLE);
    put(MARK);
    for (int64_t x : v) integer(x);
    put(TUPLE);
  }
  void empty_ordered_dict() {
    global("collections", "OrderedDict");
    put(EMPTY_TUPLE);
    put(REDUCE);
  }

  [[noreturn]] void unsupported(const std::string& path, const std::string& what) const {
    throw InvalidArgument(where_ + ": cannot save " + (path.empty() ? "the object" : path) + ": " + what +
                          " (supported: None, bool, int, double, string, tensor, and lists, tuples, dicts of them)");
  }

  // torch._utils._rebuild_tensor_v2((storage, offset, size, stride, requires_grad, OrderedDict()))
  void tensor(at::Tensor t, const std::string& path) {
    if (!t.defined()) unsupported(path, "an undefined tensor");
    if (t.layout() != at::kStrided || t.is_quantized()) unsupported(path, "a sparse or quantized tensor");
    t = host_(t);  // a device tensor: its storage copied once, for every tensor that shares it (tied weights)
    t = t.resolve_conj().resolve_neg();
    const at::Storage& storage = t.storage();
    const auto key = std::make_pair(storage.unsafeGetStorageImpl(), t.scalar_type());
    auto it = storage_ids_.find(key);
    if (it == storage_ids_.end()) {
      it = storage_ids_.emplace(key, storages_.size()).first;
      storages_.push_back(storage);
    }
    global("torch._utils", "_rebuild_tensor_v2");
    put(MARK);
    put(MARK);  // the persistent id: ("storage", torch.FloatStorage, key, "cpu", numel)
    string("storage");
    global("torch", (std::string(c10::toString(t.scalar_type())) + "Storage").c_str());
    string(std::to_string(it->second));
    string("cpu");
    integer(static_cast<int64_t>(storage.nbytes() / t.element_size()));
    put(TUPLE);
    put(BINPERSID);
    integer(t.storage_offset());
    tuple_of_ints(t.sizes());
    tuple_of_ints(t.strides());
    put(t.requires_grad() ? NEWTRUE : NEWFALSE);
    empty_ordered_dict();  // backward hooks
    put(TUPLE);
    put(REDUCE);
  }

  void value(const c10::IValue& v, const std::string& path) {
    if (v.isNone()) return put(NONE);
    if (v.isBool()) return put(v.toBool() ? NEWTRUE : NEWFALSE);
    if (v.isInt()) return integer(v.toInt());
    if (v.isDouble()) return real(v.toDouble());
    if (v.isString()) return string(v.toStringRef());
    if (v.isTensor()) return tensor(v.toTensor(), path);
    if (v.isList()) {
      put(EMPTY_LIST);
      const auto items = v.toListRef();
      if (items.empty()) return;
      put(MARK);
      for (size_t i = 0; i < items.size(); ++i) value(items[i], path + "[" + std::to_string(i) + "]");
      return put(APPENDS);
    }
    if (v.isTuple()) {
      const auto& items = v.toTupleRef().elements();
      if (items.empty()) return put(EMPTY_TUPLE);
      put(MARK);
      for (size_t i = 0; i < items.size(); ++i) value(items[i], path + "[" + std::to_string(i) + "]");
      return put(TUPLE);
    }
    if (v.isGenericDict()) {
      const auto dict = v.toGenericDict();
      const bool state_dict =
          dict.keyType()->kind() == c10::TypeKind::StringType && dict.valueType()->kind() == c10::TypeKind::TensorType;
      if (state_dict)
        empty_ordered_dict();
      else
        put(EMPTY_DICT);
      if (dict.empty()) return;
      put(MARK);
      for (const auto& item : dict) {
        const std::string sub =
            path + "[" + (item.key().isString() ? "\"" + item.key().toStringRef() + "\"" : c10::str(item.key())) + "]";
        value(item.key(), sub);
        value(item.value(), sub);
      }
      return put(SETITEMS);
    }
    unsupported(path, std::string("a ") + v.tagKind());
  }

  const std::string& where_;
  std::string pickle_;
  HostCopies host_{/*copy_host_tensors=*/false};
  std::vector<at::Storage> storages_;
  std::map<std::pair<const c10::StorageImpl*, at::ScalarType>, size_t> storage_ids_;
};

}  // namespace

std::vector<char> torch_save_bytes(const c10::IValue& obj, const std::string& where) { return Writer(where).save(obj); }

}  // namespace ddp::train::detail
