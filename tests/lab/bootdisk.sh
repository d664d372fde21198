#!/usr/bin/env bash
# Boot lab: a real BIOS-bootable disk image (MBR, GRUB 2 i386-pc, the host's
# Debian kernel and an initramfs made by the real mkinitramfs from a
# configuration inside the image), booted in QEMU through SeaBIOS and GRUB,
# with power cuts. See docs/boot-lab.md. Runs as root.
#
#   bootdisk.sh build IMG --layout plain|bootpart|lvm [--size MiB] [--kernel VER]
#                         [--files N] [--compress gzip|lz4|zstd]
#                         [--generator initramfs-tools|dracut]
#   bootdisk.sh initramfs ROOTDIR BOOTDIR [VER]
#   bootdisk.sh mount IMG DIR        (prints the loop device)
#   bootdisk.sh umount DIR
#   bootdisk.sh fsck IMG             (e2fsck -fn of every ext4, the LV's too)
#   bootdisk.sh boot IMG LOG [--timeout S] [--kill-on REGEX [--kill-delay S]]
#                            [--cache none|directsync|writethrough]
#   bootdisk.sh selftest DIR         (build, hook check, boot, move, boot)
#
# build: BOOTDISK_APPEND replaces the kernel command line's "quiet" (e.g.
# BOOTDISK_APPEND="debug" to watch the initramfs); BOOTDISK_COMPRESS is the
# default of --compress (zstd).
# build prints KEY=VALUE lines on stdout: ROOT_PART, ROOT_START, ROOT_UUID,
# JOURNAL_PART, JOURNAL_UUID, BOOT_PART, BOOT_UUID, KERNEL_VER, and the
# layout's file system labels are blkroot, blkboot (bootpart, lvm) and
# blkjournal. In lvm the root partition is an LVM PV (volume group blkvg)
# whose LV root holds blkroot; the host needs no device-mapper: the LV is
# made without activation and reached through a loop device at its offset.
# boot prints BOOT_RESULT=poweroff|reboot|killed|timeout and BOOT_SECONDS and
# exits 0 (the guest powered off by itself), 1 (the guest rebooted: a panic,
# panic=-1 and -no-reboot; or QEMU failed), 3 (killed by --kill-on) or 124
# (timeout); QEMU's own messages go to LOG.qemu. mount attaches IMG (losetup
# and partx, kept until umount) and mounts the root at DIR, /boot at
# DIR/boot (bootpart) and the journal's fs at DIR/srv. Everything else goes
# to stderr.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
self="$here/$(basename "${BASH_SOURCE[0]}")"
source "$here/loop.sh"

die() { echo "bootdisk: $*" >&2; exit 2; }
say() { echo "bootdisk: $*" >&2; }

# Cleanup stack: commands run in reverse order on exit, success or failure.
cleanups=()
on_exit() { cleanups=("$1" "${cleanups[@]}"); }
run_cleanups() {
  local c
  for c in "${cleanups[@]}"; do eval "$c" >/dev/null 2>&1 || true; done
  cleanups=()
}
trap run_cleanups EXIT
trap 'exit 130' INT TERM

# attach IMG: a loop device over IMG with its partitions added by partx
# (the host kernel may have no partition parsers); prints the device.
attach() {
  local loop
  loop=$(losetup -f --show "$1")
  partx -a "$loop" 2>/dev/null || partx -u "$loop"
  udevadm settle 2>/dev/null || true
  echo "$loop"
}
# detach LOOP: its partitions and the device gone (loop.sh), or the next
# `boot` finds the image attached.
detach() {
  local file=""
  IFS= read -r file 2>/dev/null <"/sys/block/${1#/dev/}/loop/backing_file" || true
  partx -d "$1" 2>/dev/null || true
  losetup -d "$1"
  [ -z "$file" ] || loop_gone "$file" "$1" || die "detach $1 failed"
}

# part_by TAG LOOP VALUE: the partition node whose content blkid gives that
# TAG (LABEL, TYPE).
part_by() {
  local p
  for p in "$2"p*; do
    [ -b "$p" ] || continue
    if [ "$(blkid -p -o value -s "$1" "$p" 2>/dev/null)" = "$3" ]; then
      echo "$p"; return 0
    fi
  done
  return 1
}

# lv_loop PV: a loop device over the LV blkvg/root inside the PV partition
# (its one segment, from the first extent), for a host without
# device-mapper; prints it.
lv_loop() {
  local lvm=(--devices "$1" --driverloaded n --noheadings --units b --nosuffix) start size
  start=$(pvs "${lvm[@]}" -o pe_start "$1" 2>/dev/null | tr -d ' ')
  size=$(lvs "${lvm[@]}" -o lv_size blkvg/root 2>/dev/null | tr -d ' ')
  [ -n "$start" ] && [ -n "$size" ] || return 1
  losetup -f --show -o "$start" --sizelimit "$size" "$1"
}

# --- initramfs --------------------------------------------------------------

# The generator's command blkalign runs for another root (blkalign adds its
# own dracut module beside the host's): mkinitramfs with the root's
# /etc/initramfs-tools, or dracut with its /etc/dracut.conf{,.d}.
cmd_initramfs() {
  [ $# -ge 2 ] || die "usage: initramfs ROOTDIR BOOTDIR [VER]"
  local root=$1 boot=$2 ver=${3:-}
  if [ -z "$ver" ]; then
    ver=$(cd "$boot" && find . -maxdepth 1 -name 'vmlinuz-*' -printf '%f\n' | sed 's/^vmlinuz-//' | sort -V | tail -n1)
    [ -n "$ver" ] || die "no vmlinuz-* in $boot"
  fi
  [ -d "/lib/modules/$ver" ] || die "no /lib/modules/$ver on this host"
  if [ -d "$root/etc/initramfs-tools" ]; then
    mkinitramfs -d "$root/etc/initramfs-tools" -o "$boot/initrd.img-$ver" "$ver"
  else
    dracut --force --quiet --conf "$root/etc/dracut.conf" --confdir "$root/etc/dracut.conf.d" \
      "$boot/initrd.img-$ver" "$ver"
  fi
}

# dracut_config ROOT COMPRESS: /etc/dracut.conf{,.d} inside the image. Not
# host-only (the host's disks are not the guest's): the drivers below, and
# without the modules for layers this disk has not: a smaller image, which
# GRUB reads through the BIOS under TCG.
dracut_config() {
  local root=$1 compress=$2
  # dracut's zstd is level 15: 9.6 s an image here, against 4.2 s at
  # level 3 for an image of 14.5 MB instead of 13.0.
  [ "$compress" != zstd ] || compress="zstd -3 -q -T0"
  mkdir -p "$root/etc/dracut.conf.d"
  : >"$root/etc/dracut.conf"
  cat >"$root/etc/dracut.conf.d/50-bootlab.conf" <<EOF
hostonly="no"
compress="$compress"
drivers=" libata libahci ahci ata_piix ata_generic sd_mod crc32c_generic ext4 "
filesystems=" ext4 "
omit_dracutmodules+=" bcache btrfs crypt dm lvm mdraid nvdimm nvmf overlay-root qemu lunmask resume terminfo virtiofs kernel-modules-extra "
EOF
}

# initramfs_config ROOT COMPRESS: /etc/initramfs-tools inside the image.
initramfs_config() {
  local conf=$1/etc/initramfs-tools compress=$2
  mkdir -p "$conf"
  cp -a /etc/initramfs-tools/. "$conf/"
  mkdir -p "$conf"/{hooks,scripts,conf.d} "$conf"/scripts/{init-top,init-premount,local-top,local-premount,local-bottom,init-bottom}
  sed -i -e 's/^MODULES=.*/MODULES=list/' -e "s/^COMPRESS=.*/COMPRESS=$compress/" \
    -e 's/^BUSYBOX=.*/BUSYBOX=auto/' "$conf/initramfs.conf"
  grep -q '^COMPRESS=' "$conf/initramfs.conf" || echo "COMPRESS=$compress" >>"$conf/initramfs.conf"
  # No resume device: the resume hook would otherwise pick the host's swap
  # and the initramfs would look for it at every boot.
  echo "RESUME=none" >"$conf/conf.d/resume"
  # fsck.ext4 in the initramfs whatever the host's /etc/fstab says (the
  # fsck hook reads the host's, not the image's, unless FSTYPE is set).
  if grep -q '^FSTYPE=' "$conf/initramfs.conf"; then
    sed -i 's/^FSTYPE=.*/FSTYPE=ext4/' "$conf/initramfs.conf"
  else
    echo "FSTYPE=ext4" >>"$conf/initramfs.conf"
  fi
  cat >"$conf/modules" <<'EOF'
# Boot lab: what finds the disk on QEMU's AHCI (or IDE) controller, and ext4.
libata
libahci
ahci
ata_piix
ata_generic
sd_mod
crc32c_generic
ext4
EOF
}

# --- build ------------------------------------------------------------------

cmd_build() {
  local img="" layout="" size=320 ver files=32 compress=${BOOTDISK_COMPRESS:-zstd} generator=initramfs-tools
  ver=$(uname -r)
  [ -e "/boot/vmlinuz-$ver" ] || ver=$(find /boot -maxdepth 1 -name 'vmlinuz-*' -printf '%f\n' | sed 's/^vmlinuz-//' | sort -V | tail -n1)
  while [ $# -gt 0 ]; do
    case $1 in
      --layout) layout=$2; shift 2 ;;
      --size) size=$2; shift 2 ;;
      --kernel) ver=$2; shift 2 ;;
      --files) files=$2; shift 2 ;;
      --compress) compress=$2; shift 2 ;;
      --generator) generator=$2; shift 2 ;;
      -*) die "build: unknown option $1" ;;
      *) [ -z "$img" ] || die "build: one image"; img=$1; shift ;;
    esac
  done
  [ -n "$img" ] || die "usage: build IMG --layout plain|bootpart|lvm [--size MiB] [--kernel VER] [--files N]"
  case $layout in plain|bootpart|lvm) ;; *) die "build: --layout plain|bootpart|lvm" ;; esac
  [ -r "/boot/vmlinuz-$ver" ] || die "no /boot/vmlinuz-$ver"
  [ -d "/lib/modules/$ver" ] || die "no /lib/modules/$ver"
  [ -d /usr/lib/grub/i386-pc ] || die "grub-pc-bin is not installed (apt-get install grub-pc-bin)"
  case $generator in
    initramfs-tools) command -v mkinitramfs >/dev/null || die "initramfs-tools is not installed" ;;
    dracut) command -v dracut >/dev/null || die "dracut is not installed (apt-get install dracut-core)" ;;
    *) die "build: --generator initramfs-tools|dracut" ;;
  esac
  local bb
  bb=$(command -v busybox) || die "busybox-static is not installed"
  file -L "$bb" 2>/dev/null | grep -q 'statically linked' || [ ! -x /usr/bin/file ] || die "$bb is not static (busybox-static)"
  [ -z "$(losetup -j "$img" 2>/dev/null)" ] || die "$img is attached to a loop device"

  local t0=$SECONDS
  # Sectors. The journal fs (112 MiB: the 52 MiB `realign --at-boot` asks
  # for, three 16 MiB chunks a move at boot may save, beside GRUB with a
  # kernel and an initramfs while /boot moves: 96 MiB left 48.9 MiB free)
  # ends 1 MiB before the disk's end.
  local total=$((size * 2048)) jsize=$((112 * 2048))
  local jstart=$((total - 2048 - jsize))
  local rstart rsize bstart=63 bsize=$((64 * 2048)) table root_part boot_part journal_part
  if [ "$layout" = plain ]; then
    rstart=63
    rsize=$((total * 5 / 8 - 2048 * 4))
    root_part=1 boot_part=1 journal_part=2
    table="start=$rstart, size=$rsize, type=83, bootable
start=$jstart, size=$jsize, type=83"
  else
    # /boot at 63; the root (lvm: the PV) one sector past a MiB boundary
    # after it: odd, misaligned.
    rstart=$(( (bstart + bsize + 2047) / 2048 * 2048 + 1 ))
    rsize=$((total * 5 / 8 - bsize - 2048 * 4))
    root_part=2 boot_part=1 journal_part=3
    local rtype=83
    [ "$layout" = bootpart ] || rtype=8e
    table="start=$bstart, size=$bsize, type=83, bootable
start=$rstart, size=$rsize, type=$rtype
start=$jstart, size=$jsize, type=83"
  fi
  [ "$rsize" -ge $((64 * 2048)) ] || die "build: --size $size is too small"
  # p1 (the root in plain) can move right to 2048 with 2 MiB to spare.
  [ $((jstart - (rstart + rsize))) -ge $((2048 + 4096)) ] || die "build: no room to move"

  rm -f "$img"
  truncate -s "${size}M" "$img"
  printf 'label: dos\nunit: sectors\nsector-size: 512\n\n%s\n' "$table" | sfdisk -q --no-reread --no-tell-kernel "$img" >/dev/null

  local loop mnt
  loop=$(attach "$img")
  on_exit "detach $loop"
  local rdev="${loop}p$root_part" jdev="${loop}p$journal_part" bdev="${loop}p$boot_part"
  if [ ! -b "$rdev" ] || [ ! -b "$jdev" ]; then die "partx made no partitions on $loop"; fi
  # 4 KiB blocks (a small fs would get 1 KiB ones), everything initialised
  # now: no ext4lazyinit writing behind a power cut.
  local mkfs=(mkfs.ext4 -F -q -b 4096 -E "lazy_itable_init=0,lazy_journal_init=0")
  local pvdev=""
  if [ "$layout" = lvm ]; then
    pvdev=$rdev
    local lvm=(--devices "$pvdev")
    pvcreate -q "${lvm[@]}" "$pvdev" >&2
    vgcreate -q "${lvm[@]}" blkvg "$pvdev" >&2
    # (It warns that activation is off and the LV not zeroed: both meant.)
    lvcreate -q "${lvm[@]}" --driverloaded n -an -Zn -n root -l 100%FREE blkvg >&2
    rdev=$(lv_loop "$pvdev") || die "no LV root on $pvdev"
    on_exit "losetup -d $rdev"
  fi
  "${mkfs[@]}" -L blkroot "$rdev"
  "${mkfs[@]}" -L blkjournal "$jdev"
  [ "$layout" = plain ] || "${mkfs[@]}" -L blkboot "$bdev"
  local root_uuid journal_uuid boot_uuid
  root_uuid=$(blkid -p -o value -s UUID "$rdev")
  journal_uuid=$(blkid -p -o value -s UUID "$jdev")
  boot_uuid=$(blkid -p -o value -s UUID "$bdev")

  mnt=$(mktemp -d /tmp/bootdisk.XXXXXX)
  on_exit "rmdir $mnt"
  mount "$rdev" "$mnt"
  on_exit "umount $mnt"
  mkdir -p "$mnt/boot"
  if [ "$layout" != plain ]; then
    mount "$bdev" "$mnt/boot"
    on_exit "umount $mnt/boot"
  fi
  local root=$mnt bootdir=$mnt/boot grubpath=/boot
  [ "$layout" = plain ] || grubpath=""

  # The root: busybox and its applets, an init that checks and powers off.
  mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,run,tmp,mnt,srv,etc,data,checks}
  chmod 1777 "$root/tmp"
  cp "$bb" "$root/bin/busybox"
  local a
  while read -r a; do
    case $a in sbin/init|linuxrc|bin/busybox|"") continue ;; esac
    ln -sf /bin/busybox "$root/$a"
  done < <("$bb" --list-full)
  local rootspec=UUID=$root_uuid
  [ "$layout" != lvm ] || rootspec=/dev/mapper/blkvg-root
  {
    echo "$rootspec / ext4 ro 0 1"
    [ "$layout" = plain ] || echo "UUID=$boot_uuid /boot ext4 ro 0 2"
  } >"$root/etc/fstab"
  echo blklab >"$root/etc/hostname"
  # systemd (dracut's initramfs) switches only to a root that names its OS.
  printf 'NAME="blkalign boot lab"\nID=blklab\n' >"$root/etc/os-release"
  cat >"$root/sbin/init" <<'EOF'
#!/bin/sh
# Boot lab init (tests/lab/bootdisk.sh): report, check, power off. The root
# is read-only: nothing here writes to it.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
grep -q ' /proc ' /proc/mounts 2>/dev/null || mount -t proc proc /proc
grep -q ' /sys ' /proc/mounts || mount -t sysfs sysfs /sys
grep -q ' /dev ' /proc/mounts || mount -t devtmpfs devtmpfs /dev
src=
while read -r dev mp rest; do
  [ "$mp" = / ] && src=$dev
done </proc/mounts
real=$(readlink -f "$src")
# A dm device's start is its partition's (the LVM layout: the PV's).
part=/sys/class/block/${real##*/}
for s in "$part"/slaves/*; do [ -e "$s" ] && part=$s; done
start=$(cat "$part/start" 2>/dev/null || echo unknown)
echo "BOOTCHECK root=$src start=$start"
cd /
if sha256sum -c -s /checks/sums; then
  echo "BOOTCHECK sums ok"
else
  echo "BOOTCHECK sums FAILED"
fi
# bootlab.dd on the command line: how long dd takes to read the root
# partition here (scripts/boot-move-time sets it, beside a move's time).
if grep -q bootlab.dd /proc/cmdline; then
  echo 3 >/proc/sys/vm/drop_caches
  read -r t0 rest </proc/uptime
  dd if="$real" of=/dev/null bs=4M iflag=direct 2>/dev/null || dd if="$real" of=/dev/null bs=4M 2>/dev/null
  read -r t1 rest </proc/uptime
  echo "BOOTCHECK dd bytes=$(( $(cat "/sys/class/block/${real##*/}/size") * 512 )) seconds_x100=$(( ${t1%.*}${t1#*.} - ${t0%.*}${t0#*.} ))"
fi
echo "BOOTCHECK done"
sync
poweroff -f
EOF
  chmod 755 "$root/sbin/init"
  local i
  for i in $(seq -w 1 "$files"); do
    head -c $(( (RANDOM % 960 + 64) * 1024 + RANDOM % 4096 )) /dev/urandom >"$root/data/f$i.bin"
  done
  (cd "$root" && find data -type f -print0 | sort -z | xargs -0r sha256sum) >"$root/checks/sums"

  # /boot: the kernel and an initramfs made from the image's own config.
  cp "/boot/vmlinuz-$ver" "$bootdir/vmlinuz-$ver"
  if [ "$generator" = dracut ]; then
    dracut_config "$root" "$compress"
  else
    initramfs_config "$root" "$compress"
  fi
  local it0=$SECONDS
  cmd_initramfs "$root" "$bootdir" "$ver"
  say "initramfs ($generator, $compress): $(stat -c %s "$bootdir/initrd.img-$ver") bytes in $((SECONDS - it0)) s"

  # GRUB: boot code in the MBR, core.img in the gap before LBA 63 (no
  # --force: a core.img that does not fit fails here, not at boot).
  grub-install --target=i386-pc --no-floppy --boot-directory="$bootdir" \
    --modules="part_msdos ext2 biosdisk search_fs_uuid" "$loop" >&2
  local core=$bootdir/grub/i386-pc/core.img
  say "core.img: $(stat -c %s "$core") bytes, gap before LBA 63: $((62 * 512)) bytes"
  [ "$(stat -c %s "$core")" -le $((62 * 512)) ] || die "core.img does not fit the gap"
  cat >"$bootdir/grub/grub.cfg" <<EOF
# Boot lab (tests/lab/bootdisk.sh). Everything by UUID: the partitions move.
serial --unit=0 --speed=115200
terminal_input serial
terminal_output serial
set timeout=0
set default=0
search --no-floppy --fs-uuid --set=root $boot_uuid
menuentry "blkalign boot lab" {
  linux $grubpath/vmlinuz-$ver root=$rootspec ro console=ttyS0,115200 panic=-1 ${BOOTDISK_APPEND-quiet}
  initrd $grubpath/initrd.img-$ver
}
EOF
  sync
  run_cleanups
  say "built $img ($layout, ${size} MiB) in $((SECONDS - t0)) s"
  cat <<EOF
ROOT_PART=$root_part
ROOT_START=$rstart
ROOT_UUID=$root_uuid
JOURNAL_PART=$journal_part
JOURNAL_UUID=$journal_uuid
BOOT_PART=$boot_part
BOOT_UUID=$boot_uuid
KERNEL_VER=$ver
EOF
}

# --- mount / umount ---------------------------------------------------------

cmd_mount() {
  [ $# -eq 2 ] || die "usage: mount IMG DIR"
  local img=$1 dir=$2 loop rdev bdev jdev
  [ -z "$(losetup -j "$img")" ] || die "$img is already attached: $(losetup -j "$img")"
  loop=$(attach "$img")
  on_exit "detach $loop"
  if ! rdev=$(part_by LABEL "$loop" blkroot); then
    local pv
    pv=$(part_by TYPE "$loop" LVM2_member) || die "no blkroot file system on $loop"
    rdev=$(lv_loop "$pv") || die "no LV root on $pv"
    on_exit "losetup -d $rdev"
  fi
  mkdir -p "$dir"
  mount "$rdev" "$dir"
  on_exit "umount $dir"
  if bdev=$(part_by LABEL "$loop" blkboot); then
    mount "$bdev" "$dir/boot"
    on_exit "umount $dir/boot"
  fi
  if jdev=$(part_by LABEL "$loop" blkjournal); then
    mkdir -p "$dir/srv" 2>/dev/null || true
    mount "$jdev" "$dir/srv"
  fi
  cleanups=()   # success: leave it all attached until umount
  echo "$loop"
}

cmd_umount() {
  [ $# -eq 1 ] || die "usage: umount DIR"
  local dir=$1 src loop
  src=$(findmnt -n -o SOURCE --mountpoint "$dir") || die "$dir is not a mount point"
  loop=/dev/$(lsblk -no PKNAME "$src" 2>/dev/null | head -n1)
  [ "$loop" != /dev/ ] || loop=${src%p[0-9]*}
  local back=""
  IFS= read -r back 2>/dev/null <"/sys/block/${src#/dev/}/loop/backing_file" || true
  umount -R "$dir"
  # The LV's loop over a partition of the image's.
  case $back in /dev/loop*p*) losetup -d "$src"; loop=${back%p[0-9]*} ;; esac
  detach "$loop"
  echo "$loop"
}

# fsck IMG: e2fsck -fn of every partition (each holds an ext4, or the PV
# of the LV that does: then the LV's).
cmd_fsck() {
  [ $# -eq 1 ] || die "usage: fsck IMG"
  local loop p dev
  loop=$(attach "$1")
  on_exit "detach $loop"
  for p in "$loop"p*; do
    [ -b "$p" ] || continue
    if [ "$(blkid -p -o value -s TYPE "$p" 2>/dev/null)" = LVM2_member ]; then
      dev=$(lv_loop "$p") || die "no LV root on $p"
      on_exit "losetup -d $dev"
      e2fsck -fn "$dev" >&2 || die "e2fsck of the LV on $p"
    else
      e2fsck -fn "$p" >&2 || die "e2fsck $p"
    fi
  done
  say "fsck: every ext4 on $1 is clean"
}

# --- boot -------------------------------------------------------------------

cmd_boot() {
  local img="" log="" timeout=300 kill_on="" kill_delay=0 cache=${BOOTDISK_CACHE:-none}
  while [ $# -gt 0 ]; do
    case $1 in
      --timeout) timeout=$2; shift 2 ;;
      --kill-on) kill_on=$2; shift 2 ;;
      --kill-delay) kill_delay=$2; shift 2 ;;
      --cache) cache=$2; shift 2 ;;
      -*) die "boot: unknown option $1" ;;
      *) if [ -z "$img" ]; then img=$1; elif [ -z "$log" ]; then log=$1; else die "boot: too many arguments"; fi; shift ;;
    esac
  done
  [ -n "$log" ] || die "usage: boot IMG LOG [--timeout S] [--kill-on REGEX [--kill-delay S]]"
  [ -f "$img" ] || die "no image $img"
  [ -z "$(losetup -j "$img")" ] || die "$img is attached to a loop device (umount it first)"
  case $cache in none|directsync|writethrough) ;; *) die "boot: --cache none|directsync|writethrough" ;; esac
  # none and directsync open the image O_DIRECT; a file system refusing it
  # (tmpfs) gets writethrough, as honest.
  if [ "$cache" != writethrough ] && ! dd if="$img" of=/dev/null bs=4096 count=1 iflag=direct status=none 2>/dev/null; then
    say "O_DIRECT refused on $img: cache=writethrough"
    cache=writethrough
  fi
  : >"$log"
  local t0 qpid rc=0 result
  t0=$(date +%s%N)
  qemu-system-x86_64 -accel tcg -machine pc -m 512M -smp 1 \
    -display none -monitor none -serial "file:$log" -no-reboot \
    -drive "file=$img,format=raw,if=none,id=d0,cache=$cache,aio=threads" \
    -device ahci,id=a \
    -device ide-hd,drive=d0,bus=a.0,logical_block_size=512,physical_block_size=4096,bootindex=0 \
    -nic none </dev/null >>"$log.qemu" 2>&1 &
  qpid=$!
  on_exit "kill -9 $qpid"
  local deadline killed=0
  deadline=$((t0 + timeout * 1000000000))
  while kill -0 "$qpid" 2>/dev/null; do
    if [ -n "$kill_on" ] && grep -aqE -- "$kill_on" "$log" 2>/dev/null; then
      [ "$kill_delay" = 0 ] || sleep "$kill_delay"
      kill -9 "$qpid" 2>/dev/null || true
      killed=1
      break
    fi
    if [ "$(date +%s%N)" -ge "$deadline" ]; then
      kill -9 "$qpid" 2>/dev/null || true
      killed=2
      break
    fi
    sleep 0.05
  done
  wait "$qpid" 2>/dev/null || rc=$?
  cleanups=()
  local ms secs
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  secs=$((ms / 1000)).$((ms % 1000 / 100))
  if [ "$killed" = 1 ]; then
    result=killed rc=3
  elif [ "$killed" = 2 ]; then
    result=timeout rc=124
  elif [ "$rc" = 0 ] && grep -aq "reboot: Power down" "$log"; then
    result=poweroff
  else
    result=reboot rc=1
    [ ! -s "$log.qemu" ] || say "qemu: $(tail -n3 "$log.qemu")"
  fi
  say "boot: $result after $secs s (log $log)"
  echo "BOOT_RESULT=$result"
  echo "BOOT_SECONDS=$secs"
  return "$rc"
}

# --- selftest ---------------------------------------------------------------

# kv KEY TEXT: the value of KEY=VALUE in TEXT.
kv() { sed -n "s/^$1=//p" <<<"$2"; }

# selftest DIR: build a plain image, check that a hook and an init-premount
# script in the image's initramfs config are picked up, boot it, move the
# root from 63 to 2048 with sfdisk --move-data and boot again (GRUB finds
# /boot by UUID); then the bootpart layout once.
cmd_selftest() {
  [ $# -eq 1 ] || die "usage: selftest DIR"
  local d=$1 img out mnt start rc root_part root_start ver
  mkdir -p "$d"
  img=$d/plain.img mnt=$d/mnt
  out=$("$self" build "$img" --layout plain)
  echo "$out"
  root_part=$(kv ROOT_PART "$out") root_start=$(kv ROOT_START "$out") ver=$(kv KERNEL_VER "$out")
  "$self" mount "$img" "$mnt" >/dev/null
  cat >"$mnt/etc/initramfs-tools/hooks/bootlab-probe" <<'EOF'
#!/bin/sh
PREREQ=""
prereqs() { echo "$PREREQ"; }
case $1 in prereqs) prereqs; exit 0 ;; esac
echo "copied by the hook" >"$DESTDIR/etc/bootlab-probe"
EOF
  cat >"$mnt/etc/initramfs-tools/scripts/init-premount/bootlab-probe" <<'EOF'
#!/bin/sh
PREREQ=""
prereqs() { echo "$PREREQ"; }
case $1 in prereqs) prereqs; exit 0 ;; esac
echo "BOOTLAB premount: $(cat /etc/bootlab-probe) disks: $(ls /sys/block | tr '\n' ' ')"
EOF
  chmod 755 "$mnt/etc/initramfs-tools/hooks/bootlab-probe" "$mnt/etc/initramfs-tools/scripts/init-premount/bootlab-probe"
  "$self" initramfs "$mnt" "$mnt/boot" "$ver"
  "$self" umount "$mnt" >/dev/null
  "$self" boot "$img" "$d/boot1.log"
  grep -a 'BOOTLAB premount: copied by the hook' "$d/boot1.log" >&2 || die "selftest: the hook or init-premount script was not run"
  grep -aq "BOOTCHECK root=.* start=$root_start" "$d/boot1.log" || die "selftest: root not at $root_start"
  grep -aq 'BOOTCHECK sums ok' "$d/boot1.log" || die "selftest: sums"
  # Move the root to 2048 as the lead's code will, then boot through GRUB.
  local loop
  loop=$(losetup -f --show "$img")
  echo "2048," | sfdisk -q --no-reread --no-tell-kernel --move-data -N "$root_part" "$loop" >/dev/null 2>&1
  losetup -d "$loop"
  start=$(partx -g -o START -n "$root_part" "$img" | tr -d " ")
  [ "$start" = 2048 ] || die "selftest: the move left the root at $start"
  "$self" boot "$img" "$d/boot2.log"
  grep -aq 'BOOTCHECK root=.* start=2048' "$d/boot2.log" || die "selftest: moved root not at 2048"
  grep -aq 'BOOTCHECK sums ok' "$d/boot2.log" || die "selftest: sums after the move"
  # A power cut mid-boot leaves a bootable disk (nothing writes the root).
  rc=0
  "$self" boot "$img" "$d/boot3.log" --kill-on 'BOOTCHECK root=' || rc=$?
  [ "$rc" = 3 ] || die "selftest: --kill-on gave $rc, not 3"
  out=$("$self" build "$d/bootpart.img" --layout bootpart --files 4)
  root_start=$(kv ROOT_START "$out")
  "$self" boot "$d/bootpart.img" "$d/boot4.log"
  grep -aq "BOOTCHECK root=.* start=$root_start" "$d/boot4.log" || die "selftest: bootpart root not at $root_start"
  grep -aq 'BOOTCHECK sums ok' "$d/boot4.log" || die "selftest: bootpart sums"
  say "selftest passed"
}

cmd=${1:-}
[ $# -eq 0 ] || shift
case $cmd in
  build) cmd_build "$@" ;;
  initramfs) cmd_initramfs "$@" ;;
  mount) cmd_mount "$@" ;;
  umount) cmd_umount "$@" ;;
  fsck) cmd_fsck "$@" ;;
  boot) cmd_boot "$@" ;;
  selftest) cmd_selftest "$@" ;;
  *) die "usage: bootdisk.sh build|initramfs|mount|umount|fsck|boot|selftest ... (see the header)" ;;
esac
