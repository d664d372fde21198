# Kernel lab, writers on a real kernel (run by tests/it/kernel_lab.rs in the
# guest). Usage: writers.sh OUT DISK512 DISK4KN BUSY: serials of a 512e
# disk, a 4Kn disk and a 512e disk for the refusals. Writes OUT/NAME.json
# (and NAME.err, the commands' stderr) for each step:
# - partition-512, partition-4kn: `blkalign partition --yes` on a blank
#   disk; the kernel's partitions (sysfs) after it, sfdisk's reading, audit;
# - realign-primary, realign-logical: an MBR partition at 63 (a logical at
#   an odd start) holding an ext4, moved by `realign --yes`; the kernel's
#   partition, the MD5 (lab_sum) of its bytes before and after, e2fsck, audit;
# - rescale-gpt-4096-512, rescale-dos-512-4096: a table written at one
#   logical sector size, `rescale --yes` on the disk attached at the other;
#   the same members as a move;
# - refuse-WHAT: partitions of BUSY in use (mounted, swap, an active PV,
#   an md member, an open LUKS, held O_EXCL by another process): realign
#   and partition dry runs and --yes, and the disk's MD5 (lab_sum) around them.
set -euo pipefail
BLKALIGN=$(lab_local "$BLKALIGN")
out=$1 d512=$(lab_disk "$2") d4kn=$(lab_disk "$3") busy=$(lab_disk "$4")

# Journals and backups need a real file system; the root is read-only.
truncate -s 256M /tmp/state.img
mkfs.ext4 -q /tmp/state.img
mkdir -p /tmp/state /tmp/mnt
mount -o loop /tmp/state.img /tmp/state
export BLKALIGN_STATE_DIR=/tmp/state

# kernel_parts DEV: the kernel's partitions as [number, start, size] (512 B).
kernel_parts() {
  local name=${1#/dev/} p list="" num start size
  for p in /sys/block/"$name"/"$name"*; do
    [ -e "$p/partition" ] || continue
    read -r num <"$p/partition" && read -r start <"$p/start" && read -r size <"$p/size"
    list+="${list:+, }[$num, $start, $size]"
  done
  echo "[$list]"
}

# audit_of DEV: audit's exit status and problem codes, as JSON members.
audit_of() {
  local exit=0 codes="" rest
  "$BLKALIGN" audit --json "$1" >/tmp/audit.json 2>>/tmp/err || exit=$?
  IFS= read -r -d '' rest </tmp/audit.json || true
  while [[ $rest =~ \"code\":\ \"([a-z_]*)\" ]]; do
    codes+="${codes:+,}\"${BASH_REMATCH[1]}\""
    rest=${rest#*"${BASH_REMATCH[0]}"}
  done
  printf '"audit_exit": %s, "audit_problems": [%s]' "$exit" "$codes"
}

# emit NAME JSON-MEMBERS: OUT/NAME.json, and the stderr gathered so far.
emit() {
  printf '{%s}\n' "$2" >"$out/$1.json"
  mv /tmp/err "$out/$1.err"
}


# Writing tables ---------------------------------------------------------
for disk in "512:$d512" "4kn:$d4kn"; do
  dev=${disk#*:}
  exit=0
  "$BLKALIGN" partition "$dev" --part 8MiB:efi --part 16MiB:linux --part rest:linux --yes \
    --backup "/tmp/state/backup-${disk%%:*}.bin" >/dev/null 2>>/tmp/err || exit=$?
  lab_settle
  sfdisk -J "$dev" >/tmp/sfdisk.json 2>>/tmp/err || echo null >/tmp/sfdisk.json
  emit "partition-${disk%%:*}" "\"exit\": $exit, \"kernel\": $(kernel_parts "$dev"), \
\"sector\": $(<"/sys/block/${dev#/dev/}/queue/logical_block_size"), \"sfdisk\": $(</tmp/sfdisk.json), $(audit_of "$dev")"
done

# Moving partitions -------------------------------------------------------
# realign_case NAME DEV N SCRIPT: a table by sfdisk, an ext4 with files in
# partition N, then `realign DEV N --yes`.
realign_case() {
  local name=$1 dev=$2 n=$3 part exit=0 before after fsck=0 bytes
  printf "$4" | sfdisk -q --wipe always "$dev" >/dev/null
  lab_settle
  part=${dev}$([ -e "${dev}p$n" ] && echo p || true)$n
  mkfs.ext4 -q -F "$part"
  mount "$part" /tmp/mnt
  cp -r /usr/share/common-licenses /tmp/mnt/ 2>/dev/null || true
  head -c 3M /dev/urandom >/tmp/mnt/random
  umount /tmp/mnt
  bytes=$(($(<"/sys/class/block/${part#/dev/}/size") * 512))
  before=$(lab_sum "$part" "$bytes")
  "$BLKALIGN" realign "$dev" "$n" --yes >/dev/null 2>>/tmp/err || exit=$?
  lab_settle
  after=$(lab_sum "$part" "$bytes")
  e2fsck -fn "$part" >/dev/null 2>>/tmp/err || fsck=$?
  sfdisk -J "$dev" >/tmp/sfdisk.json 2>>/tmp/err || echo null >/tmp/sfdisk.json
  emit "$name" "\"exit\": $exit, \"partition\": $n, \"kernel\": $(kernel_parts "$dev"), \
\"sum_before\": \"$before\", \"sum_after\": \"$after\", \"fsck\": $fsck, \
\"sfdisk\": $(</tmp/sfdisk.json), $(audit_of "$dev")"
}
realign_case realign-primary "$d512" 1 'label: dos\nstart=63,size=40000\n'
realign_case realign-logical "$d512" 5 'label: dos\nstart=2048,size=100000,type=5\nstart=2051,size=40000\n'

# Rescaling tables --------------------------------------------------------
# rescale_case NAME FROM N TABLE: TABLE (a command writing to $lo) on an
# image attached with FROM-byte sectors, an ext4 in partition N; then the
# image attached with the other size, as a disk taken out of a USB bridge
# that presented 4096, and `rescale DEV --from FROM --yes` run on it.
rescale_case() {
  local name=$1 from=$2 n=$3 to lo part exit=0 before after fsck=0 bytes
  to=$((from == 512 ? 4096 : 512))
  rm -f /tmp/state/rescale.img
  truncate -s 64M /tmp/state/rescale.img
  lo=$(losetup -f --show -P -b "$from" /tmp/state/rescale.img)
  eval "$4"
  lab_settle
  part=${lo}p$n
  mkfs.ext4 -q -F -b 4096 "$part"
  mount "$part" /tmp/mnt
  head -c 3M /dev/urandom >/tmp/mnt/random
  umount /tmp/mnt
  bytes=$(($(<"/sys/class/block/${part#/dev/}/size") * 512))
  before=$(lab_sum "$part" "$bytes")
  losetup -d "$lo"
  lo=$(losetup -f --show -P -b "$to" /tmp/state/rescale.img)
  lab_settle
  "$BLKALIGN" rescale "$lo" --from "$from" --yes --backup "/tmp/state/$name.bin" \
    >/dev/null 2>>/tmp/err || exit=$?
  lab_settle
  part=${lo}p$n
  after=$(lab_sum "$part" "$bytes" 2>>/tmp/err || true)
  e2fsck -fn "$part" >/dev/null 2>>/tmp/err || fsck=$?
  sfdisk -J "$lo" >/tmp/sfdisk.json 2>>/tmp/err || echo null >/tmp/sfdisk.json
  emit "$name" "\"exit\": $exit, \"partition\": $n, \"kernel\": $(kernel_parts "$lo"), \
\"sum_before\": \"$before\", \"sum_after\": \"$after\", \"fsck\": $fsck, \
\"sfdisk\": $(</tmp/sfdisk.json), $(audit_of "$lo")"
  losetup -d "$lo"
}
rescale_case rescale-gpt-4096-512 4096 1 'sgdisk -a 256 -n 1:256:+24M "$lo" >/dev/null'
rescale_case rescale-dos-512-4096 512 5 \
  'printf "label: dos\nstart=2048,size=40960,type=5\nstart=4096,size=32768\n" | sfdisk -q "$lo"'

# Refusals ---------------------------------------------------------------
# Seven partitions at odd starts (N mod 8), as small as what they hold
# allows: 4 MiB, 8 for the PV (its metadata and a 4 MiB LV). Every refusal
# hashes the whole disk three times or more, and under TCG MD5 reads about
# 50 MiB/s.
sgdisk -Z "$busy" >/dev/null 2>&1 || true
args=() start=2049
for n in 1 2 3 4 5 6 7; do
  mib=$([ "$n" = 3 ] && echo 8 || echo 4)
  args+=(-n "$n:$start:+${mib}M")
  start=$((start + mib * 2048 + 1))
done
sgdisk -a 1 "${args[@]}" "$busy" >/dev/null
lab_settle
p() { echo "${busy}$1"; }
# No lazy init: the mounted ext4 would go on zeroing its inode tables
# while the refusals hash the disk.
mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$(p 1)"
mkswap -q "$(p 2)"
pvcreate -qq "$(p 3)" && vgcreate -qq labvg "$(p 3)" && lvcreate -qq -an -L 4M -n lv labvg
vgchange -qq -an labvg
# A LUKS2 header of 1 MiB, not the default 16: one keyslot needs 256 KiB.
printf 'lab' | cryptsetup luksFormat -q --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 \
  --luks2-metadata-size 16k --luks2-keyslots-size 512k "$(p 6)" - 2>>/tmp/err
mkfs.ext4 -q -F "$(p 7)"
sync

# A hash of the whole disk once two in a row agree (md and ext4 may write
# a superblock just after they start).
stable_sum() {
  local a b
  a=$(lab_sum "$busy")
  for _ in 1 2 3 4 5; do
    b=$(lab_sum "$busy")
    [ "$a" = "$b" ] && break
    a=$b
  done
  echo "$a"
}

# refuse WHAT N COMMAND...: with partition N in use (one kind at a time),
# COMMAND's dry run and --yes, the disk's hash around them, and the
# partition --yes must name.
refuse() {
  local what=$1 n=$2 before after dry=0 yes=0
  shift 2
  before=$(stable_sum)
  "$BLKALIGN" "$@" >/dev/null 2>/tmp/dry.err || dry=$?
  "$BLKALIGN" "$@" --yes >/dev/null 2>/tmp/yes.err || yes=$?
  after=$(lab_sum "$busy")
  cat /tmp/dry.err /tmp/yes.err >>/tmp/err
  emit "refuse-$what" "\"dry_exit\": $dry, \"yes_exit\": $yes, \"sum_before\": \"$before\", \
\"sum_after\": \"$after\", \"command\": \"$*\", \"node\": \"${busy#/dev/}$n\", \
\"named\": $(grep -q "${busy#/dev/}$n" /tmp/yes.err && echo true || echo false)"
}

mount "$(p 1)" /tmp/mnt
sync -f /tmp/mnt
refuse mounted 1 realign "$busy" 1
refuse partition 1 partition "$busy" --part rest:linux --wipe --force --backup /tmp/state/busy.bin
umount /tmp/mnt

swapon "$(p 2)"
refuse swap 2 realign "$busy" 2
swapoff "$(p 2)"

vgchange -qq -ay labvg
refuse pv 3 realign "$busy" 3
vgchange -qq -an labvg

mdadm --create /dev/md0 --run --quiet --level=1 --raid-devices=2 --metadata=1.2 \
  --assume-clean --bitmap=none "$(p 4)" "$(p 5)" 2>>/tmp/err
refuse md 4 realign "$busy" 4
mdadm --stop /dev/md0 2>>/tmp/err

printf 'lab' | cryptsetup open "$(p 6)" labcrypt -
refuse luks 6 realign "$busy" 6
cryptsetup close labcrypt

python3 -c 'import os, sys, time; os.open(sys.argv[1], os.O_RDONLY | os.O_EXCL); print("held", flush=True); time.sleep(600)' "$(p 7)" >/tmp/held &
held=$!
for _ in $(seq 100); do [ -s /tmp/held ] && break; sleep 0.1; done
refuse excl 7 realign "$busy" 7
kill "$held"
