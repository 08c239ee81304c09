package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// A sweep varies one parameter of the backlog or of the consumer and runs
// the same contenders at each value, interleaved A B B A, each run in a
// fresh group in a process of its own:
//
//	go run . sweep --brokers B --out results/scaling --vary partitions=1,6,60,600
//	go run . sweep --vary value-bytes=100,1024,16384,262144
//	go run . sweep --vary compression=none,lz4,zstd --values events
//	go run . sweep --vary keys=10,1000,100000 --handler 20ms --clients processor-key
//	go run . sweep --vary in-flight=16,1000,10000 --handler 20ms --clients processor-key
//	go run . sweep-report --out results/scaling --vary partitions   # tables and plot again
//
// It writes sweep-<param>.json, sweep-<param>.md and sweep-<param>.svg/png
// in --out. Each value's topic is seeded just before its runs and deleted
// after them, so the broker holds one backlog at a time.

// sweepParams are the parameters --vary accepts.
var sweepParams = []string{"partitions", "value-bytes", "compression", "keys", "in-flight"}

type sweepFlags struct {
	brokers, out, vary, clients, compression, values string
	rounds, partitions, valueBytes, keys, inFlight   int
	records, maxRecords                              int
	backlogBytes                                     int64
	window, handler                                  time.Duration
	cpuprofile, memprofile                           bool
}

// sweepSample is one run of one contender at one value of the parameter.
type sweepSample struct {
	Value   string  `json:"value"`
	Client  string  `json:"client"`
	Round   int     `json:"round"`
	Backlog backlog `json:"backlog"`
	runResult
	// Load1 is the 1-minute load average just before and just after the run.
	Load1Before float64 `json:"load1_before"`
	Load1After  float64 `json:"load1_after"`
	Profile     string  `json:"cpu_profile,omitempty"`
	Err         string  `json:"error,omitempty"`
}

type sweepResults struct {
	Started  time.Time         `json:"started"`
	Vary     string            `json:"vary"`
	Values   []string          `json:"values"`
	Params   map[string]string `json:"params"`
	Versions map[string]string `json:"versions"`
	CPU      string            `json:"cpu_model"`
	Samples  []sweepSample     `json:"samples"`
}

func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return math.NaN()
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return math.NaN()
	}
	x, _ := strconv.ParseFloat(f[0], 64)
	return x
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	n := 0
	model := "unknown"
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			switch strings.TrimSpace(k) {
			case "model name":
				model = strings.TrimSpace(v)
			case "processor":
				n++
			}
		}
	}
	return fmt.Sprintf("%s × %d", model, n)
}

func sweepMain(args []string) error {
	var f sweepFlags
	fs := flag.NewFlagSet("sweep", flag.ExitOnError)
	fs.StringVar(&f.brokers, "brokers", "127.0.0.1:9092", "seed brokers, comma separated")
	fs.StringVar(&f.out, "out", "results/scaling", "directory for sweep-<param>.json/.md/.svg/.png")
	fs.StringVar(&f.vary, "vary", "partitions=1,6,60,600", "the parameter and its values: "+strings.Join(sweepParams, ", ")+" = v1,v2,...")
	fs.StringVar(&f.clients, "clients", "raw,processor-partition,processor-key", "contenders (Go ones: requests are counted for raw and processor-*)")
	fs.IntVar(&f.rounds, "rounds", 2, "rounds per value, the order reversed every other round (A B B A)")
	fs.IntVar(&f.partitions, "partitions", 6, "partitions when not varied")
	fs.IntVar(&f.valueBytes, "value-bytes", 1024, "record value size when not varied, bytes")
	fs.StringVar(&f.compression, "compression", "none", "producer codec of the backlog when not varied: none, gzip, snappy, lz4, zstd")
	fs.StringVar(&f.values, "values", "random", "values: random (incompressible bytes), letters (random a-z) or events (JSON-like order events of words and numbers, compressible as real events are)")
	fs.IntVar(&f.keys, "keys", 10000, "distinct keys when not varied")
	fs.IntVar(&f.inFlight, "in-flight", 0, "the processor's MaxInFlight records (and Concurrency in key order) when not varied; 0: defaults (1,000 in flight, Concurrency 16 in partition order, 1,000 otherwise)")
	fs.IntVar(&f.records, "records", 0, "records per backlog; 0: backlog-bytes / value size, at most max-records")
	fs.Int64Var(&f.backlogBytes, "backlog-bytes", 6<<30, "bytes of values per backlog when --records is 0")
	fs.IntVar(&f.maxRecords, "max-records", 20000000, "most records per backlog when --records is 0")
	fs.DurationVar(&f.window, "window", 12*time.Second, "a run stops this long after its first record, or at the backlog's end")
	fs.DurationVar(&f.handler, "handler", 0, "handler duration (0: no-op)")
	fs.BoolVar(&f.cpuprofile, "cpuprofile", false, "write a CPU profile of each run's measured span to <out>/prof/")
	fs.BoolVar(&f.memprofile, "memprofile", false, "write a heap profile at the end of each run's measured span to <out>/prof/")
	fs.Parse(args)

	name, list, ok := strings.Cut(f.vary, "=")
	if !ok || !has(sweepParams, name) {
		return fmt.Errorf("--vary %q: want one of %s = v1,v2,...", f.vary, strings.Join(sweepParams, ", "))
	}
	values := strings.Split(list, ",")
	clients := strings.Split(f.clients, ",")
	for _, c := range clients {
		if _, ok := consumers[c]; !ok {
			return fmt.Errorf("client %q is not a Go contender", c)
		}
	}
	brokers := strings.Split(f.brokers, ",")
	if err := os.MkdirAll(filepath.Join(f.out, "prof"), 0o755); err != nil {
		return err
	}
	res := &sweepResults{Started: time.Now().UTC(), Vary: name, Values: values, CPU: cpuModel(), Params: map[string]string{
		"partitions": strconv.Itoa(f.partitions), "value_bytes": strconv.Itoa(f.valueBytes), "compression": f.compression,
		"values": f.values, "keys": strconv.Itoa(f.keys), "in_flight": strconv.Itoa(f.inFlight),
		"rounds": strconv.Itoa(f.rounds), "window": f.window.String(), "handler": f.handler.String(),
		"records": strconv.Itoa(f.records), "backlog_bytes": strconv.FormatInt(f.backlogBytes, 10),
		"max_records": strconv.Itoa(f.maxRecords),
	}}
	res.Versions = versions("node", brokers)
	ctx := context.Background()
	for _, v := range values {
		b := backlog{Partitions: f.partitions, ValueBytes: f.valueBytes, Compression: f.compression, Values: f.values, Keys: f.keys}
		inFlight := f.inFlight
		n, err := strconv.Atoi(v)
		if name != "compression" && err != nil {
			return fmt.Errorf("--vary %s: %q is not a number", name, v)
		}
		switch name {
		case "partitions":
			b.Partitions = n
		case "value-bytes":
			b.ValueBytes = n
		case "compression":
			b.Compression = v
		case "keys":
			b.Keys = n
		case "in-flight":
			inFlight = n
		}
		b.Records = f.records
		if b.Records == 0 {
			b.Records = int(min(f.backlogBytes/int64(b.ValueBytes), int64(f.maxRecords)))
		}
		b.Topic = fmt.Sprintf("scale-%s-%s", name, v)
		if err := seedTopic(ctx, brokers, b); err != nil {
			return err
		}
		for r := 0; r < f.rounds; r++ {
			order := append([]string(nil), clients...)
			if r%2 == 1 {
				for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
					order[i], order[j] = order[j], order[i]
				}
			}
			for _, c := range order {
				s := runSpec{Client: c, Brokers: brokers, Topic: b.Topic, Target: b.Records, Handler: f.handler,
					Window: f.window, Partitons: b.Partitions, InFlight: inFlight,
					Group: fmt.Sprintf("scale-%s-%s-%s-%d-%d", name, v, c, r, time.Now().UnixNano())}
				if f.cpuprofile {
					s.CPUProfile, _ = filepath.Abs(filepath.Join(f.out, "prof", fmt.Sprintf("%s-%s-%s-%d.pprof", name, v, c, r)))
				}
				if f.memprofile {
					s.MemProfile, _ = filepath.Abs(filepath.Join(f.out, "prof", fmt.Sprintf("%s-%s-%s-%d.heap", name, v, c, r)))
				}
				smp := sweepSample{Value: v, Client: c, Round: r, Backlog: b, Load1Before: load1(), Profile: s.CPUProfile}
				got, err := runOne(s, "node")
				smp.runResult, smp.Load1After = got, load1()
				if err != nil {
					smp.Err = err.Error()
					logf("%s=%s %s round %d: %v", name, v, c, r, err)
				} else {
					st := "-"
					if got.Stored != nil {
						st = storedCell(*got.Stored)
					}
					logf("%s=%s %-20s round %d: %d records in %.2fs = %.0f rec/s, %.2f µs CPU/rec, %d commits (%d B), %d fetches, RSS %d MiB, stored %s, load %.1f→%.1f",
						name, v, c, r, got.Records, got.Seconds, float64(got.Records)/got.Seconds,
						got.CPUSeconds*1e6/float64(got.Records), got.CommitRequests, got.CommitBytes, got.FetchRequests,
						got.PeakRSS>>20, st, smp.Load1Before, smp.Load1After)
				}
				res.Samples = append(res.Samples, smp)
				if err := writeSweep(f.out, res); err != nil {
					return err
				}
			}
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err == nil {
			deleteTopic(ctx, kadm.NewClient(cl), b.Topic)
			cl.Close()
		}
	}
	return sweepReport(f.out, res)
}

func writeSweep(dir string, res *sweepResults) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sweep-"+res.Vary+".json"), b, 0o644)
}

func sweepReportMain(args []string) error {
	fs := flag.NewFlagSet("sweep-report", flag.ExitOnError)
	out := fs.String("out", "results/scaling", "directory holding sweep-<param>.json")
	vary := fs.String("vary", "partitions", "the parameter whose sweep to report")
	fs.Parse(args)
	b, err := os.ReadFile(filepath.Join(*out, "sweep-"+*vary+".json"))
	if err != nil {
		return err
	}
	var res sweepResults
	if err := json.Unmarshal(b, &res); err != nil {
		return err
	}
	return sweepReport(*out, &res)
}

// sweepCell is one contender's medians (min-max) at one value.
type sweepCell struct {
	rate, cpu, commitsPerS, commitBytesPerS, fetchesPerS, rss, secs stat
	load                                                            [2]float64 // min of before, max of after
	n, failed                                                       int
	stored                                                          storedBatches // summed over the runs
}

// storedCell says what the batches read were stored as: each codec's share
// of the batches and the stored ratio (uncompressed / stored bytes).
func storedCell(s storedBatches) string {
	var total int64
	for _, n := range s.Codecs {
		total += n
	}
	if total == 0 {
		return "-"
	}
	var parts []string
	for _, c := range codecNames {
		if n := s.Codecs[c]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f %%", c, 100*float64(n)/float64(total)))
		}
	}
	return fmt.Sprintf("%s, ratio %.2f", strings.Join(parts, " "), s.Ratio())
}

func sweepCells(res *sweepResults, value string) map[string]sweepCell {
	type acc struct{ rate, cpu, cps, cbps, fps, rss, secs []float64 }
	accs := map[string]*acc{}
	out := map[string]sweepCell{}
	load := map[string][2]float64{}
	failed := map[string]int{}
	stored := map[string]*storedBatches{}
	for _, s := range res.Samples {
		if s.Value != value {
			continue
		}
		if s.Err != "" {
			failed[s.Client]++
			continue
		}
		a := accs[s.Client]
		if a == nil {
			a = &acc{}
			accs[s.Client] = a
			load[s.Client] = [2]float64{math.Inf(1), math.Inf(-1)}
		}
		a.rate = append(a.rate, float64(s.Records)/s.Seconds)
		a.cpu = append(a.cpu, s.CPUSeconds*1e6/float64(s.Records))
		a.cps = append(a.cps, float64(s.CommitRequests)/s.Seconds)
		a.cbps = append(a.cbps, float64(s.CommitBytes)/s.Seconds)
		a.fps = append(a.fps, float64(s.FetchRequests)/s.Seconds)
		a.rss = append(a.rss, float64(s.PeakRSS)/(1<<20))
		a.secs = append(a.secs, s.Seconds)
		if s.Stored != nil {
			st := stored[s.Client]
			if st == nil {
				st = &storedBatches{Codecs: map[string]int64{}}
				stored[s.Client] = st
			}
			for c, n := range s.Stored.Codecs {
				st.Codecs[c] += n
			}
			st.Compressed += s.Stored.Compressed
			st.Uncompressed += s.Stored.Uncompressed
		}
		l := load[s.Client]
		load[s.Client] = [2]float64{math.Min(l[0], s.Load1Before), math.Max(l[1], s.Load1After)}
	}
	for c, a := range accs {
		out[c] = sweepCell{rate: stats(a.rate), cpu: stats(a.cpu), commitsPerS: stats(a.cps), commitBytesPerS: stats(a.cbps),
			fetchesPerS: stats(a.fps), rss: stats(a.rss), secs: stats(a.secs), load: load[c], n: len(a.rate), failed: failed[c]}
		if st := stored[c]; st != nil {
			cell := out[c]
			cell.stored = *st
			out[c] = cell
		}
	}
	for c, n := range failed {
		if _, ok := out[c]; !ok {
			out[c] = sweepCell{failed: n}
		}
	}
	return out
}

func sweepClientsOf(res *sweepResults) []string {
	var cs []string
	for _, s := range res.Samples {
		if !has(cs, s.Client) {
			cs = append(cs, s.Client)
		}
	}
	return cs
}

func rng3(s stat, f string) string {
	if math.IsNaN(s.med) {
		return "-"
	}
	return fmt.Sprintf(f+" ("+f+"-"+f+")", s.med, s.min, s.max)
}

// sweepReport writes sweep-<param>.md and its plot.
func sweepReport(dir string, res *sweepResults) error {
	var b strings.Builder
	p := res.Params
	fmt.Fprintf(&b, "Sweep of %s, run of %s UTC on %s. Fixed: partitions %s, values %s B (%s), compression %s, keys %s, "+
		"in-flight %s (0: defaults), handler %s; %s rounds A B B A; a run stops %s after its first record or at the backlog's end.\n\n",
		res.Vary, res.Started.Format("2006-01-02 15:04"), res.CPU, p["partitions"], p["value_bytes"], p["values"],
		p["compression"], p["keys"], p["in_flight"], p["handler"], p["rounds"], p["window"])
	clients := sweepClientsOf(res)
	b.WriteString("| " + res.Vary + " | consumer | records | run s | rec/s, median (min-max) | rate / raw | CPU µs/rec | CPU / raw | commits/s | commit B/s | fetches/s | peak RSS MiB | stored as (batches read) | load 1 min |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, v := range res.Values {
		cs := sweepCells(res, v)
		raw, okRaw := cs["raw"]
		recs := 0
		for _, s := range res.Samples {
			if s.Value == v {
				recs = s.Backlog.Records
			}
		}
		for _, c := range clients {
			cl, ok := cs[c]
			if !ok {
				continue
			}
			if cl.n == 0 {
				fmt.Fprintf(&b, "| %s | %s | %s | failed (%d) | | | | | | | | | | |\n", v, labels[c], commas(int64(recs)), cl.failed)
				continue
			}
			rr, cr := "-", "-"
			if okRaw && raw.n > 0 {
				rr = fmt.Sprintf("%.2f", cl.rate.med/raw.rate.med)
				cr = fmt.Sprintf("%.2f", cl.cpu.med/raw.cpu.med)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %.1f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.1f-%.1f |\n",
				v, labels[c], commas(int64(recs)), cl.secs.med,
				fmt.Sprintf("%s (%s-%s)", num(cl.rate.med), num(cl.rate.min), num(cl.rate.max)), rr,
				rng3(cl.cpu, "%.2f"), cr, fmt.Sprintf("%.1f", cl.commitsPerS.med), num(cl.commitBytesPerS.med),
				fmt.Sprintf("%.0f", cl.fetchesPerS.med), fmt.Sprintf("%.0f", cl.rss.med), storedCell(cl.stored), cl.load[0], cl.load[1])
		}
	}
	b.WriteString("\nVersions:")
	for _, k := range sortedKeys(res.Versions) {
		fmt.Fprintf(&b, " %s %s;", k, res.Versions[k])
	}
	b.WriteString("\n")
	if err := os.WriteFile(filepath.Join(dir, "sweep-"+res.Vary+".md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Print(b.String())
	return sweepPlots(filepath.Join(dir, "sweep-"+res.Vary+".svg"), res, clients)
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	for i := 1; i < len(ks); i++ {
		for j := i; j > 0 && ks[j] < ks[j-1]; j-- {
			ks[j], ks[j-1] = ks[j-1], ks[j]
		}
	}
	return ks
}

// sweepPlots draws, side by side, records/s and CPU µs per record against
// the parameter (log-log for a numeric parameter, nominal otherwise), one
// line per contender; with a handler and an in-flight sweep, the
// Little's-law ceiling (in flight / handler duration) beside them.
func sweepPlots(path string, res *sweepResults, clients []string) error {
	numeric := res.Vary != "compression"
	xOf := func(i int, v string) float64 {
		if !numeric {
			return float64(i)
		}
		x, _ := strconv.ParseFloat(v, 64)
		return x
	}
	panel := func(title, ylabel string, y func(sweepCell) float64) (*plot.Plot, error) {
		pl := plot.New()
		pl.Title.Text = title
		pl.X.Label.Text = res.Vary
		pl.Y.Label.Text = ylabel
		pl.Y.Scale, pl.Y.Tick.Marker = plot.LogScale{}, fewDecadeTicks{}
		if numeric {
			pl.X.Scale, pl.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		} else {
			ticks := make([]plot.Tick, len(res.Values))
			for i, v := range res.Values {
				ticks[i] = plot.Tick{Value: float64(i), Label: v}
			}
			pl.X.Tick.Marker = plot.ConstantTicks(ticks)
			pl.X.Min, pl.X.Max = -0.5, float64(len(res.Values))-0.5
		}
		pl.Legend.Top = true
		pl.Add(plotter.NewGrid())
		drawn := 0
		defer func() {
			// A log axis needs a range: widen one of a single value.
			if pl.X.Min == pl.X.Max && pl.X.Min > 0 {
				pl.X.Min, pl.X.Max = pl.X.Min/2, pl.X.Max*2
			}
			if pl.Y.Min == pl.Y.Max && pl.Y.Min > 0 {
				pl.Y.Min, pl.Y.Max = pl.Y.Min/2, pl.Y.Max*2
			}
			if drawn == 0 { // a log axis needs a positive range
				pl.Y.Scale, pl.Y.Tick.Marker, pl.Y.Min, pl.Y.Max = plot.LinearScale{}, plot.DefaultTicks{}, 0, 1
				pl.X.Scale, pl.X.Tick.Marker, pl.X.Min, pl.X.Max = plot.LinearScale{}, plot.DefaultTicks{}, 0, 1
				pl.Title.Text += ": none"
			}
		}()
		for i, c := range clients {
			var xys plotter.XYs
			for j, v := range res.Values {
				if cl, ok := sweepCells(res, v)[c]; ok && cl.n > 0 && y(cl) > 0 {
					xys = append(xys, plotter.XY{X: xOf(j, v), Y: y(cl)})
				}
			}
			if len(xys) == 0 {
				continue
			}
			if err := addSeries(pl, i, labels[c], xys); err != nil {
				return nil, err
			}
			drawn++
		}
		return pl, nil
	}
	rate, err := panel("records/s (median)", "records/s", func(c sweepCell) float64 { return c.rate.med })
	if err != nil {
		return err
	}
	if h, err := time.ParseDuration(res.Params["handler"]); err == nil && h > 0 && res.Vary == "in-flight" {
		var xys plotter.XYs
		for j, v := range res.Values {
			n, _ := strconv.ParseFloat(v, 64)
			xys = append(xys, plotter.XY{X: xOf(j, v), Y: n / h.Seconds()})
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		rate.Add(l)
		rate.Legend.Add("ceiling: in flight / handler", l)
	}
	cpu, err := panel("CPU µs per record (median)", "µs/record", func(c sweepCell) float64 { return c.cpu.med })
	if err != nil {
		return err
	}
	commits, err := panel("commit requests/s (median)", "requests/s", func(c sweepCell) float64 { return c.commitsPerS.med })
	if err != nil {
		return err
	}
	panels := []*plot.Plot{rate, cpu, commits}
	w, h := vg.Length(len(panels))*5*vg.Inch, 4.5*vg.Inch
	for _, ext := range []string{".svg", ".png"} {
		img, err := newCanvas(w, h, ext)
		if err != nil {
			return err
		}
		tiles := splitCanvas(img.canvas, len(panels))
		for i, pl := range panels {
			pl.Draw(tiles[i])
		}
		if err := img.save(strings.TrimSuffix(path, filepath.Ext(path)) + ext); err != nil {
			return err
		}
	}
	return nil
}

// tiledImage is an SVG or PNG canvas the panels are drawn on.
type tiledImage struct {
	canvas draw.Canvas
	save   func(path string) error
}

func newCanvas(w, h vg.Length, ext string) (tiledImage, error) {
	writeTo := func(wt io.WriterTo) func(string) error {
		return func(path string) error {
			f, err := os.Create(path)
			if err != nil {
				return err
			}
			if _, err := wt.WriteTo(f); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		}
	}
	switch ext {
	case ".svg":
		c := vgsvg.New(w, h)
		return tiledImage{canvas: draw.New(c), save: writeTo(c)}, nil
	case ".png":
		c := vgimg.New(w, h)
		return tiledImage{canvas: draw.New(c), save: writeTo(vgimg.PngCanvas{Canvas: c})}, nil
	}
	return tiledImage{}, fmt.Errorf("unknown image type %q", ext)
}

// splitCanvas cuts c into n panels side by side.
func splitCanvas(c draw.Canvas, n int) []draw.Canvas {
	t := draw.Tiles{Rows: 1, Cols: n, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 2,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	out := make([]draw.Canvas, n)
	for i := range out {
		out[i] = t.At(c, i, 0)
	}
	return out
}

// fewDecadeTicks are gonum's log ticks, or its linear ticks when the range
// spans less than a decade and a half (log ticks would label none of it).
type fewDecadeTicks struct{}

func (fewDecadeTicks) Ticks(min, max float64) []plot.Tick {
	if min > 0 && max/min < 30 {
		return plot.DefaultTicks{}.Ticks(min, max)
	}
	return plot.LogTicks{Prec: -1}.Ticks(min, max)
}

// addSeries draws xys on pl as a line with points in the i-th color, shape
// and dashes of plotutil's palettes, named in the legend.
func addSeries(pl *plot.Plot, i int, name string, xys plotter.XYs) error {
	l, pts, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	l.Color, pts.Color, pts.Shape, l.Dashes = plotutil.Color(i), plotutil.Color(i), plotutil.Shape(i), plotutil.Dashes(i)
	pl.Add(l, pts)
	pl.Legend.Add(name, l, pts)
	return nil
}
