# Kernel lab, the kernel judges the tables (run by tests/it/linux_view.rs in the
# guest). Usage: tables.sh CORPUS OUT: for each CORPUS/CASE/disk.img, with
# its logical sector size in CORPUS/CASE/sector, attach it read-only on a
# loop device with partition scanning (the kernel's own parsers read the
# table) and write OUT/CASE.json: the partitions the kernel made (sysfs, in
# 512-byte units) and `blkalign audit --json` of the loop device (its
# stderr in OUT/CASE.err). Two cases at a time, and builtins where they
# do: every exec is slow under TCG.
set -euo pipefail
BLKALIGN=$(lab_local "$BLKALIGN")
# The kernel's parsers are the subject, not udev: its rules probed every
# partition each attach made (blkid, probe-bcache, LVM's and md's rules),
# which took most of the lab's time (165 s alone, 89 s without). The
# kernel's devtmpfs still makes the nodes.
udevadm control --exit
corpus=$1 out=$2

one() {
  local dir=${1%/} case dev name parts="" p exit=0 sector audit num start size
  case=${dir##*/}
  read -r sector <"$dir/sector" || [ -n "$sector" ] # written without a newline
  if ! dev=$(losetup -r -P -f --show -b "$sector" "$dir/disk.img" 2>"$out/$case.err"); then
    echo '{"error": "losetup failed"}' >"$out/$case.json"
    return
  fi
  name=${dev#/dev/}
  for p in /sys/block/"$name"/"$name"p*; do
    [ -e "$p/partition" ] || continue
    read -r num <"$p/partition" && read -r start <"$p/start" && read -r size <"$p/size"
    parts+="${parts:+,}[$num, $start, $size]"
  done
  "$BLKALIGN" audit --json "$dev" >"/tmp/$case.audit" 2>"$out/$case.err" || exit=$?
  IFS= read -r -d '' audit <"/tmp/$case.audit" || true
  read -r size <"/sys/block/$name/size"
  printf '{"dev": "%s", "size_512": %s, "kernel": [%s], "audit_exit": %s, "audit": %s}\n' \
    "$dev" "$size" "$parts" "$exit" "${audit:-null}" >"$out/$case.json"
  losetup -d "$dev"
}

cases=("$corpus"/*/) pids=()
for worker in 0 1; do
  (
    for ((i = worker; i < ${#cases[@]}; i += 2)); do one "${cases[i]}"; done
  ) &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
