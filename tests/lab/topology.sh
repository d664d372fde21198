# Kernel lab, topology per driver (run by tests/it/kernel_lab.rs in the guest).
# Usage: topology.sh OUT GEOMETRIES SERIAL... : for each disk attached with
# SERIAL, and for scsi_debug at each of GEOMETRIES (LOGICAL-EXP-LOWEST, comma
# separated: sector_size, physblk_exp, lowest_aligned), write OUT/LABEL.json: the kernel's topology (sysfs), an MBR with
# partitions at 63, 64 and 2048 as the kernel parsed it (start, size,
# alignment_offset), parted's align-check min per partition (without -s,
# which says nothing and exits by the last check alone), and
# `blkalign audit --json` of the disk (its stderr in OUT/LABEL.err), and
# the drive's own answers as the peers print them: hdparm -I (ATA
# IDENTIFY), sg_readcap -l (READ CAPACITY(16)), sg_vpd -p bl (Block
# Limits), nvme id-ns -o json and id-ctrl -o json, and lsblk -dno SERIAL.
set -euo pipefail
# Builtins wherever they do: under TCG every process the guest starts costs
# a quarter of a second or more (jq two), and this runs a record a disk.
BLKALIGN=$(lab_local "$BLKALIGN")
out=$1 geometries=$2
shift 2

# udev's watch re-reads a disk's partitions whenever a writer (sfdisk,
# parted) closes it, which meant waiting for udev twice a record. The
# kernel's partitions are in sysfs as soon as sfdisk returns, and the
# watch is the writers' lab's subject (writers.sh), not this one's.
mkdir -p /run/udev/rules.d
echo 'SUBSYSTEM=="block", ENV{DEVTYPE}=="disk", OPTIONS+="nowatch"' >/run/udev/rules.d/99-lab-nowatch.rules
udevadm control --reload
udevadm trigger --action=change --subsystem-match=block
lab_settle

# peer NAME COMMAND...: NAME's member of "peers": COMMAND's output (stdout
# and stderr) as a JSON string, null when it fails.
peers=""
peer() {
  local name=$1 text
  shift
  if text=$("$@" 2>&1); then lab_json_reply "$text"; else REPLY=null; fi
  peers+="${peers:+, }\"$name\": $REPLY"
}

# sys NAME FILE: the first line of /sys/block/NAME/FILE, in REPLY.
sys() {
  IFS= read -r REPLY <"/sys/block/$1/$2"
}

# record LABEL DEV
record() {
  local label=$1 dev=$2 name=${2#/dev/} n p parts="" exit=0 aligned start size offset kernel audit
  local t0=${EPOCHREALTIME/./} us
  printf 'label: dos\nstart=63,size=1\nstart=64,size=1984\nstart=2048,size=4096\n' |
    sfdisk -q "$dev" >/dev/null
  aligned=$'\n'$(parted "$dev" align-check min 1 align-check min 2 align-check min 3 </dev/null 2>&1 || true)$'\n'
  for n in 1 2 3; do
    p=$name/$name$n
    [ -d "/sys/block/$p" ] || p=$name/${name}p$n
    sys "$p" start && start=$REPLY
    sys "$p" size && size=$REPLY
    sys "$p" alignment_offset && offset=$REPLY
    parts+="${parts:+,}{\"number\": $n, \"start_512\": $start, \"size_512\": $size,"
    parts+=" \"alignment_offset\": $offset,"
    parts+=" \"parted_min\": $([[ $aligned == *$'\n'"$n aligned"$'\n'* ]] && echo true || echo false)}"
  done
  "$BLKALIGN" audit --json "$dev" >/tmp/audit.json 2>"$out/$label.err" || exit=$?
  kernel=""
  for p in queue/logical_block_size queue/physical_block_size alignment_offset \
    queue/minimum_io_size queue/optimal_io_size; do
    sys "$name" "$p"
    kernel+="${kernel:+ }$REPLY"
  done
  peers=""
  peer hdparm hdparm -I "$dev"
  peer readcap sg_readcap -l "$dev"
  peer vpd_bl sg_vpd -p bl "$dev"
  # nvme-cli answers nothing but NVMe; audit naming NVMe elsewhere still
  # fails the test (nvme null, protocol nvme).
  if [[ $name == nvme* ]]; then
    peers+=", \"nvme\": $(nvme id-ns -o json "$dev" 2>/dev/null || echo null)"
    peers+=", \"nvme_ctrl\": $(nvme id-ctrl -o json "$dev" 2>/dev/null || echo null)"
  else
    peers+=', "nvme": null, "nvme_ctrl": null'
  fi
  peer lsblk_serial lsblk -dno SERIAL "$dev"
  IFS= read -r -d '' audit </tmp/audit.json || true
  read -r logical physical offset minimum optimal <<<"$kernel"
  {
    printf '{"label": "%s", "dev": "%s", "partitions": [%s], "audit_exit": %s,\n' "$label" "$dev" "$parts" "$exit"
    printf '"kernel": {"logical": %s, "physical": %s, "alignment_offset": %s, "minimum_io": %s, "optimal_io": %s},\n' \
      "$logical" "$physical" "$offset" "$minimum" "$optimal"
    printf '"peers": {%s},\n"audit": %s,\n' "$peers" "$audit"
    us=$((${EPOCHREALTIME/./} - t0))
    printf '"seconds": %d.%02d, "setup_seconds": %s}\n' $((us / 1000000)) $((us % 1000000 / 10000)) "$setup"
  } >"$out/$label.json"
}

# Seconds it took to get a disk before its record (scsi_debug's load).
setup=0
for serial in "$@"; do
  record "$serial" "$(lab_disk "$serial")"
done

# scsi_debug: the drive with a physical sector of 2^exp logical ones, and
# its first aligned LBA (the XP jumper's drive: exp 3, lowest_aligned 7).
# scsi_debug_disk: the one disk whose model is scsi_debug, in REPLY (empty
# until it is there and has its size).
scsi_debug_disk() {
  local b model size
  for b in /sys/block/sd*; do
    IFS= read -r model <"$b/device/model" 2>/dev/null || continue
    [[ $model == scsi_debug* ]] || continue
    IFS= read -r size <"$b/size" || continue
    [ -b "/dev/${b##*/}" ] && [ "$size" != 0 ] && REPLY=/dev/${b##*/} && return 0
  done
  REPLY=
}

for geometry in ${geometries//,/ }; do
  IFS=- read -r logical exp lowest <<<"$geometry"
  t0=${EPOCHREALTIME/./}
  modprobe scsi_debug dev_size_mb=32 sector_size="$logical" physblk_exp="$exp" \
    lowest_aligned="$lowest"
  for _ in {1..100}; do
    scsi_debug_disk
    [ -n "$REPLY" ] && break
    sleep 0.1
  done
  dev=$REPLY
  [ -n "$dev" ] || { echo "scsi_debug made no disk" >&2; exit 1; }
  # sd probes asynchronously and udev then names the disk (lsblk's SERIAL
  # comes from udev's database): let both end.
  lab_settle
  us=$((${EPOCHREALTIME/./} - t0))
  setup=$((us / 1000000)).$((us % 1000000 / 100000))
  record "scsi_debug-$geometry" "$dev"
  modprobe -r scsi_debug
  for _ in {1..100}; do
    scsi_debug_disk
    [ -z "$REPLY" ] && break
    sleep 0.1
  done
done
