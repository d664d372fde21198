# Sourced in the kernel lab's guest (scripts/kernel-lab) before the command:
# the modules the checks use, and helpers to find disks and report results.

# One modprobe for all: under TCG each process started costs a quarter of
# a second or more.
modprobe -qa loop dm-mod dm-log-writes dm-crypt md-mod raid1 raid0 2>/dev/null || true
# hdparm's udev rule runs a shell script for every ATA or SCSI disk that
# appears (power settings from /etc/hdparm.conf, which no check uses): under
# TCG 1.5-2.5 s a disk, and the labs add disks by the dozen (scsi_debug
# loads, a deleted disk rescanned). A same-named file in /run masks it.
mkdir -p /run/udev/rules.d
: >/run/udev/rules.d/85-hdparm.rules
udevadm control --reload 2>/dev/null || true
export LVM_SUPPRESS_FD_WARNINGS=1
# LVM and mdadm want somewhere to write; the root is read-only.
mkdir -p /tmp/lvm-run /tmp/lvm-cache
export LVM_SYSTEM_DIR=/etc/lvm

# lab_serial DEV: the serial the disk /dev/DEV was attached with, read as
# each driver shows it in sysfs (NVMe and virtio-blk: a serial file; SCSI
# and ATA: VPD page 0x80; USB: the USB device's iSerial). lab_serial_reply
# DEV leaves it in REPLY instead. Builtins where it can: under TCG every
# process started costs a quarter of a second, and lab_disk asks every
# block device (a loop device, with no drive behind it, is skipped).
lab_serial_reply() {
  local sys=/sys/block/$1 dir
  REPLY=
  if [ -r "$sys/serial" ]; then IFS= read -r REPLY <"$sys/serial" || true; return 0; fi
  [ -e "$sys/device" ] || return 0
  if [ -r "$sys/device/serial" ]; then
    IFS= read -r REPLY <"$sys/device/serial" || true
    REPLY=${REPLY// /}
    return 0
  fi
  if [ -r "$sys/device/vpd_pg80" ]; then REPLY=$(tail -c +5 "$sys/device/vpd_pg80" | tr -d '\0 '); return 0; fi
  dir=$(readlink -f "$sys/device")
  while [ -n "$dir" ] && [ "$dir" != / ]; do
    if [ -r "$dir/serial" ]; then IFS= read -r REPLY <"$dir/serial" || true; return 0; fi
    dir=${dir%/*}
  done
}
lab_serial() {
  lab_serial_reply "$1" && printf '%s\n' "$REPLY"
}

# lab_disk SERIAL: the /dev node of the disk attached with SERIAL.
lab_disk() {
  local b
  for b in /sys/block/*; do
    b=${b##*/}
    lab_serial_reply "$b" 2>/dev/null || true
    if [ "$REPLY" = "$1" ]; then echo "/dev/$b"; return 0; fi
  done
  echo "lab_disk: no disk with serial $1" >&2
  return 1
}
# lab_settle: wait until udev has handled every event. The guest runs
# udevd, whose watch rule re-reads a disk's partitions (removing and adding
# every node) after a writer closes it: sfdisk, parted and blkalign alike.
lab_settle() {
  udevadm settle --timeout=30 2>/dev/null || sleep 1
}

# lab_json_reply TEXT: TEXT as a JSON string in REPLY, with builtins (jq
# -Rs takes two seconds under TCG). Control characters other than newline,
# tab and return become '?'; other bytes are kept (UTF-8 in, UTF-8 out).
lab_json_reply() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\t'/\\t}
  s=${s//$'\r'/\\r}
  s=${s//[$'\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0c\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f\x7f']/?}
  REPLY="\"$s\""
}

# lab_sum PATH [BYTES [SKIP]]: the MD5 of BYTES of PATH (all of it) from
# byte SKIP (0), a block device read past its page cache (O_DIRECT: a
# disk's cached pages miss what was written through a partition's node).
# The labs compare bytes before and after a command in the same guest,
# against accidental change, for which MD5 is enough: under TCG it reads
# 96 MiB in 2 s where sha256sum takes 4.6 s, and the writers' lab hashes its
# busy disk 20 times or more.
lab_sum() {
  local s flags=skip_bytes
  [ -b "$1" ] && flags+=,direct
  [ -n "${2:-}" ] && flags+=,count_bytes
  s=$(dd if="$1" bs=4M iflag="$flags" skip="${3:-0}" ${2:+count="$2"} status=none | md5sum)
  printf '%s\n' "${s%% *}"
}

# lab_local FILE: a copy of FILE in the guest's memory, printed. Programs
# are read from the host through 9p, which is slow for large ones: a debug
# blkalign starts in seconds from there, in a fraction of one from /tmp.
lab_local() {
  local copy
  copy=$(mktemp "/tmp/$(basename "$1").XXXXXX")
  cp "$1" "$copy" && chmod +x "$copy" && echo "$copy"
}

export -f lab_serial_reply lab_serial lab_disk lab_settle lab_json_reply lab_sum lab_local
