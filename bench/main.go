// Command bench compares, on one backlog on a real Kafka, consumers that
// commit after handling: a raw franz-go poll loop, the processor (partition,
// key and unordered order), watermill-kafka (Sarama), segmentio/kafka-go,
// confluent-kafka-go (librdkafka) and KafkaJS (eachMessage, eachBatch).
//
// It is a module of its own so that the product's go.mod does not depend on
// the contenders; it uses the working tree's processor (replace ../).
//
//	go run . all --brokers 127.0.0.1:9092 --out results/ [--quick]
//	go run . report --out results/      # tables and plots again from results.json
//	go run . sweep --vary partitions=1,6,60,600 --out results/scaling/   # scaling curves (sweep.go)
//	go run . members --max 24 --partitions 48 --out results/scaling/     # joins and leaves (members.go)
//
// Each contender runs in its own process (the Go ones through the "consume"
// subcommand of this binary, KafkaJS through node/consume.js), so the CPU
// time measured is the contender's own. See docs/benchmarks.md ("Side by side
// with other clients") for what is measured and how.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: bench all|report|sweep|sweep-report|members|members-report|consume ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "all":
		err = allMain(os.Args[2:])
	case "sweep":
		err = sweepMain(os.Args[2:])
	case "sweep-report":
		err = sweepReportMain(os.Args[2:])
	case "members":
		err = membersMain(os.Args[2:])
	case "members-report":
		err = membersReportMain(os.Args[2:])
	case "report":
		err = reportMain(os.Args[2:])
	case "consume":
		if len(os.Args) != 3 {
			err = fmt.Errorf("usage: bench consume <spec json>")
			break
		}
		err = consumeMain(os.Args[2])
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
