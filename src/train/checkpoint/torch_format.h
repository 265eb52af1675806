// The torch.save file format, internals of checkpoint.h and state_dict.h: a zip
// archive holding data.pkl (a protocol-2 pickle) and one record per tensor
// storage, data/<key>.
//
// Writing (pickle_writer.cpp) emits the pickle the way Python's torch.save
// does, using only the globals torch.load(weights_only=True) allows
// (collections.OrderedDict, torch._utils._rebuild_tensor_v2,
// torch.<Type>Storage). LibTorch's torch::pickle_save instead wraps every dict
// and list in torch.jit._pickle.restore_type_tag, which weights_only=True (the
// default from PyTorch 2.6 on) refuses. A dict typed Dict[str, Tensor] (a state
// dict, see state_dict_to_ivalue) becomes a collections.OrderedDict, as
// model.state_dict() is; other dicts are plain dicts, lists lists, tuples
// tuples. Supported values: None, bool, int, double, string, strided tensors
// (a device tensor's storage copied to the host once, so tied tensors stay
// tied: host_copies.h), and lists, tuples and dicts of them.
//
// Reading (torch_file.cpp) uses LibTorch 1.13's torch::jit::Unpickler, which
// knows only the opcodes its own pickler writes. pickle_compat.cpp first
// rewrites Python's pickle at the opcode level (a symbolic run of the pickle
// machine: kinds of values and where each began, no values):
//  - collections.OrderedDict() (model.state_dict(), a tensor's backward hooks)
//    becomes a dict built the way LibTorch's pickler writes dicts:
//      GLOBAL torch.jit._pickle restore_type_tag; EMPTY_DICT; <items>;
//      BINUNICODE "Dict[Any, Any]"; TUPLE2; REDUCE
//    (1.13 turns OrderedDict() into None). The OrderedDict's attribute state
//    (state_dict()'s _metadata, applied by BUILD) rides along as a third
//    tuple element, which restore_type_tag ignores.
//  - SETITEM and APPEND (one-item dicts and lists; 1.13 lacks both) become
//    SETITEMS and APPENDS with a MARK inserted before the key or item.
//  - LONG1 integers shorter than 8 bytes (Python's ints >= 2**31) are widened
//    to the 8 bytes 1.13 requires.
// Everything else is copied byte for byte; memo ids are unchanged.
#pragma once
#include <ATen/core/ivalue.h>

#include <cstddef>
#include <string>
#include <vector>

namespace ddp::train::detail {

// The file's bytes; InvalidArgument naming `where` and the path inside obj (["optimizer"]["state"]...) for a
// value that cannot be saved.
std::vector<char> torch_save_bytes(const c10::IValue& obj, const std::string& where);

// `pickle` is a protocol-2 pickle; `where` names it in errors (ddp::Error with the byte offset).
std::string rewrite_pickle_for_libtorch(const std::string& pickle, const std::string& where);

// Reads a file written by torch.save (Python) or torch_save_bytes / torch::pickle_save (C++). Tensors land on
// the CPU. ddp::Error naming the path for a missing, empty, truncated or corrupt file.
c10::IValue read_torch_file(const std::string& path);

// Checks the zip structure and every record against the CRC-32 the zip directory stores (zip_check.cpp).
// ddp::Error naming the path and the record for a corrupt file.
void verify_zip_records(const std::string& path);

}  // namespace ddp::train::detail
