# cpu.sh: CPU counters for the measuring scripts (loadrun.sh, dataset3.sh), sourced, not run.
# Each prints clock ticks (getconf CLK_TCK per second) of utime+stime.

# pgcpu: the postmaster of $ORDERCAST_PG_STATE's PostgreSQL and its live backends (+ its reaped children's).
pgcpu() {
  local pm t c
  pm=$(head -1 "$ORDERCAST_PG_STATE/data/postmaster.pid")
  t=$(awk '{print $14+$15+$16+$17}' "/proc/$pm/stat")
  for c in $(pgrep -P "$pm"); do t=$((t + $(awk '{print $14+$15}' "/proc/$c/stat" 2>/dev/null || echo 0))); done
  echo "$t"
}

# proccpu PID: one process (0 if it is gone).
proccpu() { awk '{print $14+$15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
