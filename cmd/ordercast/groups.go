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
	var f opsFlags
	cmd := &cobra.Command{
		Use:   "groups [GROUP...]",
		Short: "Consumer groups: state, members and their partitions, committed and end offsets, lag",
		Long: `Describes the named consumer groups (all groups of the cluster when none is named): state,
assignor, members with the partitions each holds, and per partition the committed offset, the
high watermark (END) and the lag (END - COMMITTED), with the group's total.

Classic groups and KIP-848 ("consumer" protocol) groups are both described. Exit status 1 when
a named group does not exist or could not be described.`,
		Example: `  ordercast groups
  ordercast groups payments orders
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
				shown := 0
				for _, g := range groups {
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
	return cmd
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
		fmt.Fprintln(tw, "  TOPIC\tPARTITION\tCLIENT ID\tCOMMITTED\tEND\tLAG")
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
