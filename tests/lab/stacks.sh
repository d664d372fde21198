# Kernel lab, live stacks (run by tests/it/kernel_lab_stacks.rs in the guest).
# Usage: stacks.sh OUT SERIAL1 SERIAL2: two 512e disks. Builds, in one boot:
# - md-mixed: LVM (an LV holding ext4) on md raid1 over a partition at LBA
#   63 of disk 1 and one at 2048 of disk 2 (so the kernel stacks -1);
# - md-aligned: the same on two partitions at 1 MiB multiples;
# - luks: LUKS2 on a partition at an odd LBA, opened, ext4 inside;
# - linear: a dm-linear from sector 7 of an aligned partition, ext4 inside;
# - pvshift: an LV (ext4) on a PV whose pe_start is 1 MiB + 3584 bytes
#   (pvcreate --dataalignmentoffset 7s) on an aligned partition;
# - bcache: a backing device (make-bcache -B, data offset 16 sectors) on a
#   partition at an odd LBA, registered, ext4 on bcache0; written apart
#   (bcache.json: the kernel's view of bcache0 and the audit's exit status,
#   audit-bcache.json, bcache-super-show.txt), as the kernel does not
#   stack its offset.
# Then writes to OUT: kernel.json, the kernel's view of each stacked device
# and disk (sysfs: alignment_offset, sector sizes, slaves, partitions with
# their start and alignment_offset); the peers' words as they print them
# (dmsetup-table.txt, pvs.txt, examine-PART.txt, cryptsetup-status.txt);
# and audit.json, one `blkalign audit --json` of every device and disk
# (stderr in audit.err, exit status in kernel.json; the build's in
# build.err, printed if the script fails); human.txt, the human report of
# md0 and disk 2; refusals.json, `realign --yes` of a held partition of each
# kind (exit status and stderr), beside lsblk.json (`lsblk -J -o NAME,PATH,TYPE`).
set -euo pipefail
BLKALIGN=$(lab_local "$BLKALIGN")
out=$1 d1=$(lab_disk "$2") d2=$(lab_disk "$3")
exec 2>"$out/build.err"
trap 'status=$?; [ "$status" -eq 0 ] || cat "$out/build.err"; exit "$status"' EXIT

# Disk 1: md member at 63, md member aligned, LUKS at an odd LBA, a PV,
# bcache at an odd LBA.
# Disk 2: md members aligned, and a partition the dm-linear maps from its
# sector 7 (a disk whose partitions are held cannot be opened whole).
sgdisk -Z "$d1" >/dev/null 2>&1 || true
sgdisk -Z "$d2" >/dev/null 2>&1 || true
sgdisk -a 1 -n 1:63:+40M -n 2:83968:+40M -n 3:167937:+32M -n 4:307200:+32M -n 5:372737:+32M \
  "$d1" >/dev/null
sgdisk -a 1 -n 1:2048:+40M -n 2:83968:+40M -n 3:399360:+40M "$d2" >/dev/null
lab_settle
part() { echo "$1$([ -e "${1}p1" ] && echo p || true)$2"; }

mdadm --create /dev/md0 --run --assume-clean --level=1 --raid-devices=2 --metadata=1.2 \
  "$(part "$d1" 1)" "$(part "$d2" 1)" >/dev/null
mdadm --create /dev/md1 --run --assume-clean --level=1 --raid-devices=2 --metadata=1.2 \
  "$(part "$d1" 2)" "$(part "$d2" 2)" >/dev/null
lab_settle
pvcreate -qq /dev/md0 && vgcreate -qq mdvg /dev/md0 && lvcreate -qq -y -L 8M -n lv mdvg
pvcreate -qq /dev/md1 && vgcreate -qq alignvg /dev/md1 && lvcreate -qq -y -L 8M -n lv alignvg
printf 'lab' | cryptsetup luksFormat -q --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 \
  "$(part "$d1" 3)" -
printf 'lab' | cryptsetup open --key-file - "$(part "$d1" 3)" crypt
dmsetup create lin --table "0 65536 linear $(part "$d2" 3) 7"
pvcreate -qq --dataalignmentoffset 7s "$(part "$d1" 4)" && vgcreate -qq shiftvg "$(part "$d1" 4)" &&
  lvcreate -qq -y -L 8M -n lv shiftvg
modprobe bcache
make-bcache -B "$(part "$d1" 5)" >/dev/null
lab_settle
# udev's bcache rule may have registered it already.
echo "$(part "$d1" 5)" >/sys/fs/bcache/register 2>/dev/null || true
for _ in $(seq 100); do [ -b /dev/bcache0 ] && break; sleep 0.1; done
mkfs.ext4 -q -F -b 4096 /dev/bcache0
lab_settle
for dev in /dev/mapper/mdvg-lv /dev/mapper/alignvg-lv /dev/mapper/crypt /dev/mapper/lin \
  /dev/mapper/shiftvg-lv; do
  mkfs.ext4 -q -F -b 4096 "$dev"
done
sync
lab_settle

# kdev NAME: the kernel's view of block device NAME (a disk, md or dm).
kdev() {
  local b=/sys/block/$1 s slaves=""
  for s in "$b"/slaves/*; do
    [ -e "$s" ] || continue
    slaves+="${slaves:+, }\"${s##*/}\""
  done
  printf '{"name": "%s", "alignment_offset": %s, "physical": %s, "slaves": [%s], "partitions": %s}' \
    "$1" "$(<"$b/alignment_offset")" "$(<"$b/queue/physical_block_size")" "$slaves" "$(kparts "$1")"
}

# kparts NAME: the kernel's partitions of disk NAME: number, name, start
# (512 B units) and alignment_offset.
kparts() {
  local p list=""
  for p in /sys/block/"$1"/"$1"*; do
    [ -e "$p/partition" ] || continue
    list+="${list:+, }{\"number\": $(<"$p/partition"), \"name\": \"${p##*/}\", \"start_512\": $(<"$p/start"), \"alignment_offset\": $(<"$p/alignment_offset")}"
  done
  echo "[$list]"
}

devices=(/dev/md0 /dev/mapper/mdvg-lv /dev/md1 /dev/mapper/alignvg-lv /dev/mapper/crypt
  /dev/mapper/lin /dev/mapper/shiftvg-lv "$d1" "$d2")
exit=0
"$BLKALIGN" audit --json "${devices[@]}" >"$out/audit.json" 2>"$out/audit.err" || exit=$?

# The peers, as they print it.
dmsetup table >"$out/dmsetup-table.txt"
pvs --noheadings --units b --nosuffix -o pv_name,pe_start --separator : >"$out/pvs.txt"
for p in "$(part "$d1" 1)" "$(part "$d2" 1)" "$(part "$d1" 2)" "$(part "$d2" 2)"; do
  mdadm --examine "$p" >"$out/examine-${p#/dev/}.txt"
done
cryptsetup status crypt >"$out/cryptsetup-status.txt"
bcache-super-show "$(part "$d1" 5)" >"$out/bcache-super-show.txt"
bexit=0
"$BLKALIGN" audit --json /dev/bcache0 >"$out/audit-bcache.json" 2>>"$out/audit.err" || bexit=$?
printf '{"audit_exit": %s, "bcache0": %s}\n' "$bexit" "$(kdev bcache0)" >"$out/bcache.json"

{
  printf '{"audit_exit": %s, "devices": {' "$exit"
  sep=""
  for dev in "${devices[@]}"; do
    printf '%s"%s": %s' "$sep" "$dev" "$(kdev "$(basename "$(readlink -f "$dev")")")"
    sep=", "
  done
  printf '}}\n'
} >"$out/kernel.json"
# The human report of a stacked device and a disk holding one.
"$BLKALIGN" audit /dev/md0 "$d2" /dev/bcache0 >"$out/human.txt" 2>&1 || true

# The in-use guard, every partition of both disks held: `realign DISK N
# --yes` must name partition N and what holds it (a dm-linear, md raid1,
# dm-crypt, an LV), as lsblk names them (lsblk.json).
export BLKALIGN_STATE_DIR=/tmp/state
refusals=""
for case in "$d2 3" "$d2 1" "$d1 3" "$d1 4"; do
  read -r disk n <<<"$case"
  code=0
  err=$("$BLKALIGN" realign "$disk" "$n" --yes 2>&1 >/dev/null) || code=$?
  lab_json_reply "$err"
  refusals+="${refusals:+, }{\"node\": \"$(part "$disk" "$n")\", \"exit\": $code, \"stderr\": $REPLY}"
done
echo "[$refusals]" >"$out/refusals.json"
lsblk -J -o NAME,PATH,TYPE >"$out/lsblk.json"
