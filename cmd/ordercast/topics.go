package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ordercast/ordercast/ordersystem/ops"
)

func newTopics() *cobra.Command {
	var f opsFlags
	cmd := &cobra.Command{
		Use:   "topics",
		Short: "List and create topics (partitions, replication factor, min.insync.replicas)",
		Long: `Lists the cluster's topics with their partitions, replication factor, ISR health,
min.insync.replicas and cleanup.policy, and creates topics: named ones, or with --system every
topic of the order system (event topics, per group its retry topics and DLQ).

Defaults follow the cluster: replication factor min(3, brokers) and min.insync.replicas RF-1
(3 and 2 on a real cluster, 1 and 1 on the embedded broker); 6 partitions.

OFFSETS (JSON "offsets") is the offsets now in the log, the high watermark minus the log start
summed over partitions. It is not a record count: it includes one transaction marker per
partition per transaction (committed or aborted) and the records of aborted transactions, so on
the transactional topics (shipmentRequested, the DLQs' replays) it is more than the records a
read_committed consumer reads, and more than the order counts.`,
		Example: `  ordercast topics list
  ordercast topics create --system --brokers k1:9092,k2:9092,k3:9092
  ordercast topics create audit.events --partitions 12 --config retention.ms=604800000 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	f.register(cmd, false)
	cmd.AddCommand(newTopicsList(&f), newTopicsCreate(&f))
	return cmd
}

func newTopicsList(f *opsFlags) *cobra.Command {
	var internal bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List topics: partitions, replication factor, min.insync.replicas, cleanup.policy, ISR health",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			topics, err := ops.ListTopics(c.ctx, c.adm, internal)
			if err != nil {
				return fmt.Errorf("list topics at %s: %w", f.brokers, err)
			}
			out := cmd.OutOrStdout()
			if f.output == "json" {
				return writeJSON(out, topics)
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tRF\tMIN.ISR\tCLEANUP\tUNDER-REPLICATED\tOFFLINE\tOFFSETS")
			for _, t := range topics {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\t%d\t%d\n", t.Topic, t.Partitions, t.ReplicationFactor,
					dash(t.MinInsyncReplicas), dash(t.CleanupPolicy), t.UnderReplicated, t.Offline, t.Offsets)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&internal, "internal", false, "include internal topics (__consumer_offsets, __transaction_state)")
	return cmd
}

func newTopicsCreate(f *opsFlags) *cobra.Command {
	var (
		system      bool
		partitions  int32
		rf          int16
		minISR      int
		retryDelays string
		configs     []string
	)
	cmd := &cobra.Command{
		Use:   "create [TOPIC...]",
		Short: "Create topics that do not exist yet (existing ones are left as they are)",
		Long: `Creates each named topic, or with --system every topic of the order system, unless it exists
(existing topics are never changed). Prints each topic's outcome: created, exists or failed.

For a topic created, the table shows what it was created with. For a topic that exists already,
it shows what the topic has (partitions, replication factor, min.insync.replicas, as the broker
describes it) and, when that differs from what was asked (partitions, replication factor,
min.insync.replicas or a --config value), a note naming each difference; the topic is left
unchanged and the exit status is still 0. The exit status is 1 when a topic could not be created.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if system == (len(args) > 0) {
				return fmt.Errorf("name the topics to create, or pass --system for the order system's topics (not both)")
			}
			for _, t := range args {
				if err := checkTopicName(t); err != nil {
					return err
				}
			}
			if partitions < 1 {
				return fmt.Errorf("--partitions %d: want >= 1", partitions)
			}
			if cmd.Flags().Changed("retry-delays") && !system {
				return fmt.Errorf("--retry-delays needs --system: it sets how many <group>.retry.N topics the system has")
			}
			cfg := map[string]string{}
			for _, kv := range configs {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("--config %q: want key=value, such as retention.ms=604800000", kv)
				}
				cfg[k] = v
			}
			var delays []time.Duration
			for _, d := range splitList(retryDelays) {
				v, err := time.ParseDuration(d)
				if err != nil || v <= 0 {
					return fmt.Errorf("--retry-delays %q: %q is not a positive duration like 1s or 500ms", retryDelays, d)
				}
				delays = append(delays, v)
			}
			c, err := f.dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			meta, err := c.adm.BrokerMetadata(c.ctx)
			if err != nil {
				return fmt.Errorf("brokers of %s: %w", f.brokers, err)
			}
			defRF, defISR := ops.DefaultReplication(len(meta.Brokers))
			if rf == 0 {
				rf = defRF
			}
			if minISR == 0 {
				minISR = min(defISR, int(rf))
			}
			switch {
			case rf < 0 || int(rf) > len(meta.Brokers):
				return fmt.Errorf("--replication-factor %d: the cluster at %s has %d brokers; use 1 to %d (or leave the flag out: the default follows the cluster size)", rf, f.brokers, len(meta.Brokers), len(meta.Brokers))
			case minISR < 0 || minISR > int(rf):
				return fmt.Errorf("--min-insync-replicas %d: want 1 to the replication factor %d (RF-1 lets one replica fail without stopping acks=all writes)", minISR, rf)
			}
			var specs []ops.TopicSpec
			if system {
				specs = ops.SystemTopics(ops.Layout{Partitions: partitions, ReplicationFactor: rf, MinInsyncReplicas: minISR, RetryDelays: delays})
			} else {
				for _, t := range args {
					specs = append(specs, ops.TopicSpec{Name: t, Partitions: partitions, ReplicationFactor: rf, MinInsyncReplicas: minISR})
				}
			}
			res, cerr := ops.CreateTopics(c.ctx, c.adm, specs, cfg)
			out := cmd.OutOrStdout()
			if f.output == "json" {
				if err := writeJSON(out, res); err != nil {
					return err
				}
			} else {
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tRF\tMIN.ISR\tSTATUS")
				for _, r := range res {
					status := r.Status
					if r.Note != "" {
						status += " (" + r.Note + ")"
					}
					if r.Error != "" {
						status += ": " + r.Error
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Topic, dashInt(int(r.Partitions)), dashInt(int(r.ReplicationFactor)),
						dashInt(r.MinInsyncReplicas), status)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			return cerr
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&system, "system", false, "create every topic of the order system (event topics, <group>.retry.N, <group>.dlq)")
	fl.Int32Var(&partitions, "partitions", 6, "partitions per topic")
	fl.Int16Var(&rf, "replication-factor", 0, "replication factor (0: min(3, brokers))")
	fl.IntVar(&minISR, "min-insync-replicas", 0, "min.insync.replicas (0: replication factor - 1, at least 1)")
	fl.StringVar(&retryDelays, "retry-delays", "1s,10s", "with --system: one <group>.retry.N topic per delay, as 'up --retry-delays' (only the count matters here)")
	fl.StringArrayVar(&configs, "config", nil, "extra topic config key=value (repeatable)")
	return cmd
}

// dash shows "-" for an empty value.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// dashInt shows "-" for 0 (a value not known, or the broker default).
func dashInt(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

// maxTopicName is Kafka's limit on a topic name's length
// (org.apache.kafka.common.internals.Topic.MAX_NAME_LENGTH).
const maxTopicName = 249

// checkTopicName applies Kafka's rule for topic names (Topic.validate): 1 to
// 249 characters of [a-zA-Z0-9._-], and not "." or "..". Brokers enforce it
// too, but not every broker (the embedded one does not), so it is checked
// before anything is sent.
func checkTopicName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("topic name is empty")
	case name == "." || name == "..":
		return fmt.Errorf("topic name %q is not allowed (Kafka refuses \".\" and \"..\")", name)
	case len(name) > maxTopicName:
		return fmt.Errorf("topic name %.40q... is %d characters; Kafka allows at most %d", name, len(name), maxTopicName)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("topic name %q has %q: Kafka allows only ASCII letters, digits, '.', '_' and '-'", name, r)
		}
	}
	return nil
}
