package serverproc

import (
	"fmt"
	"os"
	"os/exec"
)

// A Watchdog outlives the runner only to end what the runner started: a
// shell in a session of its own (a Ctrl-C to the runner's group does not
// reach it) blocked reading a pipe whose write end only the runner holds.
// Close tells it the runner ended cleanly; an end of input without that
// means the runner died (SIGKILL, a crash), and it kills every process
// carrying the runner's mark (MarkEnv): what the parent-death signal,
// which reaches only a direct child, leaves behind (the service under
// `sh -c`, a daemon that left its group); and, where the lab makes
// cgroups (Cgroups), every process in the runner's, which also reaches
// one that cleared its environment, and removes them.
type Watchdog struct {
	w   *os.File
	cmd *exec.Cmd
}

// watchdogScript is the watchdog, run as sh -c SCRIPT sh RUNMARK BASE: it
// kills the marked processes, and the runner's cgroups in BASE ("": none),
// three times over, 0.2 s apart, for one being forked while a pass ran
// carries the mark too; then it removes the cgroups, deepest first (a
// process in one may have made its own below it, as removeTree knows),
// trying again for 5 s while a killed process is still exiting (one in
// the middle of an fsync exits when the fsync returns). A cgroup it could
// not remove it names on the runner's stderr, the one place left to say
// it, and exits 1: nothing else would tell that the dead runner left it.
const watchdogScript = `IFS= read -r line
[ "$line" = done ] && exit 0
for pass in 1 2 3; do
  for f in $(grep -lsxzE "` + MarkEnv + `=$1\.[0-9]+" /proc/[0-9]*/environ); do
    p=${f#/proc/}
    kill -9 "${p%/environ}" 2>/dev/null
  done
  if [ -n "$2" ]; then
    for d in "$2"/` + cgroupPrefix + `"$1".*; do
      [ -d "$d" ] && echo 1 > "$d/cgroup.kill" 2>/dev/null
    done
  fi
  sleep 0.2
done
[ -n "$2" ] || exit 0
try=1
while :; do
  left=
  for d in "$2"/` + cgroupPrefix + `"$1".*; do
    [ -d "$d" ] || continue
    find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || { left="$left $d"; echo 1 > "$d/cgroup.kill" 2>/dev/null; }
  done
  [ -z "$left" ] && exit 0
  [ "$try" -ge ` + watchdogTries + ` ] && break
  try=$((try + 1))
  sleep 0.2
done
echo "idemlab watchdog: the runner died and left cgroups it could not remove 5 s after their kill:$left (remove each with rmdir, deepest first, once no process is in it)" >&2
exit 1`

// watchdogTries is how many times, 0.2 s apart, the watchdog tries to
// remove the dead runner's cgroups: 5 s.
const watchdogTries = "25"

// StartWatchdog starts the runner's watchdog (Linux; elsewhere it does
// nothing). Close it on every way out of the run.
func StartWatchdog() (*Watchdog, error) {
	if !watchdogSupported {
		return &Watchdog{}, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start the watchdog: %w", err)
	}
	defer r.Close() // the watchdog has its copy
	cmd := exec.Command("sh", "-c", watchdogScript, "sh", runMark, Cgroups())
	cmd.Stdin = r
	cmd.Stderr = os.Stderr                          // where it says what it could not remove
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")} // no mark: it must not match itself
	cmd.SysProcAttr = watchdogAttr()
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("start the watchdog: %w", err)
	}
	return &Watchdog{w: w, cmd: cmd}, nil
}

// Close tells the watchdog the runner ended cleanly and waits for it to
// exit; safe to call again.
func (wd *Watchdog) Close() error {
	if wd == nil || wd.cmd == nil {
		return nil
	}
	_, err := fmt.Fprintln(wd.w, "done")
	wd.w.Close()
	if werr := wd.cmd.Wait(); err == nil {
		err = werr
	}
	wd.cmd = nil
	if err != nil {
		return fmt.Errorf("stop the watchdog: %w", err)
	}
	return nil
}
