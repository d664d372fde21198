# Kernel lab, a move at boot with the root on LVM (run by
# tests/it/kernel_lab_stacks.rs in the guest). Usage: atboot.sh OUT SERIAL:
# one disk of 512-byte sectors. p1 at LBA 63 holds a PV (pe_start 1 MiB, so
# its data is off a 4 KiB boundary too), VG bootvg, LV root with ext4 and a
# file; p2 an ext4 for the journal. The VG is active, as udev's LVM rules
# leave it in the initramfs before init-premount. The plan is the one
# `realign --at-boot` records (written here: no initramfs is built).
# `realign --at-boot-run PLAN` runs as the initramfs runs it: first with
# the LV mounted (refused.json: exit, the MD5 of the disk up to the journal's partition unchanged), then
# not (moved.json: exit, p1's start, the LV active again, the file's
# MD5, e2fsck, the kernel's alignment_offset of the LV, the audit).
set -euo pipefail
BLKALIGN=$(lab_local "$BLKALIGN")
out=$1 d=$(lab_disk "$2")
exec 2>"$out/build.err"
trap 'status=$?; [ "$status" -eq 0 ] || cat "$out/build.err"; exit "$status"' EXIT
export BLKALIGN_STATE_DIR=/tmp/state
mkdir -p /tmp/state /tmp/mnt

printf 'label: dos\nstart=63, size=204800\nstart=229376, size=131072\n' | sfdisk -q "$d"
lab_settle
part() { echo "$d$([ -e "${d}p1" ] && echo p || true)$1"; }
pvcreate -qq --dataalignment 1m "$(part 1)"
vgcreate -qq bootvg "$(part 1)"
lvcreate -qq -y -L 64M -n root bootvg
lab_settle
# No lazy init: a mounted ext4 would go on writing its inode tables while
# the refusal below checks that nothing changes the disk.
mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 /dev/bootvg/root
mkfs.ext4 -q -F "$(part 2)"
mount /dev/bootvg/root /tmp/mnt
head -c 5000000 /dev/urandom >/tmp/mnt/file
sha=$(lab_sum /tmp/mnt/file)
umount /tmp/mnt
pvs --noheadings --units b --nosuffix -o pe_start "$(part 1)" | tr -d ' ' >"$out/pe_start.txt"

size=$(( $(<"/sys/block/${d#/dev/}/size") * 512 ))
uuid=$(blkid -p -o value -s UUID "$(part 2)")
kernel=$(uname -r)
jq -n --argjson size "$size" --arg uuid "$uuid" --arg dev "$(part 2)" --arg disk "$d" \
  --arg kernel "$kernel" '{
    disk: $disk, identity: {size_bytes: $size, serial: null, wwid: null},
    table: [{partition: 1, start: 63, size: 204800}, {partition: 2, start: 229376, size: 131072}],
    moves: [{partition: 1, from: 63, to: 2048}],
    journal: {uuid: $uuid, fstype: "ext4", mountpoint: "/srv", device: $dev},
    generator: "initramfs-tools", kernel: $kernel, grub_redirect: false, scheduled: 0}' \
  >/tmp/plan.json
cp /tmp/plan.json "$out/plan.json"

# The disk up to the journal's partition (the refusal records its result
# there), summed with the LV mounted and synced both times: its unmount
# writes the superblock. (A buffered read of the disk's node saw neither.)
disk_sha() { sync && lab_sum "$d" $((229376 * 512)); }
mount /dev/bootvg/root /tmp/mnt
before=$(disk_sha)
set +e
"$BLKALIGN" realign --at-boot-run /tmp/plan.json >"$out/refused.out" 2>"$out/refused.err"
status=$?
set -e
after=$(disk_sha)
umount /tmp/mnt
printf '{"exit": %s, "unchanged": %s}\n' "$status" "$([ "$before" = "$after" ] && echo true || echo false)" \
  >"$out/refused.json"
umount /run/blkalign-journal 2>/dev/null || true

set +e
"$BLKALIGN" realign --at-boot-run /tmp/plan.json >"$out/moved.out" 2>"$out/moved.err"
status=$?
set -e
lab_settle
start=$(<"/sys/block/${d#/dev/}/$(basename "$(part 1)")/start")
active=false
[ -e /dev/bootvg/root ] && active=true
fsck=1 intact=false offset=-1
if $active; then
  set +e
  e2fsck -fn /dev/bootvg/root >"$out/fsck.out" 2>&1
  fsck=$?
  set -e
  mount -o ro /dev/bootvg/root /tmp/mnt
  [ "$(lab_sum /tmp/mnt/file)" = "$sha" ] && intact=true
  umount /tmp/mnt
  offset=$(<"/sys/block/$(basename "$(readlink -f /dev/bootvg/root)")/alignment_offset")
fi
vgchange -qq -an bootvg
set +e
"$BLKALIGN" audit "$d" >"$out/audit.out" 2>"$out/audit.err"
audit=$?
set -e
printf '{"exit": %s, "start": %s, "active": %s, "fsck": %s, "file_intact": %s, "alignment_offset": %s, "audit": %s}\n' \
  "$status" "$start" "$active" "$fsck" "$intact" "$offset" "$audit" >"$out/moved.json"
