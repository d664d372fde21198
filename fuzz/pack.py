#!/usr/bin/env python3
"""Seeds for the fuzz targets (see fuzz/src/image.rs for the format).

  pack.py image IMG NAME DIR... [--ss N] [--a N] [--b N] [--budget BYTES]
      IMG as fuzz inputs DIR/NAME.seed and DIR/NAME.reseal.seed (which asks
      the target to fix up checksums after mutation): its size, flags, and
      its non-zero runs up to BUDGET bytes (default 48 KiB): those near the
      start and the end first, then the first 4 KiB of every other run
      (where its header is), then the rest.
  pack.py md VERSION IMG   an md superblock (0.90, 1.0, 1.1, 1.2) in IMG
  pack.py zfs ASHIFT IMG   ZFS vdev labels L0 and L1 in IMG, as
                           `zpool create -o ashift=N` lays them out
  pack.py magic NAME IMG   the signature of a scheme blkalign only names
                           and parted cannot write (aix, ldm, ultrix,
                           karma, sysv68) in IMG

Superblocks and labels are written the way tests/it/stack_peers.rs builds
them, for the layers no peer tool here can make (no md driver, no zpool).
"""
import argparse
import os
import struct

BLOCK = 512
ZERO = bytes(BLOCK)
EDGE = 128 << 10
HEAD = 4096


def runs(f, length):
    """(offset, bytes) of each run of non-zero 512-byte blocks in the first
    `length` bytes of `f`, zeros trimmed; holes are skipped unread."""
    out, start, pos = [], None, 0
    while pos < length:
        try:
            data_at = os.lseek(f.fileno(), pos, os.SEEK_DATA)
        except OSError:
            break
        hole = min(os.lseek(f.fileno(), data_at, os.SEEK_HOLE), length)
        f.seek(data_at)
        data = f.read(hole - data_at)
        for at in range(0, len(data), BLOCK):
            zero = data[at:at + BLOCK] == ZERO[:len(data[at:at + BLOCK])]
            if not zero and start is None:
                start = data_at + at
            if zero and start is not None:
                out.append((start, data_at + at))
                start = None
        if start is not None:
            out.append((start, hole))
            start = None
        pos = max(hole, data_at + 1)
    result = []
    for begin, end in out:
        f.seek(begin)
        chunk = f.read(end - begin)
        lead = len(chunk) - len(chunk.lstrip(b"\0"))
        result.append((begin + lead, chunk.strip(b"\0")))
    return result


def pack(args):
    with open(args.img, "rb") as f:
        length = os.fstat(f.fileno()).st_size
        extents = runs(f, length)
    near = lambda e: e[0] < EDGE or e[0] + len(e[1]) > length - EDGE
    extents = [e for e in extents if near(e)] + [e for e in extents if not near(e)]
    extents = [(at, c[:HEAD]) for at, c in extents] + [(at + HEAD, c[HEAD:]) for at, c in extents if len(c) > HEAD]
    body, left = b"", args.budget
    for at, chunk in extents:
        chunk = chunk[:left]
        if not chunk:
            break
        body += struct.pack("<QI", at, len(chunk)) + chunk
        left -= len(chunk)
    flags = {512: 0, 1024: 1, 2048: 2, 4096: 3}[args.ss]
    for directory in args.dirs:
        os.makedirs(directory, exist_ok=True)
        for suffix, reseal in ((".seed", 0), (".reseal.seed", 4)):
            with open(os.path.join(directory, args.name + suffix), "wb") as out:
                out.write(struct.pack("<QBII", length, flags | reseal, args.a, args.b) + body)


def put(img, at, data):
    with open(img, "r+b") as f:
        f.seek(at)
        f.write(data)


def md(args):
    size = os.path.getsize(args.img)
    if args.version == "0.90":
        at = (size & ~0xFFFF) - 0x10000
        words = {0: 0xA92B4EFC, 2: 90, 7: 1, 8: at // 1024, 9: 2, 10: 2, 995: 1}
        sb = bytearray(4096)
        for word, value in words.items():
            struct.pack_into("<I", sb, word * 4, value)
        total = sum(struct.unpack("<1024I", sb))
        struct.pack_into("<I", sb, 38 * 4, (total & 0xFFFFFFFF) + (total >> 32) & 0xFFFFFFFF)
        put(args.img, at, bytes(sb))
        return
    at = {"1.0": ((size // 512 - 16) & ~7) * 512, "1.1": 0, "1.2": 4096}[args.version]
    data_offset = 0 if args.version == "1.0" else 2048
    sb = bytearray(1024)
    struct.pack_into("<IIII", sb, 0, 0xA92B4EFC, 1, 0, 0)
    sb[32:32 + 10] = b"host:fuzz0"
    struct.pack_into("<iI", sb, 72, 1, 0)  # level, layout
    struct.pack_into("<QI", sb, 80, size // 512 - data_offset - 16, 0)  # size, chunk
    struct.pack_into("<I", sb, 92, 2)  # raid_disks
    struct.pack_into("<QQQ", sb, 128, data_offset, size // 512 - data_offset - 16, at // 512)
    struct.pack_into("<H", sb, 256, 0)  # dev_roles[dev_number 0]: slot 0
    put(args.img, at, bytes(sb))


def xdr_string(s):
    b = s.encode()
    return struct.pack(">I", len(b)) + b + b"\0" * ((4 - len(b) % 4) % 4)


def nvlist(pairs):
    out = bytes([0, 0, 0, 0, 0, 0, 0, 1])  # version, NV_UNIQUE_NAME
    for name, value in pairs:
        if isinstance(value, int):
            kind, body = 8, struct.pack(">Q", value)
        elif isinstance(value, str):
            kind, body = 9, xdr_string(value)
        else:
            kind, body = 19, nvlist(value)
        pair = xdr_string(name) + struct.pack(">II", kind, 1) + body
        encoded = len(pair) + 8
        out += struct.pack(">II", encoded, encoded * 2) + pair
    return out + bytes(8)


def zfs(args):
    size = os.path.getsize(args.img)
    tree = [("type", "disk"), ("id", 0), ("guid", 77), ("path", "/dev/sdb1"),
            ("whole_disk", 1), ("metaslab_array", 256), ("metaslab_shift", 29),
            ("ashift", args.ashift), ("asize", size - (4 << 20))]
    label = [("version", 5000), ("name", "tank"), ("state", 0), ("txg", 4),
             ("pool_guid", 1234), ("hostname", "host"), ("top_guid", 77),
             ("guid", 77), ("vdev_children", 1), ("vdev_tree", tree)]
    nv = bytes([1, 1, 0, 0]) + nvlist(label)
    for base in (0, 256 << 10):
        put(args.img, base + (16 << 10), nv)
        for slot in range(4):
            put(args.img, base + (128 << 10) + slot * 1024, struct.pack("<QQ", 0x00BAB10C, 5000))


def magic(args):
    sig = b"\x55\xaa"
    entry = lambda kind, start, size: bytes([0, 0, 0, 0, kind, 0, 0, 0]) + struct.pack("<II", start, size)
    writes = {
        "aix": [(0, b"\xc9\xc2\xd4\xc1")],
        "ldm": [(446, entry(0x42, 63, 20000)), (510, sig), (6 * 512, b"PRIVHEAD")],
        "ultrix": [(31 * 512 + 440, struct.pack("<II", 0x00032957, 1))],
        "karma": [(270 + 4, b"\x4d"), (270 + 12, struct.pack("<I", 100)), (510, b"\x56\xab")],
        "sysv68": [(248, b"MOTOROLA")],
    }
    for at, data in writes[args.name]:
        put(args.img, at, data)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    i = sub.add_parser("image")
    i.add_argument("img")
    i.add_argument("name")
    i.add_argument("dirs", nargs="+")
    i.add_argument("--ss", type=int, default=512, choices=[512, 1024, 2048, 4096])
    i.add_argument("--a", type=int, default=0)
    i.add_argument("--b", type=int, default=0)
    i.add_argument("--budget", type=int, default=48 << 10)
    i.set_defaults(run=pack)
    m = sub.add_parser("md")
    m.add_argument("version", choices=["0.90", "1.0", "1.1", "1.2"])
    m.add_argument("img")
    m.set_defaults(run=md)
    z = sub.add_parser("zfs")
    z.add_argument("ashift", type=int)
    z.add_argument("img")
    z.set_defaults(run=zfs)
    g = sub.add_parser("magic")
    g.add_argument("name", choices=["aix", "ldm", "ultrix", "karma", "sysv68"])
    g.add_argument("img")
    g.set_defaults(run=magic)
    args = p.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
