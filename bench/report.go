package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// labels are the contenders' names in the tables and plots.
var labels = map[string]string{
	"raw":                 "raw franz-go poll loop",
	"processor-partition": "processor, partition order",
	"processor-key":       "processor, key order",
	"processor-unordered": "processor, unordered",
	"watermill":           "watermill-kafka (Sarama)",
	"kafka-go":            "segmentio/kafka-go Reader",
	"confluent":           "confluent-kafka-go poll loop",
	"kafkajs-message":     "KafkaJS eachMessage",
	"kafkajs-batch":       "KafkaJS eachBatch",
}

// versions names every client's version: the Go modules from the build
// information, librdkafka from the library, KafkaJS from its package, the
// broker from its ApiVersions (franz-go's guess).
func versions(nodeDir string, brokers []string) map[string]string {
	v := map[string]string{"go": runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/twmb/franz-go", "github.com/ThreeDotsLabs/watermill-kafka/v3", "github.com/ThreeDotsLabs/watermill",
				"github.com/IBM/sarama", "github.com/segmentio/kafka-go", "github.com/confluentinc/confluent-kafka-go/v2":
				v[d.Path] = d.Version
			}
		}
	}
	if out, err := exec.Command("git", "describe", "--always", "--dirty").Output(); err == nil {
		v["processor (this repository)"] = strings.TrimSpace(string(out))
	}
	_, v["librdkafka (bundled)"] = kafka.LibraryVersion()
	if b, err := os.ReadFile(filepath.Join(nodeDir, "node_modules", "kafkajs", "package.json")); err == nil {
		var p struct{ Version string }
		if json.Unmarshal(b, &p) == nil {
			v["kafkajs"] = p.Version
		}
	}
	if out, err := exec.Command("node", "--version").Output(); err == nil {
		v["node"] = strings.TrimSpace(string(out))
	}
	if cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...)); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if av, err := kadm.NewClient(cl).ApiVersions(ctx); err == nil {
			av.Each(func(b kadm.BrokerApiVersions) { v["broker"] = b.VersionGuess() })
		}
		cancel()
		cl.Close()
	}
	return v
}

func reportMain(args []string) error {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	out := fs.String("out", "results", "directory holding results.json")
	fs.Parse(args)
	b, err := os.ReadFile(filepath.Join(*out, "results.json"))
	if err != nil {
		return err
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		return err
	}
	return report(*out, &res)
}

// stat is a median with its min and max over rounds.
type stat struct{ med, min, max float64 }

func stats(xs []float64) stat {
	if len(xs) == 0 {
		return stat{math.NaN(), math.NaN(), math.NaN()}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stat{m, s[0], s[len(s)-1]}
}

// cell is one contender's figures on one workload.
type cell struct {
	rate, cpu stat
	n, failed int
}

func cells(res *results, workload string) map[string]cell {
	rates, cpus, failed := map[string][]float64{}, map[string][]float64{}, map[string]int{}
	for _, s := range res.Samples {
		if s.Workload != workload {
			continue
		}
		if s.Err != "" {
			failed[s.Client]++
			continue
		}
		rates[s.Client] = append(rates[s.Client], float64(s.Records)/s.Seconds)
		cpus[s.Client] = append(cpus[s.Client], s.CPU*1e6/float64(s.Records))
	}
	out := map[string]cell{}
	for _, c := range allClients {
		if len(rates[c]) > 0 || failed[c] > 0 {
			out[c] = cell{rate: stats(rates[c]), cpu: stats(cpus[c]), n: len(rates[c]), failed: failed[c]}
		}
	}
	return out
}

func num(x float64) string {
	switch {
	case math.IsNaN(x):
		return "-"
	case x >= 100:
		return commas(int64(math.Round(x)))
	case x >= 10:
		return fmt.Sprintf("%.0f", x)
	default:
		return fmt.Sprintf("%.1f", x)
	}
}

func commas(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func rateCell(c cell, ok bool) string {
	if !ok || c.n == 0 {
		if ok && c.failed > 0 {
			return "failed"
		}
		return "-"
	}
	s := fmt.Sprintf("%s (%s-%s)", num(c.rate.med), num(c.rate.min), num(c.rate.max))
	if c.failed > 0 {
		s += fmt.Sprintf(", %d failed", c.failed)
	}
	return s
}

func ratio(c, raw cell, okc, okr bool) string {
	if !okc || !okr || c.n == 0 || raw.n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", c.rate.med/raw.rate.med)
}

// report writes tables.md and the plots from res.
func report(dir string, res *results) error {
	var b strings.Builder
	p := res.Params
	fmt.Fprintf(&b, "Run of %s UTC: backlog of %s records of %s B on %s partitions over %s keys; "+
		"%s rounds (no-op, %s handler), %s per sweep point; a slow run stops %s after its first record.\n\n",
		res.Started.Format("2006-01-02 15:04"), commaStr(p["records"]), p["value_bytes"], p["partitions"], commas(mainKeys),
		p["rounds"], p["handler"], p["sweep_rounds"], p["window"])
	noop, slow := cells(res, "noop"), cells(res, "slow")
	rawN, okRawN := noop["raw"]
	rawS, okRawS := slow["raw"]
	fmt.Fprintf(&b, "| consumer | no-op: rec/s, median (min-max) | ratio to raw | CPU µs/rec, median (min-max) | %s handler: rec/s, median (min-max) | ratio to raw |\n", p["handler"])
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, c := range allClients {
		n, okn := noop[c]
		s, oks := slow[c]
		if !okn && !oks {
			continue
		}
		cpu := "-"
		if okn && n.n > 0 {
			cpu = fmt.Sprintf("%.2f (%.2f-%.2f)", n.cpu.med, n.cpu.min, n.cpu.max)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", labels[c], rateCell(n, okn), ratio(n, rawN, okn, okRawN),
			cpu, rateCell(s, oks), ratio(s, rawS, oks, okRawS))
	}
	// The sweep: rows are key counts, columns contenders (Parallel
	// Consumer's table), median rec/s.
	var sweepCols []string
	sweep := map[int]map[string]cell{}
	for _, k := range sweepKeys {
		sweep[k] = cells(res, fmt.Sprintf("keys-%d", k))
	}
	for _, c := range allClients {
		for _, k := range sweepKeys {
			if _, ok := sweep[k][c]; ok {
				sweepCols = append(sweepCols, c)
				break
			}
		}
	}
	if len(sweepCols) > 0 {
		fmt.Fprintf(&b, "\nKey sweep, %s handler: rec/s, median (min-max) of %s rounds\n\n| keys |", p["handler"], p["sweep_rounds"])
		for _, c := range sweepCols {
			fmt.Fprintf(&b, " %s |", labels[c])
		}
		b.WriteString("\n|---|" + strings.Repeat("---|", len(sweepCols)) + "\n")
		for _, k := range sweepKeys {
			fmt.Fprintf(&b, "| %s |", commas(int64(k)))
			for _, c := range sweepCols {
				cl, ok := sweep[k][c]
				fmt.Fprintf(&b, " %s |", rateCell(cl, ok))
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\nVersions:")
	keys := make([]string, 0, len(res.Versions))
	for k := range res.Versions {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s %s;", k, res.Versions[k])
	}
	b.WriteString("\n")
	if err := os.WriteFile(filepath.Join(dir, "tables.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	if err := barPlot(filepath.Join(dir, "noop.svg"), "No-op handler: records/s (median, bars min-max)", noop); err != nil {
		return err
	}
	if err := barPlot(filepath.Join(dir, "slow.svg"), p["handler"]+" handler: records/s (median, bars min-max), log scale", slow); err != nil {
		return err
	}
	if len(sweepCols) > 0 {
		if err := sweepPlot(filepath.Join(dir, "sweep.svg"), p["handler"], sweepCols, sweep); err != nil {
			return err
		}
	}
	fmt.Print(b.String())
	return nil
}

// barPlot draws one bar per contender (median records/s) with min-max
// error bars.
func barPlot(path, title string, cs map[string]cell) error {
	var names []string
	var vals plotter.Values
	var errs plotter.YErrors
	for _, c := range allClients {
		cl, ok := cs[c]
		if !ok || cl.n == 0 {
			continue
		}
		names = append(names, labels[c])
		vals = append(vals, cl.rate.med)
		errs = append(errs, struct{ Low, High float64 }{cl.rate.med - cl.rate.min, cl.rate.max - cl.rate.med})
	}
	if len(vals) == 0 {
		return nil
	}
	pl := plot.New()
	pl.Title.Text = title
	pl.Y.Label.Text = "records/s"
	log := strings.Contains(title, "log scale")
	if log {
		pl.Y.Scale = plot.LogScale{}
		pl.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	xys := make(plotter.XYs, len(vals))
	for i, v := range vals {
		xys[i] = plotter.XY{X: float64(i), Y: v}
	}
	blue := color.RGBA{R: 70, G: 110, B: 170, A: 255}
	if log {
		// Bars start at 0, which a log scale cannot place: points instead.
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return err
		}
		sc.Color, sc.Radius = blue, vg.Points(4)
		pl.Add(sc, plotter.NewGrid())
	} else {
		bars, err := plotter.NewBarChart(vals, vg.Points(28))
		if err != nil {
			return err
		}
		bars.Color = blue
		pl.Add(bars)
	}
	eb, err := plotter.NewYErrorBars(struct {
		plotter.XYer
		plotter.YErrorer
	}{xys, errs})
	if err != nil {
		return err
	}
	pl.Add(eb)
	pl.NominalX(names...)
	pl.X.Tick.Label.Rotation = math.Pi / 5
	pl.X.Tick.Label.XAlign, pl.X.Tick.Label.YAlign = -1, -1
	if !log {
		pl.Y.Tick.Marker = commaTicks{}
	}
	return save(pl, vg.Points(float64(60*len(vals)+160)), 6*vg.Inch, path)
}

// sweepPlot draws records/s against key count, one line per contender,
// both axes logarithmic.
func sweepPlot(path, handler string, cols []string, sweep map[int]map[string]cell) error {
	pl := plot.New()
	pl.Title.Text = "Key sweep, " + handler + " handler: records/s (median)"
	pl.X.Label.Text = "distinct keys"
	pl.Y.Label.Text = "records/s"
	pl.X.Scale, pl.Y.Scale = plot.LogScale{}, plot.LogScale{}
	pl.X.Tick.Marker, pl.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	pl.Legend.Top, pl.Legend.Left = true, true
	pl.Legend.YOffs = -vg.Inch / 2 // below the unordered line, which runs along the top
	for i, c := range cols {
		var xys plotter.XYs
		for _, k := range sweepKeys {
			if cl, ok := sweep[k][c]; ok && cl.n > 0 {
				xys = append(xys, plotter.XY{X: float64(k), Y: cl.rate.med})
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		l.Dashes = plotutil.Dashes(i)
		pl.Add(l, pts)
		pl.Legend.Add(labels[c], l, pts)
	}
	return save(pl, 8*vg.Inch, 6*vg.Inch, path)
}

// save writes the plot as path (SVG) and as the same name in PNG.
func save(pl *plot.Plot, w, h vg.Length, path string) error {
	if err := pl.Save(w, h, path); err != nil {
		return err
	}
	return pl.Save(w, h, strings.TrimSuffix(path, filepath.Ext(path))+".png")
}

// commaTicks are gonum's default ticks labelled 250,000 rather than 250000.00.
type commaTicks struct{}

func (commaTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = commas(int64(math.Round(ts[i].Value)))
		}
	}
	return ts
}

func commaStr(s string) string {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return s
	}
	return commas(n)
}
