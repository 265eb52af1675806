#!/usr/bin/python3
"""Reads a JSON-lines file with Python's json module, strictly (no NaN or
Infinity literals), and prints each line's fields in file order, one line per
JSON line, as space-separated key:type:payload items:
  key and str payloads as UTF-8 hex; float: the 8 IEEE bytes, big-endian hex;
  int: decimal; bool: true/false; null: null.
Exits 1 with a message on stderr if a line is not a JSON object.

Usage: jsonl_reader.py FILE
"""
import json
import struct
import sys


def reject(name):
    raise ValueError("non-standard JSON constant %s" % name)


def item(key, value):
    k = key.encode("utf-8").hex()
    if value is None:
        return "%s:null:null" % k
    if isinstance(value, bool):
        return "%s:bool:%s" % (k, "true" if value else "false")
    if isinstance(value, int):
        return "%s:int:%d" % (k, value)
    if isinstance(value, float):
        return "%s:float:%s" % (k, struct.pack(">d", value).hex())
    if isinstance(value, str):
        return "%s:str:%s" % (k, value.encode("utf-8").hex())
    raise ValueError("unexpected JSON value %r" % (value,))


def main():
    with open(sys.argv[1], "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                obj = json.loads(raw.decode("utf-8"), parse_constant=reject)
            except ValueError as e:
                sys.stderr.write("jsonl_reader: line %d: %s\n" % (n, e))
                sys.exit(1)
            if not isinstance(obj, dict):
                sys.stderr.write("jsonl_reader: line %d is not an object\n" % n)
                sys.exit(1)
            print(" ".join(item(k, v) for k, v in obj.items()))


if __name__ == "__main__":
    main()
