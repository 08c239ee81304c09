package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/ops"
)

// producedRecord is what `ordercast produce` prints.
type producedRecord struct {
	Topic     string    `json:"topic"`     // topic written
	Partition int32     `json:"partition"` // partition written
	Offset    int64     `json:"offset"`    // offset of the record
	Timestamp time.Time `json:"timestamp"` // record timestamp (UTC)
	ID        string    `json:"id"`        // "<topic>/<partition>/<offset>"
}

func newProduce() *cobra.Command {
	var (
		f         opsFlags
		topic     string
		key       string
		value     string
		valueFile string
		headers   []string
		partition int32
	)
	cmd := &cobra.Command{
		Use:   "produce",
		Short: "Write one record to any topic (for example a poison record, to see the DLQ path work)",
		Long: `Writes one record to --topic with --key, a value (--value, or --value-file, "-" for stdin;
neither: a null value) and any --header KEY=VALUE, and prints where it was written. The
partition is chosen from the key by the producer's partitioner (the murmur2 hash of Kafka's Java
client, as checkout and the services use), or given with --partition.

The write is idempotent and acknowledged by all in-sync replicas. The topic must exist: produce
never creates one. A record the consuming group cannot handle goes through its retry topics to
its DLQ, where 'ordercast dlq list --group GROUP' shows it.`,
		Example: `  ordercast produce --topic orderCreated --key 17850 --value 'not avro'
  ordercast produce --topic orderCreated --key 17850 --value-file order.bin --header trace=abc
  ordercast dlq list --group payments`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if topic == "" {
				return errors.New("--topic is required: the topic to write to (`ordercast topics list` lists them)")
			}
			if !cmd.Flags().Changed("key") {
				return errors.New("--key is required: the record key, which picks the partition (the services key records by customer id)")
			}
			if cmd.Flags().Changed("value") && valueFile != "" {
				return errors.New("--value and --value-file: give one of them, not both (neither writes a null value)")
			}
			if cmd.Flags().Changed("partition") && partition < 0 {
				return fmt.Errorf("--partition %d: want a partition >= 0 (or leave it out: the key picks it)", partition)
			}
			rec := &kgo.Record{Topic: topic, Key: []byte(key), Partition: partition}
			for _, h := range headers {
				k, v, ok := strings.Cut(h, "=")
				if !ok || k == "" {
					return fmt.Errorf("--header %q: want KEY=VALUE with a non-empty KEY, such as trace=abc", h)
				}
				rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
			}
			switch {
			case cmd.Flags().Changed("value"):
				rec.Value = []byte(value)
			case valueFile == "-":
				b, err := io.ReadAll(cmd.InOrStdin())
				if err != nil {
					return fmt.Errorf("--value-file -: reading stdin: %w", err)
				}
				rec.Value = b
			case valueFile != "":
				b, err := os.ReadFile(valueFile)
				if err != nil {
					return fmt.Errorf("--value-file %q: %w", valueFile, err)
				}
				rec.Value = b
			}
			c, err := f.dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			parts, err := topicPartitions(c, topic)
			if err != nil {
				return err
			}
			opts := append([]kgo.Opt{}, c.opts...)
			if cmd.Flags().Changed("partition") {
				if partition >= parts {
					return fmt.Errorf("--partition %d: topic %s has %d partitions, 0 to %d", partition, topic, parts, parts-1)
				}
				opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
			}
			pcl, err := kgo.NewClient(opts...)
			if err != nil {
				return err
			}
			defer pcl.Close()
			w, err := pcl.ProduceSync(c.ctx, rec).First()
			if err != nil {
				return fmt.Errorf("write to %s: %w", topic, err)
			}
			p := producedRecord{Topic: w.Topic, Partition: w.Partition, Offset: w.Offset, Timestamp: w.Timestamp.UTC(),
				ID: ops.Coord{Topic: w.Topic, Partition: w.Partition, Offset: w.Offset}.String()}
			out := cmd.OutOrStdout()
			if f.output == "json" {
				return writeJSON(out, p)
			}
			_, err = fmt.Fprintf(out, "wrote %s (key %q, %d value bytes, %d headers) at %s\n", p.ID, key, len(rec.Value), len(rec.Headers), p.Timestamp.Format(time.RFC3339Nano))
			return err
		},
	}
	f.register(cmd, false)
	fl := cmd.Flags()
	fl.StringVarP(&topic, "topic", "t", "", "topic to write to (required; it must exist)")
	fl.StringVarP(&key, "key", "k", "", "record key (required; it picks the partition)")
	fl.StringVar(&value, "value", "", "record value, as text")
	fl.StringVar(&valueFile, "value-file", "", `file holding the record value, as bytes ("-": stdin)`)
	fl.StringArrayVarP(&headers, "header", "H", nil, "record header KEY=VALUE, repeatable")
	fl.Int32VarP(&partition, "partition", "p", -1, "partition to write to (default: chosen from the key)")
	return cmd
}

// topicPartitions returns the number of partitions of topic, or an error
// saying it does not exist.
func topicPartitions(c *opsConn, topic string) (int32, error) {
	tds, err := c.adm.ListTopics(c.ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("topic %s: %w", topic, err)
	}
	td, ok := tds[topic]
	switch {
	case !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition):
		return 0, fmt.Errorf("--topic %s: %w (`ordercast topics list` lists them; `ordercast topics create` creates one)", topic, ops.ErrNoTopic)
	case td.Err != nil:
		return 0, fmt.Errorf("topic %s: %w", topic, td.Err)
	}
	return int32(len(td.Partitions)), nil
}
