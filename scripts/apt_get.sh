# Sourced by scripts/test.sh: `apt_get ARGS...` runs apt-get and waits for another install instead of
# failing. DPkg::Lock::Timeout makes apt wait for dpkg's own lock only; the package lists' lock
# (`apt-get update`) and the archive cache's are taken without waiting, so a fresh machine running its
# own daily update fails at once with "Could not get lock". Those failures are retried, every
# APT_RETRY_S seconds (5) for up to APT_WAIT_S (600); any other failure returns at once.
apt_get() {
    local deadline=$((SECONDS + ${APT_WAIT_S:-600})) out status
    while true; do
        status=0
        out=$(apt-get -o DPkg::Lock::Timeout="${APT_WAIT_S:-600}" "$@" 2>&1) || status=$?
        printf '%s\n' "$out" >&2
        if [ "$status" -eq 0 ]; then
            return 0
        fi
        if ! grep -q "Could not get lock" <<<"$out" || [ "$SECONDS" -ge "$deadline" ]; then
            return "$status"
        fi
        echo "apt-get $1: another install holds apt's lock; trying again in ${APT_RETRY_S:-5} s" >&2
        sleep "${APT_RETRY_S:-5}"
    done
}
