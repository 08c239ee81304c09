// Command loadplot draws the throughput over time of `ordercast load` runs
// from their --csv files: accepted orders per second (solid) and shipped
// orders per second (dashed), one colour per run. It is its own module so
// that the product does not depend on gonum/plot and its fonts.
//
//	go run . -o throughput.png "embedded 300/s=/tmp/emb-300.csv" "Kafka+PG 300/s=/tmp/kpg-300.csv"
//
// The output format follows -o's extension: .png, .svg or .pdf.
package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"image/color"
	"os"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

func main() {
	out := flag.String("o", "throughput.png", "output file (.png, .svg or .pdf)")
	title := flag.String("title", "ordercast load: throughput over time", "plot title")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "loadplot: want one or more LABEL=FILE.csv arguments (ordercast load --csv)")
		os.Exit(2)
	}
	p := plot.New()
	p.Title.Text = *title
	p.X.Label.Text = "second of the run"
	p.Y.Label.Text = "orders per second"
	p.Legend.Top = true
	for i, arg := range flag.Args() {
		label, path, ok := strings.Cut(arg, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "loadplot: %q: want LABEL=FILE.csv\n", arg)
			os.Exit(2)
		}
		acc, ship, err := read(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "loadplot: %s: %v\n", path, err)
			os.Exit(1)
		}
		c := plotutil.Color(i)
		for _, s := range []struct {
			pts    plotter.XYs
			suffix string
			dashes []vg.Length
		}{{acc, " accepted", nil}, {ship, " shipped", []vg.Length{vg.Points(4), vg.Points(3)}}} {
			l, err := plotter.NewLine(s.pts)
			if err != nil {
				fmt.Fprintln(os.Stderr, "loadplot:", err)
				os.Exit(1)
			}
			l.Color, l.Dashes, l.Width = c.(color.Color), s.dashes, vg.Points(1.5)
			p.Add(l)
			p.Legend.Add(label+s.suffix, l)
		}
	}
	p.Add(plotter.NewGrid())
	if err := p.Save(9*vg.Inch, 4.5*vg.Inch, *out); err != nil {
		fmt.Fprintln(os.Stderr, "loadplot:", err)
		os.Exit(1)
	}
}

// read returns accepted/s and shipped/s per second from a load CSV
// (second,sent,accepted,errors,shipped,checkout_p99_ms).
func read(path string) (acc, ship plotter.XYs, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, nil, err
	}
	if len(rows) < 2 || len(rows[0]) < 5 || rows[0][2] != "accepted" || rows[0][4] != "shipped" {
		return nil, nil, fmt.Errorf("not an ordercast load --csv file (header %v)", rows[0])
	}
	for _, r := range rows[1:] {
		s, e1 := strconv.ParseFloat(r[0], 64)
		a, e2 := strconv.ParseFloat(r[2], 64)
		sh, e3 := strconv.ParseFloat(r[4], 64)
		if e1 != nil || e2 != nil || e3 != nil {
			return nil, nil, fmt.Errorf("row %v: not numbers", r)
		}
		acc = append(acc, plotter.XY{X: s, Y: a})
		ship = append(ship, plotter.XY{X: s, Y: sh})
	}
	return acc, ship, nil
}
