package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ordercast/ordercast/ordersystem/ops"
)

func newGroups() *cobra.Command {
	var (
		f          opsFlags
		partitions bool
	)
	cmd := &cobra.Command{
		Use:   "groups [GROUP...]",
		Short: "Consumer and share groups: state, members and total lag (--partitions: members' partitions, offsets and lag)",
		Long: `Describes the named consumer groups (all groups of the cluster when none is named).

By default one line per group: state, protocol (type/assignor), members, total lag, and how many
of its partitions lag (LAGGING, of all the partitions it holds or has committed offsets on).
Kafka does not return when an offset was committed, so no commit age is shown.

--partitions shows each group in full: its members with the partitions each holds, and per
partition the committed offset, the high watermark (END) and the lag (END - COMMITTED).
-o json always has everything.

Classic groups, KIP-848 ("consumer" protocol) groups and share groups (KIP-932, protocol
share/ASSIGNOR) are described. A share group commits no offsets: its COMMITTED column is the
share-partition start offset (SPSO; every record before it is acknowledged or archived) and its
LAG the broker's share lag (KIP-1226, Kafka 4.2+: records from the SPSO on not yet acknowledged),
or END - SPSO where the broker does not report it; several members may hold one partition, so
its partitions name no member (the MEMBER rows show each member's partitions). Exit status 1
when a named group does not exist or could not be described.`,
		Example: `  ordercast groups
  ordercast groups payments orders --partitions
  ordercast groups payments -o json | jq '.[0].totalLag'`,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			groups, err := ops.DescribeGroups(c.ctx, c.adm, args...)
			if err != nil {
				return fmt.Errorf("groups at %s: %w", f.brokers, err)
			}
			out := cmd.OutOrStdout()
			if f.output == "json" {
				if err := writeJSON(out, groups); err != nil {
					return err
				}
			} else {
				if len(groups) == 0 {
					fmt.Fprintln(out, "no consumer groups")
				}
				if !partitions {
					if err := writeGroupSummary(out, groups, len(args) > 0); err != nil {
						return err
					}
				}
				shown := 0
				for _, g := range groups {
					if !partitions {
						break
					}
					if g.Error != "" && len(args) > 0 {
						continue // a named group's error is the command's error, printed once
					}
					if shown > 0 {
						fmt.Fprintln(out)
					}
					shown++
					if err := writeGroup(out, g); err != nil {
						return err
					}
				}
			}
			var bad []string
			for _, g := range groups {
				if g.Error != "" {
					bad = append(bad, g.Error)
				}
			}
			if len(bad) > 0 && len(args) > 0 {
				return fmt.Errorf("%s", strings.Join(bad, "; "))
			}
			return nil
		},
	}
	f.register(cmd, false)
	cmd.Flags().BoolVar(&partitions, "partitions", false, "show each group's members and, per partition, the committed offset, end offset and lag")
	return cmd
}

// writeGroupSummary writes one line per group: state, protocol, members,
// total lag and the partitions with lag. A group that could not be
// described is followed by its error, unless named (then the error is the
// command's, printed once by main).
func writeGroupSummary(out io.Writer, groups []ops.GroupInfo, named bool) error {
	shown := slices.DeleteFunc(slices.Clone(groups), func(g ops.GroupInfo) bool { return g.Error != "" && named })
	if len(shown) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tSTATE\tPROTOCOL\tMEMBERS\tLAG\tLAGGING")
	var errs []string
	for _, g := range shown {
		lagging, unknown := 0, 0
		for _, p := range g.Partitions {
			switch {
			case p.Lag > 0:
				lagging++
			case p.Lag < 0:
				unknown++
			}
		}
		lag := fmt.Sprint(g.TotalLag)
		if unknown > 0 {
			lag += fmt.Sprintf(" (+%d unknown)", unknown)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%d\t%s\t%d of %d\n", g.Group, dash(g.State), g.Type, dash(g.Protocol), len(g.Members), lag, lagging, len(g.Partitions))
		if g.Error != "" {
			errs = append(errs, g.Group+": "+g.Error)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, e := range errs {
		fmt.Fprintln(out, "error:", e)
	}
	return nil
}

// writeGroup writes one group: a summary line, its members, its partitions.
func writeGroup(out io.Writer, g ops.GroupInfo) error {
	fmt.Fprintf(out, "GROUP %s  state %s  protocol %s/%s  members %d  total lag %d\n", g.Group, dash(g.State), g.Type, dash(g.Protocol), len(g.Members), g.TotalLag)
	if g.Error != "" {
		fmt.Fprintf(out, "  error: %s\n", g.Error)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if len(g.Members) > 0 {
		fmt.Fprintln(tw, "  MEMBER\tCLIENT ID\tHOST\tPARTITIONS")
		for _, m := range g.Members {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", m.MemberID, m.ClientID, m.Host, assignment(m.Assigned))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(g.Partitions) > 0 {
		committed := "COMMITTED"
		if g.Type == "share" {
			committed = "SPSO"
		}
		fmt.Fprintln(tw, "  TOPIC\tPARTITION\tCLIENT ID\t"+committed+"\tEND\tLAG")
		for _, p := range g.Partitions {
			lag := fmt.Sprint(p.Lag)
			if p.Error != "" {
				lag = "? " + p.Error
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\n", p.Topic, p.Partition, dash(p.ClientID), offset(p.Committed), offset(p.End), lag)
		}
	}
	return tw.Flush()
}

// assignment renders {topic: [partitions]} as "topic[0 1 2] other[3]".
func assignment(a map[string][]int32) string {
	topics := make([]string, 0, len(a))
	for t := range a {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	var parts []string
	for _, t := range topics {
		ps := make([]string, len(a[t]))
		for i, p := range a[t] {
			ps[i] = fmt.Sprint(p)
		}
		parts = append(parts, t+"["+strings.Join(ps, " ")+"]")
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// offset shows -1 (none) as "-".
func offset(o int64) string {
	if o < 0 {
		return "-"
	}
	return fmt.Sprint(o)
}
