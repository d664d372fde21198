# Kernel lab, topology per driver (run by tests/it/kernel_lab.rs in the guest).
# Usage: topology.sh OUT SERIAL... : for each disk attached with SERIAL, and
# for scsi_debug at every physblk_exp 0-3 x lowest_aligned x logical 512 and
# 4096, write OUT/LABEL.json: the kernel's topology (sysfs), an MBR with
# partitions at 63, 64 and 2048 as the kernel parsed it (start, size,
# alignment_offset), parted's align-check min per partition (without -s,
# which says nothing and exits by the last check alone), and
# `blkalign audit --json` of the disk (its stderr in OUT/LABEL.err), and
# the drive's own answers as the peers print them: hdparm -I (ATA
# IDENTIFY), sg_readcap -l (READ CAPACITY(16)), sg_vpd -p bl (Block
# Limits), nvme id-ns -o json and id-ctrl -o json, and lsblk -dno SERIAL.
set -euo pipefail
BLKALIGN=$(lab_local "$BLKALIGN")
out=$1
shift

q() { cat "/sys/block/$1/queue/$2"; }

# peer COMMAND...: its output (stdout and stderr) as a JSON string, null
# when it fails.
peer() {
  local text
  if text=$("$@" 2>&1); then jq -Rs . <<<"$text"; else echo null; fi
}

# record LABEL DEV
record() {
  local label=$1 dev=$2 name=${2#/dev/} n p parts="" exit=0 aligned
  printf 'label: dos\nstart=63,size=1\nstart=64,size=1984\nstart=2048,size=4096\n' |
    sfdisk -q "$dev" >/dev/null
  lab_settle
  aligned=$(parted "$dev" align-check min 1 align-check min 2 align-check min 3 </dev/null 2>&1 || true)
  lab_settle
  for n in 1 2 3; do
    p=/sys/block/$name/$name$n
    [ -d "$p" ] || p=/sys/block/$name/${name}p$n
    parts+="${parts:+,}{\"number\": $n, \"start_512\": $(cat "$p/start"), \"size_512\": $(cat "$p/size"),"
    parts+=" \"alignment_offset\": $(cat "$p/alignment_offset"),"
    parts+=" \"parted_min\": $(grep -qx "$n aligned" <<<"$aligned" && echo true || echo false)}"
  done
  "$BLKALIGN" audit --json "$dev" >/tmp/audit.json 2>"$out/$label.err" || exit=$?
  {
    printf '{"label": "%s", "dev": "%s", "partitions": [%s], "audit_exit": %s,\n' "$label" "$dev" "$parts" "$exit"
    printf '"kernel": {"logical": %s, "physical": %s, "alignment_offset": %s, "minimum_io": %s, "optimal_io": %s},\n' \
      "$(q "$name" logical_block_size)" "$(q "$name" physical_block_size)" \
      "$(cat "/sys/block/$name/alignment_offset")" "$(q "$name" minimum_io_size)" "$(q "$name" optimal_io_size)"
    printf '"peers": {"hdparm": %s, "readcap": %s, "vpd_bl": %s, "nvme": %s, "nvme_ctrl": %s, "lsblk_serial": %s},\n' \
      "$(peer hdparm -I "$dev")" "$(peer sg_readcap -l "$dev")" \
      "$(peer sg_vpd -p bl "$dev")" "$(nvme id-ns -o json "$dev" 2>/dev/null || echo null)" \
      "$(nvme id-ctrl -o json "$dev" 2>/dev/null || echo null)" "$(peer lsblk -dno SERIAL "$dev")"
    printf '"audit": '
    cat /tmp/audit.json
    printf '}\n'
  } >"$out/$label.json"
}

for serial in "$@"; do
  record "$serial" "$(lab_disk "$serial")"
done

# scsi_debug: the drive with a physical sector of 2^exp logical ones, and
# its first aligned LBA (the XP jumper's drive: exp 3, lowest_aligned 7).
# scsi_debug disk: the one disk whose model is scsi_debug, once it is there.
scsi_debug_disk() {
  local b
  for b in /sys/block/sd*; do
    grep -qs scsi_debug "$b/device/model" && [ -b "/dev/${b##*/}" ] && echo "/dev/${b##*/}"
  done
}

# Every first aligned LBA at 512 logical; at 4096, 4096 and 32768 physical.
for geometry in 512-{0-0,1-{0,1},2-{0..3},3-{0..7}} 4096-{0-0,3-{0,1}}; do
  IFS=- read -r logical exp lowest <<<"$geometry"
  modprobe scsi_debug dev_size_mb=32 sector_size="$logical" physblk_exp="$exp" \
    lowest_aligned="$lowest"
  dev=
  for _ in $(seq 100); do
    dev=$(scsi_debug_disk)
    [ -n "$dev" ] && [ "$(cat "/sys/block/${dev#/dev/}/size")" != 0 ] && break
    sleep 0.1
  done
  [ -n "$dev" ] || { echo "scsi_debug made no disk" >&2; exit 1; }
  lab_settle # sd probes asynchronously: let its first partition scan end
  record "scsi_debug-$geometry" "$dev"
  modprobe -r scsi_debug
  for _ in $(seq 100); do
    [ -z "$(scsi_debug_disk)" ] && break
    sleep 0.1
  done
done
