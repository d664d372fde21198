# Several lab scripts in one boot (tests/it/common/lab.rs run_batch; a
# boot costs about 25 s of CPU under TCG):
#   batch.sh RW SCRIPT [ARG...] [-- SCRIPT [ARG...]]...
# runs each tests/lab/SCRIPT in turn, whatever the one before it did, with
# RW/NAME (NAME: SCRIPT without .sh) as its first argument, its output in
# RW/batch/NAME.log and its exit status and seconds in RW/batch/NAME.status.
# Between scripts /tmp/mnt is unmounted and /tmp/state (the scripts'
# journals) removed: each script was written for a guest of its own. Short
# on purpose: the command reaches the guest on the kernel's command line.
set -u
here=$(dirname "$0") rw=$1
shift
mkdir -p "$rw/batch"
while [ $# -gt 0 ]; do
  script=$1 args=()
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
  [ $# -eq 0 ] || shift
  name=${script%.sh} status=0 SECONDS=0
  bash "$here/$script" "$rw/$name" "${args[@]}" >"$rw/batch/$name.log" 2>&1 </dev/null || status=$?
  echo "$status $SECONDS" >"$rw/batch/$name.status"
  umount -q /tmp/mnt 2>/dev/null || true
  rm -rf /tmp/state /tmp/mnt
done
