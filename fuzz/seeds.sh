#!/usr/bin/env bash
# Seeds for the fuzz targets, from images the peer tools make: the corpus
# of tests/it/linux_view.rs (sfdisk, sgdisk, parted, xorriso, mkfs.*,
# pvcreate: needs root and its test binary), parted's bsd/sun/dvh/mac/
# atari/amiga labels and fdisk's nested BSD label (as tests/it/schemes_peers.rs makes
# them), mkfs.* file systems, cryptsetup's LUKS1/2, pvcreate/vgcreate/
# lvcreate on a loop device (root), make-bcache's backing and cache
# devices, md superblocks and ZFS labels written as tests/it/stack_peers.rs
# writes them, `sfdisk -d` scripts, and the journal
# of a real `blkalign realign` move. Each image is packed by fuzz/pack.py
# (its non-zero runs, at most 48 KiB) into fuzz/seeds/TARGET/, once as is
# and once asking the target to fix up checksums after mutation.
# What cannot be made here is skipped with the reason.
# Usage: fuzz/seeds.sh [OUT]     (default fuzz/seeds)
#   BLKALIGN=path/to/blkalign    for the journal seed (default target/debug/blkalign)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$(realpath -m "${1:-fuzz/seeds}")
blkalign=$(realpath -m "${BLKALIGN:-target/debug/blkalign}")
pack="$root/fuzz/pack.py"
MIB=$((1 << 20))

# Not tmpfs: realign refuses journals there.
work=$(mktemp -d /var/tmp/blkalign-seeds.XXXXXX)
loops=()
vg=""
cleanup() {
  if [ -n "$vg" ]; then
    vgremove -q -f --driverloaded n --config 'backup { backup = 0 archive = 0 }' "$vg" >/dev/null 2>&1 || true
  fi
  for lo in "${loops[@]}"; do losetup -d "$lo" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"

skip() { echo "seeds: skipped $1: $2" >&2; }
# needs TOOL...: true when all are installed, else says which is missing
needs() {
  local t
  for t in "$@"; do
    command -v "$t" >/dev/null || { skip "${what:-?}" "needs $t"; return 1; }
  done
}
# seed NAME IMG "TARGETS" [pack.py options]: NAME.seed and NAME.reseal.seed
# in each target's directory
seed() {
  local name=$1 img=$2 targets=$3 dirs=() t
  shift 3
  for t in $targets; do dirs+=("$out/$t"); done
  python3 "$pack" image "$img" "$name" "${dirs[@]}" "$@"
}
# script NAME IMG: sfdisk's dump of IMG's table as a script seed
script() {
  mkdir -p "$out/script"
  sfdisk -d "$2" >"$out/script/$1.sfdisk" 2>/dev/null || rm -f "$out/script/$1.sfdisk"
}
fresh() { rm -f "$1" && truncate -s "$2" "$1"; }
TABLES="table_read edit stack_walk"

rm -rf "$out"
mkdir -p "$out"

what="the corpus of tests/it/linux_view.rs"
if [ "$(id -u)" -ne 0 ]; then
  skip "$what" "needs root (loop devices)"
# Only the test that builds the corpus: the other boots the kernel lab,
# which makes no image (cargo test runs it).
elif ! (cd "$root" && BLKALIGN_LINUX_VIEW_DIR="$work/corpus" cargo test -q --test it \
  -- --exact linux_view::blkalign_reads_disks_as_linux_does --nocapture >"$work/linux_view.log" 2>&1) &&
  [ ! -d "$work/corpus" ]; then
  skip "$what" "the test did not run: $(tail -3 "$work/linux_view.log")"
else
  for dir in "$work"/corpus/*/; do
    case=$(basename "$dir")
    img="$dir/disk.img"
    [ -s "$img" ] || continue
    ss=512
    [[ $case == *4kn* ]] && ss=4096
    case $case in
      gpt_* | parted_gpt*) targets="gpt $TABLES" ;;
      iso_*) targets="fs $TABLES" ;;
      fat* | exfat* | ntfs* | ext4 | swap) targets="fs $TABLES" ;;
      lvm_*) targets="lvm stack_walk" ;;
      amiga_* | parted_amiga*) targets="amiga schemes $TABLES" ;;
      atari_* | parted_atari*) targets="atari schemes $TABLES" ;;
      *) targets="mbr $TABLES" ;;
    esac
    seed "$case" "$img" "$targets" --ss "$ss"
    script "$case" "$img"
  done
fi

what="parted's labels"
if needs parted; then
  for label in bsd sun dvh mac atari amiga pc98; do
    kind=(primary ext2)
    [[ $label == bsd || $label == sun ]] && kind=(ext2)
    fresh $label.img 64M
    parted -s $label.img mklabel $label
    parted -s -a none $label.img mkpart "${kind[@]}" 4MiB 9MiB
    # Misaligned where the label allows it (sun, amiga, pc98 round to cylinders).
    parted -s -a none $label.img mkpart "${kind[@]}" 18433s 40959s 2>/dev/null ||
      parted -s $label.img mkpart "${kind[@]}" 9MiB 20MiB
    targets="schemes $TABLES"
    [[ $label == amiga || $label == atari ]] && targets="$label $targets"
    seed "parted_$label" $label.img "$targets"
  done
fi

what="fdisk's BSD label nested in a DOS slice"
if needs fdisk; then
  fresh nested.img 64M
  printf 'o\nn\np\n1\n2048\n+40M\nt\na5\nb\ny\nn\na\n4096\n+4M\nt\na\n07\nn\nb\n16385\n+8M\nt\nb\n01\nw\nr\nw\n' |
    fdisk nested.img >/dev/null 2>&1
  seed nested_bsd nested.img "mbr schemes $TABLES"
fi

what="schemes only named"
for scheme in aix ldm ultrix karma sysv68; do
  fresh $scheme.img 8M
  python3 "$pack" magic $scheme $scheme.img
  seed "scheme_$scheme" $scheme.img "schemes table_read"
done

what="hand-written sfdisk scripts"
mkdir -p "$out/script"
printf 'label: gpt\nunit: sectors\nfirst-lba: 34\nlast-lba: 131038\nsector-size: 512\ngrain: 1MiB\n\n/dev/x1 : start=2048, size=4096, type=L, name="boot \\x22a\\x22", attrs="LegacyBIOSBootable"\n/dev/x2 : start=, size=+, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, uuid=1\n' \
  >"$out/script/hand_gpt.sfdisk"
printf 'label: dos\nlabel-id: 0x1234\n\nstart=63 size=1000 type=83 bootable\nsize=20%%; type=5\nsize=1M, type=S\nsize=rest type=V\n' \
  >"$out/script/hand_dos.sfdisk"

what="file systems by mkfs"
mkfs_seed() { # NAME SIZE COMMAND...: mkfs on a fresh image
  local name=$1 size=$2
  shift 2
  what="$name by $1"
  needs "$1" || return 0
  fresh "$name.img" "$size"
  if "$@" "$name.img" >/dev/null 2>&1; then
    seed "$name" "$name.img" "fs stack_walk" --a 2048 --b 4096
  else
    skip "$what" "$1 failed"
  fi
}
mkfs_seed ext2 16M mkfs.ext2 -q -F
mkfs_seed ext3 16M mkfs.ext3 -q -F
mkfs_seed ext4_64bit 16M mkfs.ext4 -q -F -O 64bit -L fuzz
mkfs_seed xfs 320M mkfs.xfs -q -f -L fuzz
mkfs_seed btrfs 128M mkfs.btrfs -q -f -L fuzz
mkfs_seed fat12 4M mkfs.vfat -F 12 -n FUZZ
mkfs_seed fat32_4k 64M mkfs.vfat -F 32 -S 4096
mkfs_seed exfat 64M mkfs.exfat -L fuzz
mkfs_seed ntfs 64M mkntfs -F -Q -L fuzz
mkfs_seed swap 16M mkswap -L fuzz
what="an ISO 9660 image by xorriso"
if needs xorriso; then
  mkdir -p tree && echo hello >tree/hello.txt
  xorriso -as mkisofs -o iso.img -R -V FUZZ tree/ >/dev/null 2>&1 && seed iso iso.img "fs stack_walk"
fi

what="LUKS1 and LUKS2 by cryptsetup"
if needs cryptsetup; then
  printf 'fuzz key' >key
  for version in luks1 luks2; do
    fresh $version.img 32M
    cryptsetup luksFormat -q --batch-mode --key-file key --pbkdf pbkdf2 --pbkdf-force-iterations 1000 \
      --type $version --label fuzz $version.img >/dev/null 2>&1 ||
      cryptsetup luksFormat -q --batch-mode --key-file key --type $version $version.img >/dev/null
    seed $version $version.img "luks stack_walk"
  done
fi

what="md superblocks"
for version in 0.90 1.0 1.1 1.2; do
  fresh md$version.img 64M
  if [ $version = 1.2 ] && command -v mkfs.ext4 >/dev/null; then
    mkfs.ext4 -q -F -E offset=$MIB md$version.img 16M
  fi
  python3 "$pack" md $version md$version.img
  seed "md$version" md$version.img "md stack_walk"
done

what="bcache superblocks by make-bcache"
if needs make-bcache; then
  fresh bcache_backing.img 64M
  make-bcache -B --data-offset 17 bcache_backing.img >/dev/null
  if command -v mkfs.ext4 >/dev/null; then
    mkfs.ext4 -q -F -E offset=$((17 * 512)) bcache_backing.img 16M
  fi
  seed bcache_backing bcache_backing.img "bcache stack_walk"
  fresh bcache_cache.img 64M
  make-bcache -C -b 256k bcache_cache.img >/dev/null
  seed bcache_cache bcache_cache.img "bcache stack_walk"
fi

what="ZFS labels"
for ashift in 9 12; do
  fresh zfs$ashift.img 80M
  python3 "$pack" zfs $ashift zfs$ashift.img
  seed "zfs_ashift$ashift" zfs$ashift.img "zfs stack_walk"
done

what="an LVM volume group by pvcreate, vgcreate and lvcreate"
lvm_cmd() { "$@" --config 'backup { backup = 0 archive = 0 }' >/dev/null 2>&1; }
if [ "$(id -u)" -ne 0 ]; then
  skip "$what" "needs root (loop devices)"
elif needs losetup pvcreate vgcreate lvcreate pvs; then
  fresh pv.img 64M
  lo=$(losetup -f --show pv.img)
  loops+=("$lo")
  vg="blkalignfuzz$$"
  if lvm_cmd pvcreate -q -y --devicesfile '' "$lo" && lvm_cmd vgcreate -q --devicesfile '' -s 4m "$vg" "$lo" &&
    lvm_cmd lvcreate -q --devicesfile '' --driverloaded n -an -Zn -y -L 8m -n one "$vg" &&
    lvm_cmd lvcreate -q --devicesfile '' --driverloaded n -an -Zn -y -L 12m -n two "$vg"; then
    pe_start=$(pvs --devicesfile '' --noheadings -o pe_start --units b --nosuffix "$lo" 2>/dev/null | tr -d ' ')
    # An ext4 in the second LV, whose first extent follows the first LV's 2.
    mkfs.ext4 -q -F -E offset=$((pe_start + 2 * 4 * MIB)) pv.img 12M
    cp --sparse=always pv.img lvm.img
    seed lvm_vg lvm.img "lvm stack_walk"
  else
    skip "$what" "the LVM tools failed"
  fi
  lvm_cmd vgremove -q -f --devicesfile '' --driverloaded n "$vg" || true
  vg=""
  losetup -d "$lo"
fi

what="a GPT disk whose partitions hold a stack"
if needs sfdisk; then
  fresh stack.img 256M
  printf 'label: gpt\nstart=2048, size=64M\nstart=133153, size=64M\nsize=32M\nsize=64M\n' |
    sfdisk -q stack.img >/dev/null
  place() { # PART IMG: IMG's first 64 MiB into partition PART
    [ -s "$2" ] || return 0
    local start
    start=$(sfdisk -d stack.img | sed -n "s/.*stack.img$1 : start= *\([0-9]*\).*/\1/p")
    dd if="$2" of=stack.img bs=512 seek="$start" count=$((64 * 2048)) conv=notrunc,sparse status=none
  }
  place 1 "${work}/lvm.img"
  place 2 "${work}/ext4_64bit.img"
  place 3 "${work}/luks2.img"
  place 4 "${work}/md1.2.img"
  seed gpt_stack stack.img "gpt $TABLES"
  script gpt_stack stack.img
fi

what="a realign journal"
if [ ! -x "$blkalign" ]; then
  skip "$what" "no binary at $blkalign (cargo build, or set BLKALIGN)"
elif needs sfdisk mkfs.ext4; then
  fresh move.img 64M
  printf 'label: dos\nstart=63, size=40000\n' | sfdisk -q move.img >/dev/null
  mkfs.ext4 -q -F -E offset=$((63 * 512)) move.img 16M
  if BLKALIGN_STATE_DIR="$work/state" "$blkalign" realign move.img --yes --journal "$work/move.journal" \
    >/dev/null 2>&1; then
    mkdir -p "$out/journal"
    { printf '\0'; head -c 65536 move.journal; } >"$out/journal/move.seed"
    { printf '\1'; head -c 65536 move.journal; } >"$out/journal/move.reseal.seed"
  else
    skip "$what" "blkalign realign failed"
  fi
fi

for dir in "$out"/*/; do
  echo "seeds: $(basename "$dir"): $(find "$dir" -type f | wc -l) files"
done
