# Every crash state of a move, in two halves (tests/it/kernel_lab.rs):
#
#   crash.sh log OUT DISK512 DISK4KN CASE=LOG...   in the kernel lab's guest
#   crash.sh states OUT CASE LOG                    on the host, as root
#
# log: for each CASE, the disk of its sector size (a serial) goes under
# dm-log-writes, the log on the disk with serial LOG. On top of it, a loop
# device with partition scanning is the disk blkalign moves (the first
# 64 MiB) and a second one an ext4 holding blkalign's state and journal (the
# next 48 MiB), so one log orders the writes to both. The table and an ext4
# with files are made, a mark is logged, `realign --yes` moves the
# partition, and the log is closed. OUT/CASE.run: the move's exit status,
# its verdicts and the partition's original SHA-256. The undo case logs
# `realign --undo --yes` of a move that a failing sector stopped (before the
# mark), and its states are rerun with --undo.
#
# states: LOG is the log disk's image. Every crash state is built on a
# twin image: the log replayed up to each flush or FUA entry after the mark,
# and up to $BLKALIGN_LAB_SAMPLES (6) points chosen between them (the writes
# after the point lost); on a copy of it, the same two loop devices, the
# journal's file system mounted (ext4 recovers its own journal) and the same
# `realign --yes` rerun. Replaying needs no device-mapper, and the host runs
# each state at native speed where the emulated guest took 5-20 s. OUT/CASE.json:
# the original run, and per state the entry, its kind, the partition's start
# as the table gave it before the rerun, the rerun's exit status, the
# partition's SHA-256 against the original, e2fsck -fn, the table's
# verification (sfdisk --verify, sgdisk -v on GPT) and `blkalign audit`'s
# exit status.
set -euo pipefail
MiB=$((1 << 20))
here=$(cd "$(dirname "$0")" && pwd)
source "$here/loop.sh"

# case_def NAME: the case's sector size, partition, table (a shell command
# writing it to $T) and realign arguments; for an undo, the LBA that fails
# the move first (bad) and the start the partition keeps.
case_def() {
  bad= keeps=null
  case $1 in
    # 1 MiB chunks: four, each saved, two named by a header at a time.
    mbr-63-64) ss=512 n=1 table='printf "label: dos\nstart=63,size=8192\n" | sfdisk -q "$T"' args=(--to 64 --chunk-size 1MiB) ;;
    # A shift of one to two 512 KiB chunks: 496 KiB chunks, nine, each
    # write overwriting the sources of the second and third before it, so
    # the cursor trails by a chunk whose verification trails the write.
    mbr-63-2048) ss=512 n=1 table='printf "label: dos\nstart=63,size=8192\n" | sfdisk -q "$T"' args=(--to 2048 --chunk-size 512KiB) ;;
    gpt-34-2048) ss=512 n=1 table='sgdisk -a 1 -n 1:34:+4M "$T" >/dev/null' args=(--to 2048) ;;
    # Logical 6's EBR (16384) moves to 16383, before the copy covers it.
    logical) ss=512 n=6 table='printf "label: dos\nstart=2048,size=40000,type=5\nstart=2056,size=8192\nstart=16385,size=8192\n" | sfdisk -q "$T"' args=(--to 16384) ;;
    4kn) ss=4096 n=1 table='printf "label: dos\nstart=5,size=1024\n" | sfdisk -q "$T"' args=(--to 256) ;;
    # 20 MiB in two chunks: the move copies the last 16 MiB, stops on a
    # sector of the first 4 MiB that fails, and --undo moves them back.
    undo) ss=512 n=1 table='printf "label: dos\nstart=63,size=40960\n" | sfdisk -q "$T"' args=(--undo) bad=$((63 + 2048)) keeps=63 ;;
    *) echo "crash.sh: no case $1" >&2; exit 2 ;;
  esac
}

sha() { head -c "$2" "$1" | sha256sum | cut -c1-64; }

# attach DEV [JDEV]: the moved disk ($T) on DEV and the journal's file
# system ($J) on JDEV (DEV unless given). Under an undo's failing sectors
# the disk bypasses DEV's page cache: a read through it that failed in the
# readahead was seen to succeed later, with bytes that were never read.
attach() {
  losetup -P -b "$ss" ${bad:+--direct-io=on} --sizelimit $((64 * MiB)) "$T" "$1"
  losetup -b "$ss" -o $((64 * MiB)) --sizelimit $((48 * MiB)) "$J" "${2:-$1}"
}

detach() {
  umount "$mnt" 2>/dev/null || true
  losetup -d "$T" "$J"
}

part() { echo "${T}p$1"; }
label() { [ "$(blkid -p -o value -s PTTYPE "$T")" = gpt ] && echo gpt || echo dos; }

# realign [ARGS]: the case's realign (its arguments unless ARGS), --yes.
realign() {
  [ $# -gt 0 ] || set -- "${args[@]}"
  BLKALIGN_STATE_DIR=$mnt/state "$BLKALIGN" realign "$T" "$n" "$@" --yes
}

# verdicts SHA LABEL: the members judging the moved disk now.
verdicts() {
  local want=$1 fsck=0 verify=0 audit=0 unfinished=false got start size
  # read, not $(cat): a process costs a quarter of a second under TCG.
  read -r start <"/sys/class/block/${T#/dev/}p$n/start" 2>/dev/null || start=null
  read -r size <"/sys/class/block/${T#/dev/}p$n/size" 2>/dev/null || size=0
  got=$(sha "$(part "$n")" $((size * 512)))
  e2fsck -fn "$(part "$n")" >/dev/null 2>&1 || fsck=$?
  if [ "$2" = gpt ]; then
    sgdisk -v "$T" >"$work/verify" 2>&1 || verify=$?
    grep -q 'No problems found' "$work/verify" || verify=1
  else
    sfdisk --verify "$T" >/dev/null 2>&1 || verify=$?
  fi
  "$BLKALIGN" audit --json "$T" >"$work/audit" 2>/dev/null || audit=$?
  grep -q realign_unfinished "$work/audit" && unfinished=true
  printf '"same": %s, "fsck": %s, "verify": %s, "audit": %s, "unfinished": %s, "start": %s' \
    "$([ "$got" = "$want" ] && echo true || echo false)" "$fsck" "$verify" "$audit" "$unfinished" "$start"
}

# log_case NAME DISK LOG: the move under dm-log-writes (in the guest). For
# an undo, a dm table over the log (under the moved disk only: a write
# error on a block device is reported to every fsync of it) fails the
# sectors at $bad while a move runs (the read check skipped, as for a
# sector that fails mid-move); the table back to linear, the mark, and
# --undo is the run logged.
log_case() {
  local name=$1 dev=$2 log=$3 sectors want exit=0 stopped=null bytes over=/dev/mapper/lab-lw
  case_def "$name"
  sectors=$(blockdev --getsz "$dev")
  blkdiscard -f -z "$dev" 2>/dev/null || dd if=/dev/zero of="$dev" bs=1M count=112 status=none
  dm create lab-lw --table "0 $sectors log-writes $dev $log"
  if [ -n "$bad" ]; then
    dm create lab-bad --table "0 $sectors linear $over 0"
    over=/dev/mapper/lab-bad
  fi
  attach "$over" /dev/mapper/lab-lw
  eval "$table"
  mkfs.ext4 -q -F "$(part "$n")"
  mkfs.ext4 -q -F "$J"
  mount "$(part "$n")" "$mnt"
  cp -r /usr/share/common-licenses "$mnt/" 2>/dev/null || true
  head -c 1M /dev/urandom >"$mnt/random"
  umount "$mnt"
  mount "$J" "$mnt"
  mkdir -p "$mnt/state"
  bytes=$(($(<"/sys/class/block/${T#/dev/}p$n/size") * 512))
  want=$(sha "$(part "$n")" "$bytes")
  if [ -n "$bad" ]; then
    dm reload lab-bad --table "0 $bad linear /dev/mapper/lab-lw 0
$bad 8 error
$((bad + 8)) $((sectors - bad - 8)) linear /dev/mapper/lab-lw $((bad + 8))"
    dm resume lab-bad
    stopped=0
    realign --to 2048 --no-read-check >/dev/null 2>>"$out/$name.err" || stopped=$?
    dm reload lab-bad --table "0 $sectors linear /dev/mapper/lab-lw 0"
    dm resume lab-bad
  fi
  sync
  dm message lab-lw 0 mark start
  realign >/dev/null 2>>"$out/$name.err" || exit=$?
  sync
  printf '{"name": "%s", "exit": %s, "stopped": %s, "keeps": %s, "want": "%s", "label": "%s", "sectors": %s, %s}\n' \
    "$name" "$exit" "$stopped" "$keeps" "$want" "$(label)" "$sectors" "$(verdicts "$want" "$(label)")" >"$out/$name.run"
  detach
  [ -z "$bad" ] || for _ in $(seq 50); do dm remove lab-bad 2>/dev/null && break; sleep 0.2; done
  for _ in $(seq 50); do dm remove lab-lw 2>/dev/null && break; sleep 0.2; done
}

guest() {
  BLKALIGN=$(lab_local "$BLKALIGN")
  local -A disk=([512]=$(lab_disk "$1") [4096]=$(lab_disk "$2"))
  shift 2
  # udev's probes of every loop and dm device would cost more than the
  # moves: stop it (devtmpfs still makes the nodes), and dmsetup must not
  # wait for it.
  udevadm control --exit 2>/dev/null || true
  dm() { dmsetup --noudevsync --verifyudev "$@"; }
  work=/tmp mnt=/tmp/j T=/dev/loop10 J=/dev/loop11
  mkdir -p "$mnt"
  local spec
  for spec in "$@"; do
    case_def "${spec%%=*}"
    log_case "${spec%%=*}" "${disk[$ss]}" "$(lab_disk "${spec#*=}")"
  done
}

# The crash states: at the mark, after each flush or FUA that follows a
# write (one after a bare flush is the same state), and SAMPLES points
# between two of them (a prefix ending inside the writes a flush covered).
points() {
  python3 "$here/replay_log.py" list "$1" >"$work/entries"
  local mark
  mark=$(awk '$4 == "start" {print $1}' "$work/entries")
  awk -v mark="$mark" -v samples="${BLKALIGN_LAB_SAMPLES:-6}" -v seed="${BLKALIGN_LAB_SEED:-1}" '
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
' "$work/entries" | sort -n -u -k1,1
}

cleanup() {
  umount "$mnt" 2>/dev/null || true
  [ -n "${T:-}" ] && losetup -d "$T" 2>/dev/null || true
  [ -n "${J:-}" ] && losetup -d "$J" 2>/dev/null || true
  [ -n "${replayer_PID:-}" ] && kill "$replayer_PID" 2>/dev/null || true
  rm -rf "$work"
}

# host OUT CASE LOG: every crash state of CASE's logged move.
host() {
  local name=$1 log=$2 run want label sectors states="" upto kind rerun seen started
  run=$(<"$out/$name.run")
  want=$(jq -r .want <<<"$run") label=$(jq -r .label <<<"$run") sectors=$(jq -r .sectors <<<"$run")
  case_def "$name"
  # The record names the journal by path: the state directory must be
  # mounted where the guest had it, in a mount namespace of this case's own.
  work=$(mktemp -d) mnt=/tmp/j T= J=
  trap cleanup EXIT
  local twin=$work/twin.img state=$work/state.img
  truncate -s $((sectors * 512)) "$twin"
  coproc replayer { python3 "$here/replay_log.py" serve "$log" "$twin"; }
  while read -r upto kind <&3; do
    started=$EPOCHREALTIME
    echo "$upto" >&"${replayer[1]}"
    read -r reply <&"${replayer[0]}"
    [ "$reply" = "ok $upto" ] || { echo "replay_log.py: $reply" >&2; exit 1; }
    cp --sparse=always "$twin" "$state"
    T=$(losetup -f --show -P -b "$ss" --sizelimit $((64 * MiB)) "$state")
    J=$(losetup -f --show -b "$ss" -o $((64 * MiB)) --sizelimit $((48 * MiB)) "$state")
    # This kernel may parse no tables (the lab's does): partx adds what the
    # state's table says, as the kernel's scan would.
    partx -a "$T" 2>/dev/null || true
    read -r seen <"/sys/class/block/${T#/dev/}p$n/start" 2>/dev/null || seen=null
    mount "$J" "$mnt"
    rerun=0
    realign >/dev/null 2>>"$out/$name.err" || rerun=$?
    states+="${states:+, }{\"entry\": $upto, \"kind\": \"$kind\", \"rerun\": $rerun, \"scanned_start\": $seen, $(verdicts "$want" "$label")"
    detach
    loop_gone "$(realpath "$state")" "$T" "$J"
    T= J=
    states+=", \"ms\": $(((${EPOCHREALTIME/./} - ${started/./}) / 1000))}"
  done 3< <(points "$log")
  exec {replayer[1]}>&-
  wait "$replayer_PID"
  replayer_PID=
  jq -c --argjson states "[$states]" --argjson entries "$(wc -l <"$work/entries")" \
    '. + {states: $states, entries: $entries}' <<<"$run" >"$out/$name.json"
}

mode=$1 out=$2
shift 2
case $mode in
  log) guest "$@" ;;
  states) mkdir -p /tmp/j && exec unshare --mount --propagation private bash "$0" in-namespace "$out" "$@" ;;
  in-namespace) host "$@" ;;
  *) echo "crash.sh: no mode $mode" >&2; exit 2 ;;
esac
