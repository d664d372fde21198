# Sourced by the lab scripts that attach images on the host (crash.sh's
# replay, bootdisk.sh).

# loop_gone FILE DEV...: wait until no DEV shows FILE as its backing file.
# `losetup -d` of a device that udev is still probing (a umount's change
# events) only marks it to go at the last close; until then the image
# counts as attached, and the next attach of the same file is refused. By
# the file, not by the device being free: another test may take the
# device the moment it goes. Returns 1 after 10 s, saying which.
loop_gone() {
  local file=$1 dev backing
  shift
  for dev in "$@"; do
    for _ in $(seq 100); do
      backing=
      IFS= read -r backing 2>/dev/null <"/sys/block/${dev#/dev/}/loop/backing_file" || true
      [ "$backing" = "$file" ] || break
      sleep 0.1
    done
    [ "$backing" != "$file" ] || { echo "$dev stays attached to $file" >&2; return 1; }
  done
}
