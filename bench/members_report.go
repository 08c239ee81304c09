package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// membersReport writes members.md (a row per change, the ramps side by
// side) and members.svg/png.
func membersReport(dir string, res *membersResults) error {
	var b strings.Builder
	p := res.Params
	fmt.Fprintf(&b, "Members ramp, run of %s UTC on %s: %s partitions, %s records/s of %s B offered, members joining one at a time "+
		"up to %s then leaving down to 1, each change after a random wait below %s; steady: every 1 s handling rate within %s of the producer's for %s (given up after %s).\n\n",
		res.Started.Format("2006-01-02 15:04"), res.CPU, p["partitions"], p["rate"], p["value_bytes"], p["max"], p["jitter"],
		p["tolerance"], p["steady_for"], p["change_timeout"])
	ramps := membersRampsOf(res)
	b.WriteString("Per change: assignment in place s / time to steady s / records handled twice / handled÷produced during the change / lowest 1 s rate÷produced; cores used when steady; load.\n\n")
	b.WriteString("| change |")
	for _, r := range ramps {
		fmt.Fprintf(&b, " %s |", r)
	}
	b.WriteString("\n|---|")
	for range ramps {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, k := range membersChangeKeys(res) {
		fmt.Fprintf(&b, "| %d→%d |", k[0], k[1])
		for _, r := range ramps {
			c, ok := membersFind(res, r, k)
			if !ok {
				b.WriteString(" |")
				continue
			}
			settled, steady := "not settled", "not steady"
			if c.SettledSeconds >= 0 {
				settled = fmt.Sprintf("%.1f", c.SettledSeconds)
			}
			if c.SteadySeconds >= 0 {
				steady = fmt.Sprintf("%.1f s", c.SteadySeconds)
			}
			during := "-"
			if c.Produced > 0 {
				during = fmt.Sprintf("%.2f", float64(c.Handled)/float64(c.Produced))
			}
			fmt.Fprintf(&b, " %s / %s / %s / %s / %.2f; %.2f cores; %.1f |", settled, steady, commas(c.Duplicates), during, c.MinRate, c.CPU, c.Load1)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n| ramp | seconds | produced | handled | handled twice | error |\n|---|---|---|---|---|---|\n")
	for _, r := range res.Ramps {
		fmt.Fprintf(&b, "| %s %s | %.0f | %s | %s | %s | %s |\n", r.Protocol, r.Client, r.Seconds, commas(r.Produced), commas(r.Handled),
			commas(r.Duplicates), r.Err)
	}
	b.WriteString("\nVersions:")
	for _, k := range sortedKeys(res.Versions) {
		fmt.Fprintf(&b, " %s %s;", k, res.Versions[k])
	}
	b.WriteString("\n")
	if err := os.WriteFile(filepath.Join(dir, "members.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Print(b.String())
	return membersPlots(filepath.Join(dir, "members"), res, ramps)
}

// membersRampsOf names the ramps "protocol client" in the order they ran.
func membersRampsOf(res *membersResults) []string {
	var rs []string
	for _, c := range res.Changes {
		if r := c.Protocol + " " + c.Client; !has(rs, r) {
			rs = append(rs, r)
		}
	}
	return rs
}

// membersChangeKeys are the changes (from, to) in the order of the ramp.
func membersChangeKeys(res *membersResults) [][2]int {
	var ks [][2]int
	seen := map[[2]int]bool{}
	for _, c := range res.Changes {
		if k := [2]int{c.From, c.To}; !seen[k] {
			seen[k] = true
			ks = append(ks, k)
		}
	}
	return ks
}

func membersFind(res *membersResults, ramp string, k [2]int) (memberChange, bool) {
	for _, c := range res.Changes {
		if c.Protocol+" "+c.Client == ramp && c.From == k[0] && c.To == k[1] {
			return c, true
		}
	}
	return memberChange{}, false
}

// membersPlots draws per change the time until the assignment was in
// place, the time to steady, the lowest 1 s rate and the records handled
// twice against the members in the group after a join (first row) and
// before a leave (second row), one line per ramp; the first join, which
// starts the group, is left out.
func membersPlots(base string, res *membersResults, ramps []string) error {
	maxN := 1
	for _, c := range res.Changes {
		maxN = max(maxN, c.From, c.To)
	}
	var ticks []plot.Tick
	for n := 1; n <= maxN; n++ {
		t := plot.Tick{Value: float64(n)}
		if n == 1 || n%4 == 0 {
			t.Label = strconv.Itoa(n)
		}
		ticks = append(ticks, t)
	}
	panel := func(title, ylabel string, join bool, y func(memberChange) (float64, bool)) (*plot.Plot, error) {
		pl := plot.New()
		pl.Title.Text = title
		pl.X.Tick.Marker = plot.ConstantTicks(ticks)
		if join {
			pl.X.Label.Text = "members after the join"
		} else {
			pl.X.Label.Text = "members before the leave"
		}
		pl.Y.Label.Text = ylabel
		pl.Y.Min = 0
		pl.Legend.Top = true
		pl.Add(plotter.NewGrid())
		for i, r := range ramps {
			var xys plotter.XYs
			for _, c := range res.Changes {
				if c.Protocol+" "+c.Client != r || (c.To > c.From) != join || c.From == 0 { // 0 → 1 starts the group
					continue
				}
				x := float64(c.To)
				if !join {
					x = float64(c.From)
				}
				if v, ok := y(c); ok {
					xys = append(xys, plotter.XY{X: x, Y: v})
				}
			}
			if len(xys) == 0 {
				continue
			}
			if err := addSeries(pl, i, r, xys); err != nil {
				return nil, err
			}
		}
		return pl, nil
	}
	steady := func(c memberChange) (float64, bool) { return c.SteadySeconds, c.SteadySeconds >= 0 }
	settled := func(c memberChange) (float64, bool) { return c.SettledSeconds, c.SettledSeconds >= 0 }
	dups := func(c memberChange) (float64, bool) { return float64(c.Duplicates), true }
	low := func(c memberChange) (float64, bool) { return c.MinRate, c.SettledSeconds >= 0 }
	var panels []*plot.Plot
	for _, d := range []struct {
		title, y string
		join     bool
		f        func(memberChange) (float64, bool)
	}{
		{"join: assignment in place", "seconds", true, settled},
		{"join: time to steady", "seconds", true, steady},
		{"join: lowest 1 s rate / producer's", "ratio", true, low},
		{"join: records handled twice", "records", true, dups},
		{"leave: assignment in place", "seconds", false, settled},
		{"leave: time to steady", "seconds", false, steady},
		{"leave: lowest 1 s rate / producer's", "ratio", false, low},
		{"leave: records handled twice", "records", false, dups},
	} {
		pl, err := panel(d.title, d.y, d.join, d.f)
		if err != nil {
			return err
		}
		panels = append(panels, pl)
	}
	const cols = 4 // joins on the first row, leaves on the second
	w, h := cols*4.5*vg.Inch, 2*4*vg.Inch
	for _, ext := range []string{".svg", ".png"} {
		img, err := newCanvas(w, h, ext)
		if err != nil {
			return err
		}
		t := draw.Tiles{Rows: 2, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
			PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
		for i, pl := range panels {
			pl.Draw(t.At(img.canvas, i%cols, i/cols))
		}
		if err := img.save(base + ext); err != nil {
			return err
		}
	}
	return nil
}
