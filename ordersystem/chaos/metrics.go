package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// scrapedNames are the metrics the harness keeps from each process: the
// redeliveries and aborts the services saw.
var scrapedNames = []string{
	"ordercast_inbox_duplicates_total",
	"ordercast_outbox_rows_recovered_total",
	"ordercast_outbox_fenced_total",
	"ordercast_outbox_transactions_total",
	"ordercast_txn_transactions_total",
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? ([-+0-9.eE]+|NaN|\+Inf|-Inf)$`)

// scraper keeps the last scraped value of each series of each process
// incarnation. Counters restart at 0 with each incarnation, so the total
// over the run is the sum over incarnations of their last value; what an
// incarnation counted between its last scrape and a SIGKILL it did to itself
// is lost (the totals are lower bounds).
type scraper struct {
	client *http.Client
	mu     sync.Mutex
	last   map[string]map[string]float64 // "name#incarnation" -> series -> value
}

func newScraper() *scraper {
	return &scraper{client: &http.Client{Timeout: 2 * time.Second}, last: map[string]map[string]float64{}}
}

// scrape reads one process's /metrics.
func (s *scraper) scrape(ctx context.Context, p *proc) {
	if p.service == "devstack" {
		return
	}
	_, incarn, running, stopped := p.snapshot()
	if !running || stopped {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s:%d/metrics", procHost, p.admin), nil)
	resp, err := s.client.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	vals := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil || !contains(scrapedNames, m[1]) {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err == nil {
			vals[m[1]+m[2]] = v
		}
	}
	if sc.Err() != nil {
		return
	}
	s.mu.Lock()
	s.last[fmt.Sprintf("%s#%d", p.name, incarn)] = vals
	s.mu.Unlock()
}

// loop scrapes every process every interval until ctx ends.
func (s *scraper) loop(ctx context.Context, c *cluster, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, p := range c.list("") {
			s.scrape(ctx, p)
		}
	}
}

// totals sums each series over every incarnation.
func (s *scraper) totals() map[string]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]float64{}
	for _, vals := range s.last {
		for k, v := range vals {
			out[k] += v
		}
	}
	return out
}

// sum adds the series of name whose labels contain every given label pair
// (`group="orders"`).
func sum(totals map[string]float64, name string, labels ...string) int {
	var n float64
	for k, v := range totals {
		if !strings.HasPrefix(k, name) || (len(k) > len(name) && k[len(name)] != '{') {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(k, l)
		}
		if ok {
			n += v
		}
	}
	return int(n)
}

// labelValues returns the sorted values of label in the series of name.
func labelValues(totals map[string]float64, name, label string) []string {
	re := regexp.MustCompile(label + `="([^"]*)"`)
	seen := map[string]bool{}
	for k := range totals {
		if strings.HasPrefix(k, name+"{") {
			if m := re.FindStringSubmatch(k); m != nil {
				seen[m[1]] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}
