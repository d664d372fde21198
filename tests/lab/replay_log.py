"""Read and replay a dm-log-writes log (the kernel lab's crash states).

The log's format is the kernel's (drivers/md/dm-log-writes.c, documented
in Documentation/admin-guide/device-mapper/log-writes.rst): a super block
in the first sector (magic, version, entry count, sector size), then one
entry per logged bio in completion order, each a sector-sized header
(sector, sector count, flags, data length; a mark's name follows the
header) and, for a write, its data. A bio is logged only once a flush
covering it has completed, so a prefix of the log ending at a flush is a
state the disk could have been in after a power cut, and a prefix ending
anywhere is one where the writes after it never reached the platter.

Usage:
  replay_log.py list LOG              one line per entry: INDEX KIND SECTORS MARK
  replay_log.py serve LOG DEV         read entry numbers N from stdin, one a
                                      line and rising; after each, DEV holds
                                      entries 0..N-1 and "ok N" is printed
"""

import os
import struct
import sys

MAGIC = 0x6A736677736872
FLUSH, FUA, DISCARD, MARK = 1, 2, 4, 8
HEADER = struct.Struct("<QQQQ")


class LogError(Exception):
    pass


def entries(log):
    """Yield (index, sector, count, flags, mark, data offset) per entry."""
    log.seek(0)
    magic, version, count, sector_size = struct.unpack("<QQQI", log.read(28))
    if magic != MAGIC or version != 1:
        raise LogError(f"not a dm-log-writes log (magic {magic:#x}, version {version})")
    if sector_size < 512 or sector_size & (sector_size - 1):
        raise LogError(f"bad sector size {sector_size}")
    pos = sector_size
    for index in range(count):
        log.seek(pos)
        block = log.read(sector_size)
        if len(block) < sector_size:
            raise LogError(f"entry {index} of {count} is past the log's end")
        sector, nr, flags, data_len = HEADER.unpack_from(block)
        mark = block[HEADER.size:HEADER.size + data_len].decode() if flags & MARK else ""
        pos += sector_size
        yield index, sector, nr, flags, mark, pos, sector_size
        if not flags & (DISCARD | MARK):
            pos += nr * sector_size


def names(flags):
    out = [n for bit, n in ((FLUSH, "flush"), (FUA, "fua"), (DISCARD, "discard"), (MARK, "mark"))
           if flags & bit]
    return ",".join(out) or "write"


def apply(log, dev, first, last):
    """Write entries first..last-1 to the open device; a discard writes
    zeros (what the replay's target reads back after one is not defined,
    zeros are one answer the drive may give)."""
    for index, sector, nr, flags, _, data, size in entries(log):
        if index >= last:
            break
        if index < first or flags & MARK or nr == 0:
            continue
        os.lseek(dev, sector * size, os.SEEK_SET)
        if flags & DISCARD:
            os.write(dev, bytes(nr * size))
            continue
        log.seek(data)
        remaining = nr * size
        while remaining:
            chunk = log.read(min(remaining, 1 << 20))
            if not chunk:
                raise LogError(f"entry {index}'s data is past the log's end")
            os.write(dev, chunk)
            remaining -= len(chunk)
    os.fsync(dev)


def main(argv):
    if len(argv) == 3 and argv[1] == "list":
        with open(argv[2], "rb") as log:
            for index, _, nr, flags, mark, _, _ in entries(log):
                print(index, names(flags), nr, mark or "-")
        return 0
    if len(argv) == 4 and argv[1] == "serve":
        # One process for every state: Python starts slowly in an emulated guest.
        with open(argv[2], "rb") as log:
            dev = os.open(argv[3], os.O_WRONLY)
            try:
                applied = 0
                for line in sys.stdin:
                    upto = int(line)
                    apply(log, dev, applied, upto)
                    applied = max(applied, upto)
                    print("ok", upto, flush=True)
            finally:
                os.close(dev)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except LogError as e:
        print(f"replay_log: {e}", file=sys.stderr)
        sys.exit(1)
