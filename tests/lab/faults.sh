# Kernel lab, a move over a failing disk (run by tests/it/kernel_lab_stacks.rs
# in the guest). Usage: faults.sh OUT: OUT/f.bin is a file to store.
#
# The disk is scsi_debug's (96 MiB, 512e), whose medium errors are the
# kernel's own: reads of LBAs BAD..BAD+7 (one 4 KiB block of f.bin, inside
# an ext4 at LBA 63 of 80000 sectors) fail with MEDIUM ERROR once opts=2,
# writes do not, and the sectors stay unreadable after a write (a drive
# that cannot remap them). Before each case the disk is laid again from an
# image, with the errors off.
# - refused: `realign DISK 1 --yes`: the read check refuses, naming the
#   file; the disk's MD5 unchanged (refused.json).
# - undone: `--no-read-check` stops the move half-way; `--undo --yes` puts
#   it back: the partition's MD5 as before, e2fsck -fn (undone.json).
# - rescued: `--to 83968 --rescue --yes` (a destination clear of the bad
#   sectors, which would fail its verification); ddrescuelog's list of the
#   map, f.bin as moved (f.rescued) and as expected (f.bin with its bad
#   block zeroed: f.expected), e2fsck -fn (rescued.json).
# - vanished: the disk deleted mid-move and back under another name
#   (below).
# - write-undo, write-rerun: write errors from a device-mapper `error`
#   segment (below).
# - flakey-error_writes, flakey-drop_writes: dm-flakey (below).
# Each case: the journal's size and whether the marker in the file system
# is in it.
set -euo pipefail
BLKALIGN=$(lab_local "$BLKALIGN")
out=$1
exec 2>"$out/build.err"
trap 'status=$?; [ "$status" -eq 0 ] || cat "$out/build.err"; exit "$status"' EXIT
export BLKALIGN_STATE_DIR=/tmp/state
mkdir -p /tmp/state /tmp/files
MARK=BLKALIGN-LAB-MARKER-28

# The image: a table and an ext4 with f.bin and a marker file.
img=/tmp/disk.img
truncate -s 96M "$img"
printf 'label: dos\nstart=63, size=80000\n' | sfdisk -q "$img"
cp "$out/f.bin" /tmp/files/f.bin
printf "$MARK %.0s" {1..500} >/tmp/files/marker.txt
mkfs.ext4 -q -F -b 4096 -d /tmp/files -E offset=$((63 * 512)) "$img" 40000k
block=$(debugfs -R "bmap /f.bin 10" "$img?offset=$((63 * 512))" 2>/dev/null)
bad=$((63 + block * 8))

modprobe scsi_debug dev_size_mb=96 sector_size=512 physblk_exp=3 opts=0 \
  medium_error_start=$bad medium_error_count=8
lab_settle
host=$(ls -d /sys/bus/pseudo/drivers/scsi_debug/adapter*/host* | head -1)
d=/dev/$(ls "$host"/target*/*/block/ | head -1)
errors() { echo "$1" >/sys/bus/pseudo/drivers/scsi_debug/opts; }
# sha START SECTORS: the MD5 of the disk's sectors.
sha() { lab_sum "$d" $(($2 * 512)) $(($1 * 512)); }
# first_start: partition 1's start as the table on the disk says (sfdisk).
first_start() {
  [[ $(sfdisk -d "$d") =~ start=\ *([0-9]+) ]] && echo "${BASH_REMATCH[1]}"
}
fresh() {
  errors 0
  rm -rf /tmp/state/*
  dd if="$img" of="$d" bs=4M oflag=direct status=none
  blockdev --rereadpt "$d" 2>/dev/null || true
  lab_settle
}
journal() { echo "/tmp/state/journals/$(basename "$d")-p1.journal"; }
# journal_json [JOURNAL]: the journal's (partition 1's of $d) size and
# whether the marker is in it, as JSON members.
journal_json() {
  local j=${1:-$(journal)}
  printf '"journal_bytes": %s, "journal_has_marker": %s' "$(stat -c %s "$j" 2>/dev/null || echo -1)" \
    "$(grep -q "$MARK" "$j" 2>/dev/null && echo true || echo false)"
}
# landed NAME: where partition 1 of $d ended and whether it is whole, as
# JSON members: "start", "same" (its MD5 is $before), "fsck" (e2fsck -fn's
# exit, its output in OUT/NAME.fsck).
landed() {
  local start fsck=0
  start=$(first_start)
  e2fsck -fn "$d?offset=$((start * 512))" >"$out/$1.fsck" 2>&1 || fsck=$?
  printf '"start": %s, "same": %s, "fsck": %s' "$start" \
    "$([ "$(sha "$start" 80000)" = "$before" ] && echo true || echo false)" "$fsck"
}
realign() { # NAME ARGS...: run, keep stdout and stderr, print the exit status
  local name=$1 status=0
  shift
  "$BLKALIGN" realign "$d" "$@" >"$out/$name.out" 2>"$out/$name.err" || status=$?
  echo "$status"
}

# refused
fresh
before=$(sha 0 196608)
errors 2
exit=$(realign refused 1 --yes)
errors 0
printf '{"bad": %s, "exit": %s, "unchanged": %s}\n' "$bad" "$exit" \
  "$([ "$(sha 0 196608)" = "$before" ] && echo true || echo false)" >"$out/refused.json"

# undone
fresh
before=$(sha 63 80000)
errors 2
stop=$(realign stopped 1 --yes --no-read-check)
status=$("$BLKALIGN" realign --status "$(journal)" --json 2>/dev/null || true)
undo=$(realign undone --undo --yes --json)
errors 0
printf '{"bad": %s, "stop": %s, "status": %s, "exit": %s, %s, %s}\n' \
  "$bad" "$stop" "${status:-null}" "$undo" "$(landed undone)" "$(journal_json)" \
  >"$out/undone.json"

# rescued
fresh
errors 2
rescue=$(realign rescued 1 --to 83968 --rescue --yes --json)
errors 0
start=$(first_start)
ddrescuelog -l- -b 512 "$(journal).map" >"$out/rescued.list" || true
at="$d?offset=$((start * 512))"
fsck=0
e2fsck -fn "$at" >"$out/rescued.fsck" 2>&1 || fsck=$?
debugfs -R "dump /f.bin $out/f.rescued" "$at" 2>/dev/null
cp "$out/f.bin" "$out/f.expected"
dd if=/dev/zero of="$out/f.expected" bs=4096 seek=10 count=1 conv=notrunc status=none
debugfs -R "dump /marker.txt /tmp/marker.moved" "$at" 2>/dev/null
printf '{"bad": %s, "exit": %s, "start": %s, "fsck": %s, "marker_same": %s, %s}\n' \
  "$bad" "$rescue" "$start" "$fsck" \
  "$(cmp -s /tmp/files/marker.txt /tmp/marker.moved && echo true || echo false)" \
  "$(journal_json)" >"$out/rescued.json"

# vanished: the disk deleted mid-move, after its first chunk, as an unplug
# or a controller reset does (/sys/block/sdX/device/delete), its name kept
# taken by an open handle, then found by a SCSI host rescan under another
# name; the same command on the new name finishes (vanished.json). Slowed
# so the move is caught half-way: 64 KiB a command, 8 ms each, one at a
# time (at scsi_debug's queue depth a chunk's 256 commands ran side by
# side, and on a busy machine the whole move of 39 MiB ended, in 4.3 s,
# before the poll below saw its first chunk done): 8 MiB/s at most.
fresh
before=$(sha 63 80000)
old=${d#/dev/} old_journal=$(journal)
echo 64 >"/sys/block/$old/queue/max_sectors_kb"
echo 1 >"/sys/block/$old/device/queue_depth"
echo 2 >/sys/bus/pseudo/drivers/scsi_debug/delay
"$BLKALIGN" realign "$d" 1 --yes --no-read-check >"$out/vanished-stopped.out" \
  2>"$out/vanished-stopped.err" &
mover=$!
for _ in $(seq 200); do
  [[ $("$BLKALIGN" realign --status "$old_journal" --json 2>/dev/null) =~ \"chunks_done\":\ *([0-9]+) ]] &&
    [ "${BASH_REMATCH[1]}" -ge 1 ] && break
  sleep 0.2
done
exec 7<"$d"
echo 1 >"/sys/block/$old/device/delete"
stop=0
wait "$mover" || stop=$?
echo 0 >/sys/bus/pseudo/drivers/scsi_debug/delay
echo "- - -" >"/sys/class/scsi_host/${host##*/}/scan"
lab_settle
d=/dev/$(ls "$host"/target*/*/block/ | head -1)
exec 7<&-
exit=$(realign vanished 1 --yes)
printf '{"stop": %s, "old": "%s", "new": "%s", "exit": %s, %s, %s}\n' "$stop" "$old" \
  "${d#/dev/}" "$exit" "$(landed vanished)" "$(journal_json "$old_journal")" >"$out/vanished.json"

# Write errors, from device-mapper: the same image on a loop device under
# a dm table that is linear but for an `error` segment at LBA 81000, where
# the move's first chunk lands (the partition at 63 moving to 2048 ends at
# 82048). The move stops there; then either --undo (write-undo.json), or
# the table reloaded as plain linear, as a drive remapping the sector, and
# the same command again (write-rerun.json): the partition's MD5 where
# it ends, e2fsck -fn.
modprobe dm-mod
cp "$img" /tmp/dm.img
loopdev=$(losetup -f --show /tmp/dm.img)
size=$(blockdev --getsz "$loopdev")
# reload: faulty's device-mapper table replaced by the one on stdin, live.
reload() { dmsetup load faulty && dmsetup resume faulty; }
faulty_table() {
  printf '0 81000 linear %s 0\n81000 8 error\n81008 %s linear %s 81008\n' \
    "$loopdev" $((size - 81008)) "$loopdev"
}
d=/dev/mapper/faulty
for way in undo rerun; do
  dd if="$img" of="$loopdev" bs=4M oflag=direct status=none
  rm -rf /tmp/state/*
  faulty_table | dmsetup create faulty
  before=$(sha 63 80000)
  stop=$(realign "write-$way-stopped" 1 --yes)
  if [ "$way" = undo ]; then
    exit=$(realign "write-$way" --undo --yes)
    moved_to=63
  else
    printf '0 %s linear %s 0\n' "$size" "$loopdev" | reload
    exit=$(realign "write-$way" --yes)
    moved_to=2048
  fi
  printf '{"stop": %s, "exit": %s, "expected_start": %s, %s, %s}\n' "$stop" "$exit" \
    "$moved_to" "$(landed "write-$way")" "$(journal_json)" >"$out/write-$way.json"
  dmsetup remove faulty
done

# flakey-error_writes, flakey-drop_writes: the image under dm-flakey, down
# for the first run (every write failing, or acknowledged and dropped as a
# lying disk does), then up 4 s and down 1 s: the same command rerun until
# it finishes (30 runs at most). Each run goes on from the journal; a
# dropped write is found by the verification or the table's read-back.
for mode in error_writes drop_writes; do
  dd if="$img" of="$loopdev" bs=4M oflag=direct status=none
  rm -rf /tmp/state/*
  printf '0 %s flakey %s 0 0 1 1 %s\n' "$size" "$loopdev" "$mode" | dmsetup create faulty
  before=$(sha 63 80000)
  first=$(realign "flakey-$mode-1" 1 --yes)
  printf '0 %s flakey %s 0 4 1 1 %s\n' "$size" "$loopdev" "$mode" | reload
  runs=1 exit=$first
  while [ "$exit" != 0 ] && [ "$runs" -lt 30 ]; do
    runs=$((runs + 1))
    exit=$(realign "flakey-$mode-$runs" 1 --yes)
  done
  printf '0 %s linear %s 0\n' "$size" "$loopdev" | reload
  printf '{"first": %s, "runs": %s, "exit": %s, %s}\n' "$first" "$runs" "$exit" \
    "$(landed "flakey-$mode")" >"$out/flakey-$mode.json"
  dmsetup remove faulty
done
losetup -d "$loopdev"
