# Sourced by the bench scripts: root is the repository, dir a scratch
# directory removed at exit, pids the processes a script started (killed at
# exit; it appends to it), cpu PID the user+system ticks (1/100 s) a
# process has used.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dir=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$dir"
}
trap cleanup EXIT
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
