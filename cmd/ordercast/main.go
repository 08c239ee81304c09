// Command ordercast runs the Ordercast order system and its operator tools.
//
//	ordercast up                      the whole system on the embedded broker, registry and SQLite
//	ordercast up --replay FILE ...    ... fed with the Online Retail data, optionally exiting with a report
//	ordercast run SERVICE --brokers   one service against an external Kafka cluster
//	ordercast replay FILE --url URL   replay the Online Retail data into a running checkout
//	ordercast topics list|create      topics with partitions, replication factor, min.insync.replicas
//	ordercast groups [GROUP...]       consumer groups: members, partitions, committed offsets, lag
//	ordercast dlq list|show|replay|purge --group G   the dead-letter tools
//
// Run `ordercast help COMMAND` for the flags of each.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
)

// EnvCPUProfile names a file to write a CPU profile (pprof) of the whole
// process to, from start to exit: how the load benchmarks in docs/benchmarks.md
// find the bottleneck of `ordercast up` or `run` (stop it with SIGTERM so it
// exits through main and the profile is written).
const EnvCPUProfile = "ORDERCAST_CPUPROFILE"

func main() { os.Exit(mainCode()) }

// mainCode runs the command and returns the exit status, after its deferred
// calls (the CPU profile) have run.
func mainCode() int {
	if path := os.Getenv(EnvCPUProfile); path != "" {
		f, err := os.Create(path)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "ordercast: %s=%s: %v\n", EnvCPUProfile, path, err)
			return 2
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	if err := newRoot().Execute(); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.msg != "" {
				fmt.Fprintln(os.Stderr, "ordercast:", ee.msg)
			}
			return ee.code
		}
		fmt.Fprintln(os.Stderr, "ordercast:", err)
		return 1
	}
	return 0
}

// exitError ends the process with a specific code.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }
