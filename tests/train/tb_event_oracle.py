#!/usr/bin/python3
"""Independent oracle for ddp's TensorBoard event files.

Reads the TFRecords of an event file, checks both masked CRC32Cs of every
record with a CRC32C written here, and parses each Event with Python's protobuf
library (python3-protobuf) through message classes built at run time from a
FileDescriptorProto declaring Event / Summary / Summary.Value as in TensorFlow's
event.proto and summary.proto. Re-serialising each message must give back the
record's bytes (no unknown fields, canonical encoding).

Prints one line per record:
  V <wall_time %.17g> <file_version>
  S <step> <simple_value %.9g> <wall_time %.17g> <tag>
Exits 1 with a message on stderr on any mismatch.

Usage: tb_event_oracle.py EVENT_FILE
"""
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data):
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def event_class():
    fdp = descriptor_pb2.FileDescriptorProto(name="ddp_oracle/event.proto", package="tensorflow",
                                             syntax="proto3")
    summary = fdp.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL)
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".tensorflow.Summary.Value")
    event = fdp.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.oneof_decl.add(name="what")
    event.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL,
                    oneof_index=0)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".tensorflow.Summary", oneof_index=0)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    desc = pool.FindMessageTypeByName("tensorflow.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def fail(msg):
    sys.stderr.write("tb_event_oracle: %s\n" % msg)
    sys.exit(1)


def main():
    if len(sys.argv) != 2:
        fail("usage: tb_event_oracle.py EVENT_FILE")
    sys.stdout.reconfigure(encoding="utf-8")
    Event = event_class()
    data = open(sys.argv[1], "rb").read()
    at = 0
    while at < len(data):
        if len(data) - at < 12:
            fail("truncated record header at offset %d" % at)
        (length,) = struct.unpack_from("<Q", data, at)
        (length_crc,) = struct.unpack_from("<I", data, at + 8)
        if length_crc != masked_crc(data[at:at + 8]):
            fail("length CRC mismatch at offset %d" % at)
        if len(data) - at - 12 < length + 4:
            fail("truncated record data at offset %d" % at)
        payload = data[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack_from("<I", data, at + 12 + length)
        if data_crc != masked_crc(payload):
            fail("data CRC mismatch at offset %d" % at)
        ev = Event()
        ev.ParseFromString(payload)
        if ev.SerializeToString(deterministic=True) != payload:
            fail("record at offset %d is not the canonical encoding of %r" % (at, ev))
        what = ev.WhichOneof("what")
        if what == "file_version":
            print("V %.17g %s" % (ev.wall_time, ev.file_version))
        elif what == "summary":
            for v in ev.summary.value:
                print("S %d %.9g %.17g %s" % (ev.step, v.simple_value, ev.wall_time, v.tag))
        else:
            fail("record at offset %d holds neither file_version nor summary" % at)
        at += 12 + length + 4


if __name__ == "__main__":
    main()
