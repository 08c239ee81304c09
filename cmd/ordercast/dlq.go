package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
)

type dlqFlags struct {
	opsFlags
	group string
}

func newDLQ() *cobra.Command {
	var f dlqFlags
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect, replay and purge a consumer group's dead-letter topic (<group>.dlq)",
		Long: `Works on the DLQ of one consumer group, <group>.dlq, whose records carry the runtime's headers
(ordercast-original-topic/-partition/-offset, ordercast-error-class, ordercast-error-message, ...).

  list    the records from the purge position on, with counts by error class and original topic
  show    one record: every header and the payload decoded (Avro through the schema registry)
  replay  write selected records back to their source topic (or the group's retry topic),
          rate limited; each replayed record is marked in the compacted topic ordercast.dlq.state
          in the same Kafka transaction, and a second replay of it is refused unless --force
  purge   advance the stored purge position up to an offset: records are never deleted, only no
          longer listed or replayed (they stay until the topic's retention.ms)

Records are named <dlq topic>/<partition>/<offset>, e.g. orders.dlq/2/17.`,
		Example: `  ordercast dlq list --group payments
  ordercast dlq show payments.dlq/3/12
  ordercast dlq replay --group payments --class invalid --rate 50
  ordercast dlq replay --group orders --partition 2 --from-offset 10 --to-offset 15 --to retry
  ordercast dlq purge --group payments --all`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	f.register(cmd, true)
	cmd.PersistentFlags().StringVarP(&f.group, "group", "g", "", "consumer group whose DLQ (<group>.dlq) to use: "+strings.Join(order.Groups, ", "))
	cmd.AddCommand(newDLQList(&f), newDLQShow(&f), newDLQReplay(&f), newDLQPurge(&f))
	return cmd
}

// open validates the flags, checks the broker and returns the group's DLQ.
func (f *dlqFlags) open(cmd *cobra.Command) (context.Context, func(), *ops.DLQ, error) {
	if f.group == "" {
		return nil, nil, nil, fmt.Errorf("--group is required: the consumer group whose DLQ to use (%s; its DLQ topic is <group>.dlq)", strings.Join(order.Groups, ", "))
	}
	c, err := f.dial(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	c.cl.Close() // the broker answers; the DLQ tools use clients of their own
	d, err := ops.NewDLQ(f.group, c.opts...)
	if err != nil {
		c.cancel()
		return nil, nil, nil, err
	}
	return c.ctx, func() { d.Close(); c.cancel() }, d, nil
}

// selFlags select DLQ records.
type selFlags struct {
	fs         *pflag.FlagSet
	partitions []int32
	from, to   int64
	classes    []string
	keys       []string
	purged     bool
}

func (s *selFlags) register(fs *pflag.FlagSet) {
	s.fs = fs
	fs.Int32SliceVarP(&s.partitions, "partition", "p", nil, "DLQ partitions, repeatable or comma separated (default all)")
	fs.Int64Var(&s.from, "from-offset", -1, "first offset to select, inclusive (per partition; default the purge position)")
	fs.Int64Var(&s.to, "to-offset", -1, "last offset to select, inclusive (per partition; default the end)")
	fs.StringSliceVar(&s.classes, "class", nil, "error classes to select (ordercast-error-class), repeatable or comma separated: "+strings.Join(ops.ErrorClasses, ", "))
	fs.StringSliceVar(&s.keys, "key", nil, "record keys to select")
	fs.BoolVar(&s.purged, "purged", false, "also select records below the purge position")
}

func (s *selFlags) selection() (ops.Selection, error) {
	sel := ops.Selection{Partitions: s.partitions, Classes: s.classes, Keys: s.keys, IncludePurged: s.purged}
	if err := checkPartitions(s.partitions); err != nil {
		return sel, err
	}
	for _, c := range s.classes {
		if !slices.Contains(ops.ErrorClasses, c) {
			return sel, fmt.Errorf("--class %q: unknown error class; the classes are %s (`ordercast dlq list` counts the records of each)", c, strings.Join(ops.ErrorClasses, ", "))
		}
	}
	for _, o := range []struct {
		name string
		v    int64
	}{{"from-offset", s.from}, {"to-offset", s.to}} {
		if s.fs.Changed(o.name) && o.v < 0 {
			return sel, fmt.Errorf("--%s %d: want an offset >= 0", o.name, o.v)
		}
	}
	if s.from >= 0 {
		sel.From = s.from
	}
	if s.to >= 0 {
		sel.Until = s.to + 1
		if s.from > s.to {
			return sel, fmt.Errorf("--from-offset %d is after --to-offset %d", s.from, s.to)
		}
	}
	return sel, nil
}

// checkPartitions rejects negative --partition values.
func checkPartitions(ps []int32) error {
	for _, p := range ps {
		if p < 0 {
			return fmt.Errorf("--partition %d: want >= 0", p)
		}
	}
	return nil
}

func newDLQList(f *dlqFlags) *cobra.Command {
	var (
		sel   selFlags
		limit int
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List DLQ records from the purge position on, with counts by error class",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := sel.selection()
			if err != nil {
				return err
			}
			if limit < 0 {
				return fmt.Errorf("--limit %d: want >= 0 records (0 prints all)", limit)
			}
			ctx, done, d, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer done()
			l, err := d.List(ctx, s, limit)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if f.output == "json" {
				return writeJSON(out, l)
			}
			return writeListing(out, l)
		},
	}
	sel.register(cmd.Flags())
	cmd.Flags().IntVar(&limit, "limit", 100, "records to print (all are counted); 0 prints all")
	return cmd
}

func writeListing(out io.Writer, l *ops.Listing) error {
	pending := 0
	for _, p := range l.Partitions {
		pending += p.Pending
	}
	fmt.Fprintf(out, "DLQ %s (group %s): %d records pending, %d selected, %d of them replayed", l.Topic, l.Group, pending, l.Selected, l.Replayed)
	if l.FailedReplays > 0 {
		fmt.Fprintf(out, ", %d of them replays that failed again (REPLAY OF)", l.FailedReplays)
	}
	fmt.Fprint(out, "\n\n")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tSTART\tPOSITION\tEND\tPENDING")
	for _, p := range l.Partitions {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\n", p.Partition, p.Start, p.Position, p.End, p.Pending)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if l.Selected > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(tw, "ERROR CLASS\tRECORDS")
		for _, k := range sortedKeys(l.ByClass) {
			fmt.Fprintf(tw, "%s\t%d\n", dash(k), l.ByClass[k])
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(out)
		fmt.Fprintln(tw, "ORIGINAL TOPIC\tRECORDS")
		for _, k := range sortedKeys(l.ByOriginalTopic) {
			fmt.Fprintf(tw, "%s\t%d\n", dash(k), l.ByOriginalTopic[k])
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(out)
		fmt.Fprintln(tw, "ID\tTIME\tKEY\tORIGINAL\tREPLAY OF\tCLASS\tATTEMPTS\tREPLAYED\tERROR")
		for _, r := range l.Records {
			replayed := "-"
			switch {
			case r.Replay != nil:
				replayed = "to " + r.Replay.To
			case r.Purged:
				replayed = "purged"
			}
			orig := "-"
			if r.OriginalTopic != "" {
				orig = ops.Coord{Topic: r.OriginalTopic, Partition: r.OriginalPartition, Offset: r.OriginalOffset}.String()
			}
			key := dash(clip(r.Key, 24))
			if r.BlocksKey {
				key += " (blocked)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.Timestamp.Format(time.RFC3339), key, orig, dash(r.ReplayedFrom),
				dash(r.ErrorClass), r.Attempts, replayed, clip(r.ErrorMessage, 80))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if l.Truncated {
			fmt.Fprintf(out, "... %d more (--limit 0 prints all, -o json for scripts)\n", l.Selected-len(l.Records))
		}
	}
	if len(l.BlockedKeys) > 0 {
		fmt.Fprintf(out, "\n%d keys of group %s are held behind a record (their later records wait; replaying the record, once its copy is handled, or purging it releases the key):\n", len(l.BlockedKeys), l.Group)
		fmt.Fprintln(tw, "KEY\tBEHIND\tWAITING IN\tSINCE")
		for _, b := range l.BlockedKeys {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", clip(b.Key, 24), b.RecordID, b.At, b.Since.Format(time.RFC3339))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func newDLQShow(f *dlqFlags) *cobra.Command {
	var (
		partition                  int32
		offset                     int64
		registry, regUser, regPass string
	)
	cmd := &cobra.Command{
		Use:   "show [ID]",
		Short: "Show one DLQ record: every header and the decoded payload",
		Long: `Shows one record of the DLQ, named by its ID (<dlq topic>/<partition>/<offset>, as list prints
it; the group then follows from the topic) or by --group, --partition and --offset. The payload
is decoded with its writer schema from the schema registry (--registry) and checked against its
topic's contract as this build reads it.`,
		Example: `  ordercast dlq show payments.dlq/3/12
  ordercast dlq show --group orders --partition 0 --offset 4 -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				c, err := ops.ParseCoord(args[0])
				if err != nil {
					return err
				}
				group, ok := strings.CutSuffix(c.Topic, ".dlq")
				if !ok {
					return fmt.Errorf("%s is not a DLQ record: its topic %s does not end in .dlq", args[0], c.Topic)
				}
				if f.group != "" && f.group != group {
					return fmt.Errorf("%s is in the DLQ of group %s, not of --group %s", args[0], group, f.group)
				}
				for _, name := range []string{"partition", "offset"} {
					if cmd.Flags().Changed(name) {
						return fmt.Errorf("--%s: the record is named by %s already; give the ID or --group, --partition and --offset, not both", name, args[0])
					}
				}
				f.group, partition, offset = group, c.Partition, c.Offset
			} else if partition < 0 || offset < 0 {
				return fmt.Errorf("name the record: an ID such as orders.dlq/2/17, or --group, --partition and --offset")
			}
			ctx, done, d, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer done()
			rec, err := d.Show(ctx, partition, offset)
			if err != nil {
				return err
			}
			regTLS, err := f.sec.registryOpts()
			if err != nil {
				return err
			}
			rec.Payload = decodeForShow(ctx, registry, regUser, regPass, regTLS, rec)
			out := cmd.OutOrStdout()
			if f.output == "json" {
				return writeJSON(out, rec)
			}
			return writeRecord(out, rec)
		},
	}
	fl := cmd.Flags()
	fl.Int32VarP(&partition, "partition", "p", -1, "DLQ partition")
	fl.Int64Var(&offset, "offset", -1, "offset in the DLQ partition")
	fl.StringVar(&registry, "registry", envOr("SCHEMA_REGISTRY_URL", defaultRegistry), "schema registry URL to decode Avro payloads (env SCHEMA_REGISTRY_URL; default: the embedded registry of 'ordercast up'; empty: do not decode)")
	fl.StringVar(&regUser, "registry-user", envOr("SCHEMA_REGISTRY_USER", ""), "schema registry basic-auth user (env SCHEMA_REGISTRY_USER)")
	fl.StringVar(&regPass, "registry-password", envOr("SCHEMA_REGISTRY_PASSWORD", ""), "schema registry basic-auth password (env SCHEMA_REGISTRY_PASSWORD)")
	return cmd
}

// decodeForShow decodes the payload, with the registry when one is set;
// registry calls are bounded to 10s in all.
func decodeForShow(ctx context.Context, url, user, pass string, extra []sr.ClientOpt, rec *ops.DLQRecord) *ops.Payload {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var (
		reg   *sr.Client
		serde *schema.Serde
		note  string
	)
	if url != "" {
		opts := append([]sr.ClientOpt{sr.URLs(url)}, extra...)
		if user != "" {
			opts = append(opts, sr.BasicAuth(user, pass))
		}
		var err error
		if reg, err = sr.NewClient(opts...); err != nil {
			note = fmt.Sprintf("--registry %q: %v", url, err)
			reg = nil
		} else if serde, err = schema.New(ctx, reg, schema.WithLookupOnly()); err != nil {
			note = fmt.Sprintf("contract not checked: the registry at %s does not have this build's schemas or is unreachable (--registry): %v", url, err)
			serde = nil
		}
	}
	pl := ops.DecodePayload(ctx, reg, serde, rec.OriginalTopic, rec.Value)
	if note != "" && pl.Contract == "" {
		pl.Contract = note
	}
	return pl
}

func writeRecord(out io.Writer, r *ops.DLQRecord) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("record", r.ID)
	row("timestamp", r.Timestamp.Format(time.RFC3339Nano))
	row("key", dash(r.Key))
	if r.OriginalTopic != "" {
		row("original", ops.Coord{Topic: r.OriginalTopic, Partition: r.OriginalPartition, Offset: r.OriginalOffset}.String())
	}
	if !r.OriginalTimestamp.IsZero() {
		row("original time", r.OriginalTimestamp.Format(time.RFC3339Nano))
	}
	row("group", dash(r.ConsumerGroup))
	row("error class", dash(r.ErrorClass))
	row("error", dash(r.ErrorMessage))
	row("attempts", fmt.Sprint(r.Attempts))
	if !r.FirstFailure.IsZero() {
		row("failures", fmt.Sprintf("first %s, last %s", r.FirstFailure.Format(time.RFC3339Nano), r.LastFailure.Format(time.RFC3339Nano)))
	}
	if r.ReplayedFrom != "" {
		row("replay of", r.ReplayedFrom+" (it failed again after a replay)")
	}
	switch {
	case r.Replay != nil:
		row("replayed", fmt.Sprintf("yes, at %s to %s (%s)", r.Replay.At.Format(time.RFC3339), r.Replay.To, r.Replay.Target))
	default:
		row("replayed", "no")
	}
	row("purged", map[bool]string{true: "yes", false: "no"}[r.Purged])
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nheaders:")
	for _, h := range r.Headers {
		fmt.Fprintf(out, "  %s: %s\n", h.Key, h.Value)
	}
	if p := r.Payload; p != nil {
		desc := p.Format
		if p.SchemaID != 0 {
			desc += fmt.Sprintf(", schema id %d", p.SchemaID)
			if len(p.Subjects) > 0 {
				desc += " (" + strings.Join(p.Subjects, ", ") + ")"
			}
		}
		fmt.Fprintf(out, "\npayload (%s, %d bytes):\n", desc, r.ValueBytes)
		if p.Contract != "" {
			fmt.Fprintf(out, "  contract: %s\n", p.Contract)
		}
		if p.Error != "" {
			fmt.Fprintf(out, "  not decoded: %s\n", p.Error)
		}
		if p.Decoded != nil {
			fmt.Fprintln(out, indent(string(p.Decoded)))
		}
		if p.Text != "" {
			fmt.Fprintln(out, indent(p.Text))
		}
		if p.Hex != "" {
			fmt.Fprintln(out, indent(strings.TrimRight(p.Hex, "\n")))
		}
	}
	return nil
}

func newDLQReplay(f *dlqFlags) *cobra.Command {
	var (
		sel    selFlags
		to     string
		rate   float64
		force  bool
		dryRun bool
		limit  int
		again  bool
	)
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Write selected DLQ records back to their source topic or the group's retry topic",
		Long: `Replays the selected records (by --partition and --from-offset/--to-offset, --class, --key;
default: every record from the purge position on) at most --rate per second.

--to source (default) writes each record to its original topic (header ordercast-original-topic),
where every group consuming that topic sees it again (the order system's services deduplicate by
event id); --to retry writes it to the group's <group>.retry.1, due at once, so only that group
sees it. The record keeps its key, value and own headers and gets ordercast-replayed-from=<ID>.

Each record is marked as replayed in ordercast.dlq.state in the same Kafka transaction (id
ordercast-dlq-<group>) as the record itself: a record is marked if and only if it was written.
Records replayed before are refused unless --force; exit status 1 when any were refused (the
others are still replayed). Fix the cause first: a record that fails again goes back to the DLQ
as a new record with ordercast-replayed-from=<ID of the record replayed> (list shows it as
REPLAY OF). Such records are skipped (exit status 0, listed) unless --include-failed-replays,
so that replaying everything again does not redrive the same poison record; the record itself
is already replayed (refused without --force).`,
		Example: `  ordercast dlq replay --group payments --dry-run
  ordercast dlq replay --group payments --class invalid --rate 20
  ordercast dlq replay --group orders --partition 1 --from-offset 40 --to-offset 45 --to retry`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := sel.selection()
			if err != nil {
				return err
			}
			if to != string(ops.TargetSource) && to != string(ops.TargetRetry) {
				return fmt.Errorf("--to %q: want source (the original topic) or retry (the group's retry topic)", to)
			}
			if !(rate >= 0) || math.IsInf(rate, 0) {
				return fmt.Errorf("--rate %v: want a number of records per second >= 0, such as 50 (0: unlimited)", rate)
			}
			if limit < 0 {
				return fmt.Errorf("--limit %d: want >= 0 records (0: all selected)", limit)
			}
			ctx, done, d, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer done()
			res, rerr := d.Replay(ctx, ops.ReplayOptions{Selection: s, To: ops.Target(to), Rate: rate, Force: force, DryRun: dryRun, Limit: limit, IncludeFailedReplays: again})
			if res == nil {
				return rerr
			}
			out := cmd.OutOrStdout()
			if f.output == "json" {
				if err := writeJSON(out, res); err != nil {
					return err
				}
			} else if err := writeReplay(out, res); err != nil {
				return err
			}
			var refused *ops.RefusedError
			if errors.As(rerr, &refused) {
				return &exitError{code: 1, msg: rerr.Error()}
			}
			return rerr
		},
	}
	sel.register(cmd.Flags())
	fl := cmd.Flags()
	fl.StringVar(&to, "to", string(ops.TargetSource), "where to write: source (the original topic) or retry (<group>.retry.1)")
	fl.Float64Var(&rate, "rate", 100, "records per second at most (0: unlimited)")
	fl.BoolVar(&force, "force", false, "replay records that were replayed before")
	fl.BoolVar(&dryRun, "dry-run", false, "show what would be replayed and write nothing")
	fl.IntVar(&limit, "limit", 0, "replay at most this many records (0: all selected)")
	fl.BoolVar(&again, "include-failed-replays", false, "also replay the records that are replays that failed again (REPLAY OF in list)")
	return cmd
}

func writeReplay(out io.Writer, r *ops.ReplayResult) error {
	verb := "replayed"
	if r.DryRun {
		verb = "would replay"
	}
	fmt.Fprintf(out, "%s %d of %d selected records from %s (to %s); %d refused", verb, len(r.Replayed), r.Selected, r.Topic, r.Target, len(r.Refused))
	if len(r.Skipped) > 0 {
		fmt.Fprintf(out, ", %d skipped", len(r.Skipped))
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if len(r.Replayed) > 0 {
		fmt.Fprintln(tw, "FROM\tTO\tKEY\tCLASS\tFORCED")
		for _, x := range r.Replayed {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\n", x.From, dash(x.To), dash(clip(x.Key, 24)), dash(x.Class), x.Forced)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, list := range []struct {
		name string
		rs   []ops.Refusal
	}{{"refused", r.Refused}, {"skipped", r.Skipped}} {
		if len(list.rs) == 0 {
			continue
		}
		fmt.Fprintf(out, "\n%s:\n", list.name)
		fmt.Fprintln(tw, "ID\tREASON")
		for _, x := range list.rs {
			fmt.Fprintf(tw, "%s\t%s\n", x.ID, x.Reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func newDLQPurge(f *dlqFlags) *cobra.Command {
	var (
		partitions []int32
		toOffset   int64
		all        bool
		force      bool
		dryRun     bool
	)
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Advance the DLQ's purge position (records are never deleted)",
		Long: `Moves the purge position of DLQ partitions: to just after --to-offset on one --partition, or
with --all to the current end of every (or each --partition) partition. Records below the
position are no longer listed or replayed. Nothing is deleted: the records stay in the topic
until its retention.ms, and --force moves a position back (un-purge). The position is stored in
the compacted topic ordercast.dlq.state, in a transaction (id ordercast-dlq-<group>).`,
		Example: `  ordercast dlq purge --group payments --all --dry-run
  ordercast dlq purge --group orders --partition 2 --to-offset 17`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkPartitions(partitions); err != nil {
				return err
			}
			o := ops.PurgeOptions{Partitions: partitions, Force: force, DryRun: dryRun}
			switch {
			case cmd.Flags().Changed("to-offset") && toOffset < 0:
				return fmt.Errorf("--to-offset %d: want an offset >= 0, the last one to purge (records up to and including it)", toOffset)
			case all == (toOffset >= 0):
				return fmt.Errorf("say how far to purge: --all (everything now in the DLQ) or --partition P --to-offset N (offsets up to N)")
			case toOffset >= 0 && len(partitions) != 1:
				return fmt.Errorf("--to-offset %d needs exactly one --partition: offsets are per partition", toOffset)
			case toOffset >= 0:
				o.Until = toOffset + 1
			}
			ctx, done, d, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer done()
			res, err := d.Purge(ctx, o)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if f.output == "json" {
				return writeJSON(out, res)
			}
			verb := "purged"
			if res.DryRun {
				verb = "would purge"
			}
			if len(res.Partitions) == 0 {
				fmt.Fprintf(out, "nothing to purge in %s: the positions are already there\n", res.Topic)
				return nil
			}
			fmt.Fprintf(out, "%s %s (records stay in the topic until its retention):\n", verb, res.Topic)
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PARTITION\tFROM\tTO\tACTION\tRECORDS\tREPLAYED\tNOT REPLAYED")
			for _, p := range res.Partitions {
				// A position moved back (--force) un-purges: the counts
				// are of the records listed and replayable again.
				action, sign := "purged", 1
				if p.To < p.From {
					action, sign = "un-purged", -1
				}
				if res.DryRun {
					action = "would be " + action
				}
				fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%d\t%d\t%d\n", p.Partition, p.From, p.To, action, sign*p.Records, sign*p.Replayed, sign*p.NotReplayed)
			}
			return tw.Flush()
		},
	}
	fl := cmd.Flags()
	fl.Int32SliceVarP(&partitions, "partition", "p", nil, "DLQ partitions (default all; exactly one with --to-offset)")
	fl.Int64Var(&toOffset, "to-offset", -1, "purge offsets up to and including this one")
	fl.BoolVar(&all, "all", false, "purge everything now in the DLQ (or in each --partition)")
	fl.BoolVar(&force, "force", false, "allow moving a position back (un-purge)")
	fl.BoolVar(&dryRun, "dry-run", false, "show what would be purged and write nothing")
	return cmd
}

func sortedKeys(m map[string]int) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// clip shortens s to n runes, marking the cut.
func clip(s string, n int) string {
	r := []rune(strings.ReplaceAll(s, "\n", " "))
	if len(r) <= n {
		return string(r)
	}
	return string(r[:n-1]) + "…"
}

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }
