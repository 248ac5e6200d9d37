# Sourced by the bench/state-*.sh scripts. The machine is shared: wait_quiet waits
# until the 1-minute load average is below QUIET_LOAD (1.0), polling every 30 s for at
# most QUIET_WAIT seconds (900), then measures anyway. It prints what it saw on
# stderr and sets $quiet_load to the load average it started the measurement at.
# busy_s prints the machine's busy CPU seconds so far (all processes, /proc/stat), to
# tell how much CPU others used during a run.
QUIET_LOAD=${QUIET_LOAD:-1.0}
QUIET_WAIT=${QUIET_WAIT:-900}

wait_quiet() {
  local waited=0 l
  while :; do
    l=$(cut -d' ' -f1 /proc/loadavg)
    if awk -v l="$l" -v q="$QUIET_LOAD" 'BEGIN{exit !(l < q)}'; then break; fi
    if [ "$waited" -ge "$QUIET_WAIT" ]; then
      echo "load $l after ${waited}s: measuring anyway" >&2
      break
    fi
    local step=$((QUIET_WAIT - waited < 30 ? QUIET_WAIT - waited : 30)) # never past QUIET_WAIT
    sleep "$step"
    waited=$((waited + step))
  done
  quiet_load=$l
  echo "load $(cut -d' ' -f1-3 /proc/loadavg) (waited ${waited}s)" >&2
}

busy_s() { awk '/^cpu /{printf "%.2f", ($2+$3+$4+$7+$8+$9)/100; exit}' /proc/stat; }
