# Kernel lab, every crash state of a move (run by tests/kernel_lab.rs in the
# guest). Usage: crash.sh OUT LOG DISK512 REPLAY512 DISK4KN REPLAY4KN CASE...:
# serials of the log disk, and of a disk and its replay twin at 512 and at
# 4096 bytes per logical sector; the CASEs (named at the end) to run.
#
# For each case: the disk goes under dm-log-writes (the log on LOG). On top
# of it, a loop device with partition scanning is the disk blkalign moves
# (DISK's first 64 MiB) and a second one an ext4 holding blkalign's state
# and journal (the next 48 MiB), so one log orders the writes to both. The
# table and an ext4 with files are made, a mark is logged, `realign --yes`
# moves the partition, and the log is closed. Then every crash state is
# built on REPLAY: the log replayed up to each flush or FUA entry after the
# mark, and up to $BLKALIGN_LAB_SAMPLES (6) points chosen between them (the
# writes after the point lost); on a throwaway snapshot of it, the same two
# loop devices, the journal's file system mounted (ext4 recovers its own
# journal) and the same `realign --yes` rerun. OUT/CASE.json: the original
# run, and per state the entry, its kind, the partition's start as the
# kernel scanned it, the rerun's exit status, the partition's SHA-256
# against the original, e2fsck -fn, the table's verification (sfdisk
# --verify, sgdisk -v on GPT) and `blkalign audit`'s exit status.
set -euo pipefail
BLKALIGN=$(lab_local "$BLKALIGN")
out=$1 log=$(lab_disk "$2") samples=${BLKALIGN_LAB_SAMPLES:-6}
here=$(dirname "$0")
declare -A disk=([512]=$(lab_disk "$3") [4096]=$(lab_disk "$5"))
declare -A replay=([512]=$(lab_disk "$4") [4096]=$(lab_disk "$6"))

modprobe dm-snapshot
# udev's probes of every loop and dm device each state makes, and the waits
# for them, would cost more than the states: stop it (devtmpfs still makes
# the nodes) and tell dmsetup not to wait for it.
udevadm control --exit 2>/dev/null || true
lab_settle() { :; }
dm() { dmsetup --noudevsync --verifyudev "$@"; }
mkdir -p /tmp/j
truncate -s 64M /tmp/cow.img
cow=$(losetup -f --show /tmp/cow.img)
# The same loop numbers in the run and in every replay.
T=/dev/loop10 J=/dev/loop11
MiB=$((1 << 20))

sha() { head -c "$2" "$1" | sha256sum | cut -c1-64; }

# attach DEV SECTOR: the moved disk and the journal's file system on DEV.
attach() {
  losetup -P -b "$2" --sizelimit $((64 * MiB)) "$T" "$1"
  losetup -b "$2" -o $((64 * MiB)) --sizelimit $((48 * MiB)) "$J" "$1"
  lab_settle
}

detach() {
  umount /tmp/j 2>/dev/null || true
  losetup -d "$T" "$J"
}

# part N: partition N's node on the moved disk, and its size in bytes.
part() { echo "${T}p$1"; }
part_bytes() { echo $(($(<"/sys/class/block/${T#/dev/}p$1/size") * 512)); }
label() { [ "$(blkid -p -o value -s PTTYPE "$T")" = gpt ] && echo gpt || echo dos; }

realign() {
  BLKALIGN_STATE_DIR=/tmp/j/state "$BLKALIGN" realign "$T" "$@" --yes
}

# verdicts N SHA LABEL: the members judging the moved disk now.
verdicts() {
  local n=$1 want=$2 fsck=0 verify=0 audit=0 got start size
  # read, not $(cat): a process costs a quarter of a second under TCG.
  read -r start <"/sys/class/block/${T#/dev/}p$n/start" 2>/dev/null || start=null
  read -r size <"/sys/class/block/${T#/dev/}p$n/size" 2>/dev/null || size=0
  got=$(sha "$(part "$n")" $((size * 512)))
  e2fsck -fn "$(part "$n")" >/dev/null 2>&1 || fsck=$?
  if [ "$3" = gpt ]; then
    sgdisk -v "$T" >/tmp/verify 2>&1 || verify=$?
    grep -q 'No problems found' /tmp/verify || verify=1
  else
    sfdisk --verify "$T" >/dev/null 2>&1 || verify=$?
  fi
  "$BLKALIGN" audit "$T" >/dev/null 2>&1 || audit=$?
  printf '"same": %s, "fsck": %s, "verify": %s, "audit": %s, "start": %s' \
    "$([ "$got" = "$want" ] && echo true || echo false)" "$fsck" "$verify" "$audit" "$start"
}

# run_case NAME SECTOR N TABLE REALIGN-ARGS...: TABLE is a shell command
# writing the table to $T.
run_case() {
  local name=$1 ss=$2 n=$3 table=$4 dev=${disk[$2]} twin=${replay[$2]} sectors
  shift 4
  sectors=$(blockdev --getsz "$dev")
  blkdiscard -f -z "$dev" 2>/dev/null || dd if=/dev/zero of="$dev" bs=1M count=112 status=none
  dd if=/dev/zero of="$log" bs=1M count=1 status=none
  dm create lab-lw --table "0 $sectors log-writes $dev $log"
  attach /dev/mapper/lab-lw "$ss"
  eval "$table"
  lab_settle
  mkfs.ext4 -q -F "$(part "$n")"
  mkfs.ext4 -q -F "$J"
  mount "$(part "$n")" /tmp/j
  cp -r /usr/share/common-licenses /tmp/j/ 2>/dev/null || true
  head -c 1M /dev/urandom >/tmp/j/random
  umount /tmp/j
  mount "$J" /tmp/j
  mkdir -p /tmp/j/state
  local bytes want exit=0 label
  label=$(label)
  bytes=$(part_bytes "$n")
  want=$(sha "$(part "$n")" "$bytes")
  sync
  dm message lab-lw 0 mark start
  realign "$n" "$@" >/dev/null 2>"$out/$name.err" || exit=$?
  sync
  local first
  first=$(printf '{"name": "%s", "exit": %s, %s, "states": [' "$name" "$exit" "$(verdicts "$n" "$want" "$label")")
  detach
  for _ in $(seq 50); do dm remove lab-lw 2>/dev/null && break; sleep 0.2; done

  # The crash states: at the mark, after each flush or FUA that follows a
  # write (one after a bare flush is the same state), and SAMPLES points
  # between two of them (a prefix ending inside the writes a flush covered).
  python3 "$here/replay_log.py" list "$log" >/tmp/entries
  local mark points
  mark=$(awk '$4 == "start" {print $1}' /tmp/entries)
  points=$(awk -v mark="$mark" -v samples="$samples" -v seed="${BLKALIGN_LAB_SEED:-1}" '
    BEGIN { srand(seed) }
    $1 == mark { print $1 + 1, "mark"; last = $1; wrote = 0 }
    $1 > mark && $3 > 0 && $2 !~ /mark|discard/ { wrote = 1 }
    $1 > mark && $2 ~ /flush|fua/ && wrote {
      print $1 + 1, $2; if (last + 1 < $1) gaps[++n] = (last + 2) " " $1; last = $1; wrote = 0
    }
    END {
      for (i = 0; i < samples && n > 0; i++) {
        split(gaps[1 + int(rand() * n)], g, " ")
        print g[1] + int(rand() * (g[2] - g[1] + 1)), "between"
      }
    }
' /tmp/entries | sort -n -u -k1,1)
  blkdiscard -f -z "$twin" 2>/dev/null || dd if=/dev/zero of="$twin" bs=1M count=112 status=none
  local states="" upto kind rerun reply seen
  coproc replayer { python3 "$here/replay_log.py" serve "$log" "$twin"; }
  local started
  while read -r upto kind <&3; do
    started=$EPOCHREALTIME
    echo "$upto" >&"${replayer[1]}"
    read -r reply <&"${replayer[0]}"
    [ "$reply" = "ok $upto" ] || { echo "replay_log.py: $reply" >&2; exit 1; }
    dm create lab-snap --table "0 $sectors snapshot $twin $cow N 8"
    attach /dev/mapper/lab-snap "$ss"
    rerun=0
    # The kernel's partition as it scanned the state (a torn table may have none).
    read -r seen <"/sys/class/block/${T#/dev/}p$n/start" 2>/dev/null || seen=null
    mount "$J" /tmp/j
    realign "$n" "$@" >/dev/null 2>>"$out/$name.err" || rerun=$?
    states+="${states:+, }{\"entry\": $upto, \"kind\": \"$kind\", \"rerun\": $rerun, \"scanned_start\": $seen, $(verdicts "$n" "$want" "$label")"
    detach
    for _ in $(seq 20); do dm remove lab-snap 2>/dev/null && break; sleep 0.2; done
    states+=", \"ms\": $(((${EPOCHREALTIME/./} - ${started/./}) / 1000))}"
  done 3<<<"$points"
  exec {replayer[1]}>&-
  wait "$replayer_PID"
  printf '%s%s], "entries": %s}\n' "$first" "$states" "$(wc -l </tmp/entries)" >"$out/$name.json"
}

# A case: NAME SECTOR PARTITION TABLE REALIGN-ARGS...
crash_case() {
  case $1 in
    mbr-63-64) run_case "$1" 512 1 'printf "label: dos\nstart=63,size=8192\n" | sfdisk -q "$T"' --to 64 ;;
    mbr-63-2048) run_case "$1" 512 1 'printf "label: dos\nstart=63,size=8192\n" | sfdisk -q "$T"' --to 2048 ;;
    gpt-34-2048) run_case "$1" 512 1 'sgdisk -a 1 -n 1:34:+4M "$T" >/dev/null' --to 2048 ;;
    # Logical 6's EBR (16384) moves to 16383, before the copy covers it.
    logical) run_case "$1" 512 6 'printf "label: dos\nstart=2048,size=40000,type=5\nstart=2056,size=8192\nstart=16385,size=8192\n" | sfdisk -q "$T"' --to 16384 ;;
    4kn) run_case "$1" 4096 1 'printf "label: dos\nstart=5,size=1024\n" | sfdisk -q "$T"' --to 256 ;;
    *) echo "crash.sh: no case $1" >&2; exit 2 ;;
  esac
}

for name in "${@:7}"; do crash_case "$name"; done
