# Kernel lab, a move never misaligns what is aligned (run by
# tests/it/kernel_lab_stacks.rs in the guest). Usage: keep.sh OUT SERIAL: one
# 512e disk. cryptsetup and LVM, told by the kernel's partition
# alignment_offset, make up for a partition at an odd LBA:
# - p1 at LBA 63: LUKS2 as cryptsetup makes it (payload 16 MiB + 512);
# - p2 at LBA 83969: a PV as pvcreate makes it (pe_start 1 MiB + 3584),
#   an LV holding ext4;
# - p3 at LBA 167937: LUKS2 with its payload forced to 16 MiB (--offset),
#   off with its partition, ext4 inside.
# Each opened: the kernel's alignment_offset of every mapping (before.json).
# Closed, then `blkalign audit --json` (audit.json), `realign DISK 1 --yes`
# and `realign DISK 2 --yes` (refusals: exit and words in refuse-N.json,
# the disk's MD5 before and after), and `realign DISK --yes` (moved.json).
# Reopened: the kernel's alignment_offset of every mapping and the
# partitions' starts (after.json), e2fsck -fn of both ext4s and the MD5
# of a file written before the move.
# Usage continued: SERIAL2 a 4096-byte disk holding a table written for
# 512-byte sectors (sized.json: the kernel's partition starts beside the
# audit); SERIAL3 a 512e disk held open with its first partition's bytes
# cached through the disk node while mkfs.ext4 writes through the
# partition's (stale.json: what a buffered read of the disk node sees, and
# the audit).
set -euo pipefail
BLKALIGN=$(lab_local "$BLKALIGN")
out=$1 d=$(lab_disk "$2") sized=$(lab_disk "$3") held=$(lab_disk "$4")
exec 2>"$out/build.err"
trap 'status=$?; [ "$status" -eq 0 ] || cat "$out/build.err"; exit "$status"' EXIT
export BLKALIGN_STATE_DIR=/tmp/state
mkdir -p /tmp/state /tmp/mnt

sgdisk -Z "$d" >/dev/null 2>&1 || true
printf 'label: dos\nstart=63, size=81920\nstart=83969, size=81920\nstart=167937, size=81920\n' |
  sfdisk -q "$d"
lab_settle
part_of() { echo "$1$([ -e "${1}p1" ] && echo p || true)$2"; }
part() { part_of "$d" "$1"; }
luks() { cryptsetup luksFormat -q --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 "$@" -; }
printf 'lab' | luks "$(part 1)"
printf 'lab' | luks --offset 32768 "$(part 3)"
pvcreate -qq "$(part 2)" && vgcreate -qq keepvg "$(part 2)"

open_all() {
  printf 'lab' | cryptsetup open --key-file - "$(part 1)" kept
  printf 'lab' | cryptsetup open --key-file - "$(part 3)" off
  vgchange -qq -ay keepvg
  lab_settle
}
close_all() {
  vgchange -qq -an keepvg
  cryptsetup close kept
  cryptsetup close off
  lab_settle
}
# offsets NAME...: {"NAME": the kernel's alignment_offset of /dev/mapper/NAME}
offsets() {
  local sep="" n
  printf '{'
  for n in "$@"; do
    printf '%s"%s": %s' "$sep" "$n" "$(<"/sys/block/$(basename "$(readlink -f "/dev/mapper/$n")")/alignment_offset")"
    sep=", "
  done
  printf '}'
}
starts() {
  local sep="" p
  printf '['
  for p in 1 2 3; do
    printf '%s%s' "$sep" "$(<"/sys/block/${d#/dev/}/$(basename "$(part "$p")")/start")"
    sep=", "
  done
  printf ']'
}

open_all
lvcreate -qq -y -L 8M -n lv keepvg
lab_settle
mkfs.ext4 -q -F /dev/mapper/keepvg-lv
mkfs.ext4 -q -F /dev/mapper/off
mount /dev/mapper/off /tmp/mnt
head -c 3000000 /dev/urandom >/tmp/mnt/file
sha=$(lab_sum /tmp/mnt/file)
umount /tmp/mnt
printf '{"offsets": %s, "starts": %s, "luks_dump": %s}\n' "$(offsets kept keepvg-lv off)" \
  "$(starts)" "$(cryptsetup luksDump --dump-json-metadata "$(part 1)")" \
  >"$out/before.json"
pvs --noheadings --units b --nosuffix -o pe_start "$(part 2)" | tr -d ' ' >"$out/pe_start.txt"
close_all

"$BLKALIGN" audit --json "$d" >"$out/audit.json" 2>"$out/audit.err" || true
"$BLKALIGN" audit "$d" >"$out/human.txt" 2>&1 || true
for n in 1 2; do
  before=$(lab_sum "$d")
  code=0
  "$BLKALIGN" realign "$d" "$n" --yes >/dev/null 2>"$out/refuse-$n.err" || code=$?
  after=$(lab_sum "$d")
  printf '{"exit": %s, "unchanged": %s}\n' "$code" "$([ "$before" = "$after" ] && echo true || echo false)" \
    >"$out/refuse-$n.json"
done
code=0
vgchange -qq -an keepvg
lab_settle
"$BLKALIGN" realign "$d" --yes >"$out/moved.out" 2>"$out/moved.err" || code=$?
lab_settle

open_all
fsck=0
e2fsck -fn /dev/mapper/off >/dev/null 2>&1 || fsck=$?
e2fsck -fn /dev/mapper/keepvg-lv >/dev/null 2>&1 || fsck=$?
mount -o ro /dev/mapper/off /tmp/mnt
same=$([ "$(lab_sum /tmp/mnt/file)" = "$sha" ] && echo true || echo false)
umount /tmp/mnt
printf '{"exit": %s, "offsets": %s, "starts": %s, "fsck": %s, "file_intact": %s}\n' "$code" \
  "$(offsets kept keepvg-lv off)" "$(starts)" "$fsck" "$same" >"$out/after.json"
close_all
"$BLKALIGN" audit --json "$d" >"$out/audit-after.json" 2>>"$out/audit.err" || true

# A 512-byte table on a 4096-byte disk: what the kernel made of it.
name=${sized#/dev/}
kstarts=""
for p in /sys/block/"$name"/"$name"*; do
  [ -e "$p/start" ] && read -r start <"$p/start" && kstarts+="${kstarts:+,}$start"
done
code=0
"$BLKALIGN" audit --json "$sized" >"$out/sized-audit.json" 2>>"$out/audit.err" || code=$?
printf '{"kernel_starts_512": [%s], "audit_exit": %s}\n' "$kstarts" "$code" >"$out/sized.json"

# The disk's page cache goes stale when a partition's node is written.
exec 3<"$held"
stale() { dd if="$held" bs=512 skip=$((2048 + 2)) count=1 2>/dev/null | od -An -tx1 | tr -d ' \n' | head -c 8; }
before=$(stale)
mkfs.ext4 -q -F "$(part_of "$held" 1)"
cached=$(stale)
code=0
"$BLKALIGN" audit --json "$held" >"$out/stale-audit.json" 2>>"$out/audit.err" || code=$?
"$BLKALIGN" advise --json "$held" >"$out/stale-advise.json" 2>>"$out/audit.err" || true
printf '{"before": "%s", "cached": "%s", "audit_exit": %s}\n' "$before" "$cached" "$code" \
  >"$out/stale.json"
exec 3<&-
