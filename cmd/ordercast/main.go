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
)

func main() {
	if err := newRoot().Execute(); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.msg != "" {
				fmt.Fprintln(os.Stderr, "ordercast:", ee.msg)
			}
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "ordercast:", err)
		os.Exit(1)
	}
}

// exitError ends the process with a specific code.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }
