#!/usr/bin/env bash
# stress.sh runs a command under CPU hogs, the way a busy CI machine runs it:
#
#	bash test/stress.sh go -C test test -race -count=1 ./e2e/
#
# It starts HOGS (default 2) busy loops, runs the command, and kills the loops when
# it exits, whatever the way: success, failure, Ctrl-C or SIGTERM (which bash acts
# on once the command has ended). A loop also ends by itself as soon as this script
# is gone, even by SIGKILL, which no trap sees. The command's exit status is the
# script's. Linux only (/proc).
set -u

hogs=${HOGS:-2}
if [ "$#" -eq 0 ]; then
	echo "usage: [HOGS=n] $0 command [args...]" >&2
	exit 2
fi

# hog spins until process $1, the script, is no longer its parent: the script has
# exited, even by SIGKILL, and the hog was handed to init. It checks every 10,000
# iterations (a few milliseconds), which costs nothing measurable. (A check of the
# script's pid would miss an exited script that its own parent has not reaped yet.)
hog() {
	local parent rest
	while :; do
		for ((i = 0; i < 10000; i++)); do :; done
		read -r _ _ _ parent rest <"/proc/$BASHPID/stat" || return
		[ "$parent" = "$1" ] || return
	done
}

pids=()
stop_hogs() {
	if [ "${#pids[@]}" -gt 0 ]; then
		kill "${pids[@]}" 2>/dev/null
		wait "${pids[@]}" 2>/dev/null
		pids=()
	fi
}
trap stop_hogs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for ((n = 0; n < hogs; n++)); do
	hog $$ &
	pids+=("$!")
done
echo "stress: $hogs CPU hogs (pids ${pids[*]}) on $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
start=$SECONDS
"$@"
rc=$?
echo "stress: exit $rc after $((SECONDS - start)) s; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
exit "$rc"
