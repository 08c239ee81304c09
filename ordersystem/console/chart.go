package console

import (
	"fmt"
	"html/template"
	"slices"
	"strconv"
	"strings"
	"time"
)

// chart is the overview's lag chart: an SVG drawn on the server, one
// polyline per group over the samples of the ring.
type chart struct {
	Width, Height int
	Left, Bottom  int // plot area origin (pixels)
	PlotW, PlotH  int
	YMax          int64
	Span          string // the time the samples cover, such as "4m55s"
	Series        []series
	Empty         bool
}

type series struct {
	Group   string
	Class   string // s0..s7: the stylesheet's colours
	Points  string // "x,y x,y ..."
	Last    int64
	LegendY int
}

func lagChart(ss []sample, every time.Duration) chart {
	ch := chart{Width: 760, Height: 220, Left: 50, PlotW: 560, PlotH: 180}
	ch.Bottom = 10 + ch.PlotH
	if len(ss) < 1 {
		ch.Empty = true
		return ch
	}
	groups := map[string]bool{}
	for _, s := range ss {
		for g, l := range s.lag {
			groups[g] = true
			ch.YMax = max(ch.YMax, l)
		}
	}
	ch.YMax = niceCeil(ch.YMax)
	t0, t1 := ss[0].at, ss[len(ss)-1].at
	span := t1.Sub(t0)
	ch.Span = span.Truncate(time.Second).String()
	if span <= 0 {
		span = every
	}
	names := sortedKeys(groups)
	for i, g := range names {
		var pts []string
		var last int64
		for _, s := range ss {
			l, ok := s.lag[g]
			if !ok {
				continue
			}
			x := ch.Left + int(float64(ch.PlotW)*float64(s.at.Sub(t0))/float64(span))
			y := ch.Bottom - int(float64(ch.PlotH)*float64(l)/float64(ch.YMax))
			pts = append(pts, strconv.Itoa(x)+","+strconv.Itoa(y))
			last = l
		}
		if len(pts) == 1 { // one sample: a short flat line
			pts = append(pts, strings.Replace(pts[0], strings.Split(pts[0], ",")[0], strconv.Itoa(ch.Left+ch.PlotW), 1))
		}
		ch.Series = append(ch.Series, series{Group: g, Class: fmt.Sprintf("s%d", i%8), Points: strings.Join(pts, " "), Last: last, LegendY: 20 + 18*i})
	}
	slices.SortFunc(ch.Series, func(a, b series) int { return strings.Compare(a.Group, b.Group) })
	return ch
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (at least 1).
func niceCeil(v int64) int64 {
	if v < 1 {
		return 1
	}
	p := int64(1)
	for {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= v {
				return m * p
			}
		}
		p *= 10
	}
}

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"off": func(o int64) string {
		if o < 0 {
			return "-"
		}
		return strconv.FormatInt(o, 10)
	},
	"dash": orDash,
	"str":  func(b []byte) string { return string(b) },
	"add":  func(a, b int) int { return a + b },
	"join": func(ps []int32) string {
		s := make([]string, len(ps))
		for i, p := range ps {
			s[i] = strconv.Itoa(int(p))
		}
		return strings.Join(s, " ")
	},
}
