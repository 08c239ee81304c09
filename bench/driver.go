package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// allClients is every contender, in table order.
var allClients = []string{
	"raw", "processor-partition", "processor-key", "processor-unordered",
	"watermill", "kafka-go", "confluent", "kafkajs-message", "kafkajs-batch",
}

// sweepKeys are the key counts of the sweep (Parallel Consumer's table).
var sweepKeys = []int{1, 10, 100, 1000, 10000}

const (
	partitions = 6
	valueSize  = 1024
	mainKeys   = 10000
)

// sample is one measured run of one contender on one workload.
type sample struct {
	Workload string  `json:"workload"` // "noop", "slow" or "keys-<n>"
	Client   string  `json:"client"`
	Round    int     `json:"round"`
	Records  int64   `json:"records"`
	Seconds  float64 `json:"seconds"`
	CPU      float64 `json:"cpu_seconds"`
	Err      string  `json:"error,omitempty"`
}

// results is what results.json holds: the parameters, the versions and the
// samples.
type results struct {
	Started  time.Time         `json:"started"`
	Params   map[string]string `json:"params"`
	Versions map[string]string `json:"versions"`
	Samples  []sample          `json:"samples"`
}

type allFlags struct {
	brokers      string
	out          string
	quick        bool
	records      int
	sweepRecords int
	rounds       int
	sweepRounds  int
	window       time.Duration
	handler      time.Duration
	clients      string
	sweepClients string
	workloads    string
	nodeDir      string
}

func allMain(args []string) error {
	var f allFlags
	fs := flag.NewFlagSet("all", flag.ExitOnError)
	fs.StringVar(&f.brokers, "brokers", "127.0.0.1:9092", "seed brokers, comma separated")
	fs.StringVar(&f.out, "out", "results", "directory for results.json, tables.md and the plots")
	fs.BoolVar(&f.quick, "quick", false, "small backlog, 1 round, short windows: checks the pipeline")
	fs.IntVar(&f.records, "records", 1000000, "records of the main backlog (10,000 keys): the no-op workload drains it")
	fs.IntVar(&f.sweepRecords, "sweep-records", 60000, "records of each key-sweep backlog (1, 10, 100, 1,000 keys)")
	fs.IntVar(&f.rounds, "rounds", 4, "rounds of the no-op and 20 ms workloads (interleaved: A B B A)")
	fs.IntVar(&f.sweepRounds, "sweep-rounds", 2, "rounds of each key-sweep point")
	fs.DurationVar(&f.window, "window", 6*time.Second, "a slow run stops this long after its first record (or at the backlog's end)")
	fs.DurationVar(&f.handler, "handler", 20*time.Millisecond, "the slow handler's duration")
	fs.StringVar(&f.clients, "clients", strings.Join(allClients, ","), "contenders of the no-op and 20 ms workloads")
	fs.StringVar(&f.sweepClients, "sweep-clients", strings.Join(allClients, ","), "contenders of the key sweep")
	fs.StringVar(&f.workloads, "workloads", "noop,slow,sweep", "workloads to run")
	fs.StringVar(&f.nodeDir, "node-dir", "node", "directory of the KafkaJS script (npm ci is run there)")
	fs.Parse(args)
	if f.quick {
		f.records, f.sweepRecords, f.rounds, f.sweepRounds, f.window = 20000, 5000, 1, 1, 2*time.Second
	}
	brokers := strings.Split(f.brokers, ",")
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return err
	}
	res := &results{Started: time.Now().UTC(), Params: map[string]string{
		"records": strconv.Itoa(f.records), "sweep_records": strconv.Itoa(f.sweepRecords),
		"rounds": strconv.Itoa(f.rounds), "sweep_rounds": strconv.Itoa(f.sweepRounds),
		"window": f.window.String(), "handler": f.handler.String(), "partitions": strconv.Itoa(partitions),
		"value_bytes": strconv.Itoa(valueSize), "quick": strconv.FormatBool(f.quick),
	}}
	clients, sweepClients := strings.Split(f.clients, ","), strings.Split(f.sweepClients, ",")
	for _, c := range append(clients, sweepClients...) {
		if !known(c) {
			return fmt.Errorf("unknown client %q (known: %s)", c, strings.Join(allClients, ", "))
		}
	}
	if hasNode(clients) || hasNode(sweepClients) {
		logf("npm ci in %s", f.nodeDir)
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir, cmd.Stdout, cmd.Stderr = f.nodeDir, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("npm ci: %w", err)
		}
	}
	res.Versions = versions(f.nodeDir, brokers)
	work := strings.Split(f.workloads, ",")
	ctx := context.Background()

	mainTopic := "bench-main"
	if err := seed(ctx, brokers, mainTopic, f.records, mainKeys); err != nil {
		return err
	}
	save := func() error { return writeResults(f.out, res) }
	if has(work, "noop") {
		// The no-op drains the whole backlog; the window is only a bound.
		runRounds(res, "noop", clients, f.rounds, runSpec{Brokers: brokers, Topic: mainTopic, Target: f.records,
			Window: 10 * time.Minute, Partitons: partitions}, f.nodeDir)
		if err := save(); err != nil {
			return err
		}
	}
	if has(work, "slow") {
		runRounds(res, "slow", clients, f.rounds, runSpec{Brokers: brokers, Topic: mainTopic, Target: f.records,
			Handler: f.handler, Window: f.window, Partitons: partitions}, f.nodeDir)
		if err := save(); err != nil {
			return err
		}
	}
	if has(work, "sweep") {
		for _, k := range sweepKeys {
			topic, n := mainTopic, f.records
			if k != mainKeys {
				topic, n = fmt.Sprintf("bench-keys-%d", k), f.sweepRecords
				if err := seed(ctx, brokers, topic, n, k); err != nil {
					return err
				}
			}
			runRounds(res, fmt.Sprintf("keys-%d", k), sweepClients, f.sweepRounds, runSpec{Brokers: brokers,
				Topic: topic, Target: n, Handler: f.handler, Window: f.window, Partitons: partitions}, f.nodeDir)
			if err := save(); err != nil {
				return err
			}
		}
	}
	return report(f.out, res)
}

func known(c string) bool {
	for _, k := range allClients {
		if c == k {
			return true
		}
	}
	return false
}

func hasNode(cs []string) bool {
	for _, c := range cs {
		if strings.HasPrefix(c, "kafkajs") {
			return true
		}
	}
	return false
}

func has(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// runRounds runs every client once per round, the order reversed every
// other round (A B, B A, A B...), each in a fresh consumer group.
func runRounds(res *results, workload string, clients []string, rounds int, spec runSpec, nodeDir string) {
	for r := 0; r < rounds; r++ {
		order := append([]string(nil), clients...)
		if r%2 == 1 {
			for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
				order[i], order[j] = order[j], order[i]
			}
		}
		for _, c := range order {
			s := spec
			s.Client = c
			s.Group = fmt.Sprintf("bench-%s-%s-%d-%d", workload, c, r, time.Now().UnixNano())
			got, err := runOne(s, nodeDir)
			smp := sample{Workload: workload, Client: c, Round: r, Records: got.Records, Seconds: got.Seconds, CPU: got.CPUSeconds}
			if err != nil {
				smp.Err = err.Error()
				logf("%s %s round %d: %v", workload, c, r, err)
			} else {
				logf("%s %-20s round %d: %d records in %.2fs = %.0f rec/s, %.2f µs CPU/rec", workload, c, r,
					got.Records, got.Seconds, float64(got.Records)/got.Seconds, got.CPUSeconds*1e6/float64(got.Records))
			}
			res.Samples = append(res.Samples, smp)
		}
	}
}

// runOne runs one contender in a process of its own and reads its result.
func runOne(s runSpec, nodeDir string) (runResult, error) {
	arg, err := json.Marshal(s)
	if err != nil {
		return runResult{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.Window+3*time.Minute)
	defer cancel()
	var cmd *exec.Cmd
	if strings.HasPrefix(s.Client, "kafkajs") {
		cmd = exec.CommandContext(ctx, "node", "consume.js", string(arg))
		cmd.Dir = nodeDir
	} else {
		self, err := os.Executable()
		if err != nil {
			return runResult{}, err
		}
		cmd = exec.CommandContext(ctx, self, "consume", string(arg))
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return runResult{}, fmt.Errorf("%w: %s", err, lastLine(stderr.String()))
	}
	var r runResult
	if err := json.Unmarshal(bytes.TrimSpace(lastLineBytes(stdout.Bytes())), &r); err != nil {
		return runResult{}, fmt.Errorf("result %q: %w", stdout.String(), err)
	}
	if r.Records == 0 || r.Seconds <= 0 {
		return r, errors.New("no record handled")
	}
	return r, nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func lastLineBytes(b []byte) []byte { return []byte(lastLine(string(b))) }

// seed (re)creates topic with 6 partitions and writes n records of 1 KiB
// random (incompressible) values over keys distinct keys with franz-go's
// default producer (default batching, linger, compression and partitioner).
func seed(ctx context.Context, brokers []string, topic string, n, keys int) error {
	return seedTopic(ctx, brokers, backlog{Topic: topic, Records: n, Keys: keys, Partitions: partitions, ValueBytes: valueSize})
}

// backlog is a topic seedTopic writes: Records records of ValueBytes over
// Keys distinct keys ("key-<i mod Keys>", partitioned by franz-go's default
// key hash) on Partitions partitions. Values are random bytes
// (incompressible), with Values "letters" random letters a-z (no repeats:
// only an entropy coder shrinks them, to about 5/8), or with Values "events"
// JSON-like order events (fillEvent: field names, words and numbers, which
// compress as real events do). Compression is the producer's batch codec:
// "" for franz-go's default (snappy), or none, gzip, snappy, lz4, zstd.
type backlog struct {
	Topic       string `json:"topic"`
	Records     int    `json:"records"`
	Keys        int    `json:"keys"`
	Partitions  int    `json:"partitions"`
	ValueBytes  int    `json:"value_bytes"`
	Compression string `json:"compression,omitempty"`
	Values      string `json:"values,omitempty"`
}

func codec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "", "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("unknown compression %q", name)
}

// deleteTopic deletes topic and waits (up to 30 s) until its name is free
// (deletion is asynchronous on the broker). A missing topic is no error.
func deleteTopic(ctx context.Context, adm *kadm.Client, topic string) {
	if _, err := adm.DeleteTopic(ctx, topic); err == nil {
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			td, err := adm.ListTopics(ctx, topic)
			if err == nil && !td.Has(topic) {
				break
			}
		}
	}
}

// seedTopic (re)creates b.Topic and writes its records with franz-go's
// default producer but for the codec.
func seedTopic(ctx context.Context, brokers []string, b backlog) error {
	cc, err := codec(b.Compression)
	if err != nil {
		return err
	}
	var written producedBatches
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(b.Topic), kgo.ProducerBatchCompression(cc),
		kgo.UnknownTopicRetries(-1), // a new topic may take a moment to reach the broker's metadata
		kgo.WithHooks(&written))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deleteTopic(ctx, adm, b.Topic)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		resp, err := adm.CreateTopic(ctx, int32(b.Partitions), 1, nil, b.Topic)
		if err == nil && resp.Err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("create %s: %v %v", b.Topic, err, resp.Err)
		}
	}
	logf("seeding %s: %d records of %d B over %d keys, %d partitions, compression %q, values %q",
		b.Topic, b.Records, b.ValueBytes, b.Keys, b.Partitions, b.Compression, b.Values)
	start := time.Now()
	rng := rand.New(rand.NewPCG(uint64(b.Records), uint64(b.Keys)))
	errc := make(chan error, 1)
	for i := 0; i < b.Records; i++ {
		v := make([]byte, b.ValueBytes)
		switch b.Values {
		case "events":
			fillEvent(v, rng, i)
		case "letters":
			for j := range v {
				v[j] = 'a' + byte(rng.UintN(26))
			}
		default:
			for j := 0; j < len(v); j += 8 {
				x := rng.Uint64()
				for k := 0; k < 8 && j+k < len(v); k++ {
					v[j+k] = byte(x >> (8 * k))
				}
			}
		}
		r := &kgo.Record{Key: []byte("key-" + strconv.Itoa(i%b.Keys)), Value: v}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	select {
	case err := <-errc:
		return fmt.Errorf("seed %s: %w", b.Topic, err)
	default:
	}
	st := "-"
	if s := written.c.snapshot(); s != nil {
		st = storedCell(*s)
	}
	logf("seeded %s in %.1fs, written as %s", b.Topic, time.Since(start).Seconds(), st)
	return nil
}

// producedBatches is a kgo.HookProduceBatchWritten counting the batches a
// producer wrote by their codec (a batch that does not shrink is written
// uncompressed whatever the codec asked).
type producedBatches struct{ c batchCounter }

func (p *producedBatches) OnProduceBatchWritten(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.ProduceBatchMetrics) {
	p.c.OnFetchBatchRead(kgo.BrokerMetadata{}, "", 0, kgo.FetchBatchMetrics{
		CompressionType: m.CompressionType, CompressedBytes: m.CompressedBytes, UncompressedBytes: m.UncompressedBytes})
}

func writeResults(dir string, res *results) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644)
}

// The words of fillEvent's values: an online retailer's product
// descriptions, countries, statuses and payment methods.
var (
	eventWords = strings.Fields(`WHITE HANGING HEART T-LIGHT HOLDER REGENCY CAKESTAND 3 TIER JUMBO BAG RED
RETROSPOT PARTY BUNTING LUNCH BAG BLACK SKULL ASSORTED COLOUR BIRD ORNAMENT SET OF 6 SPICE TINS PACK OF 72
CAKE CASES VINTAGE CHRISTMAS GLASS NATURAL SLATE HEART CHALKBOARD HOT WATER BOTTLE KNITTED UNION FLAG
PAPER CHAIN KIT 50'S ALARM CLOCK BAKELIKE PINK GREEN IVORY LANTERN ZINC METAL SIGN HOME SWEET
ROSES TEACUP AND SAUCER DOORMAT FAIRY WOODEN FRAME ANTIQUE POPCORN PLASTERS IN TIN`)
	eventCountries = strings.Fields(`United-Kingdom France Germany EIRE Spain Netherlands Belgium Switzerland
Portugal Australia Norway`)
	eventStatuses = strings.Fields(`PENDING PAID RESERVED SHIPPED DELIVERED CANCELLED`)
	eventPayments = strings.Fields(`card invoice paypal`)
)

// fillEvent fills v with JSON-like order events (an order with its lines,
// customer, country, status and times) from rng, cut to len(v): text that
// compresses as the order system's events do, unlike random bytes or
// letters (repeated field names and words, varying ids, quantities and
// prices). i is the record's index, the order number.
func fillEvent(v []byte, rng *rand.Rand, i int) {
	pick := func(ws []string) string { return ws[rng.IntN(len(ws))] }
	w := func() string { return pick(eventWords) }
	b := make([]byte, 0, len(v)+512)
	for n := 0; len(b) < len(v); n++ {
		b = fmt.Appendf(b, `{"type":"orderPlaced","order_id":"o-%08d-%d","customer_id":"c-%05d","country":"%s",`+
			`"status":"%s","placed_at":"2026-12-%02dT%02d:%02d:%02d.%03dZ","payment":"%s","lines":[`,
			i, n, rng.IntN(5000), pick(eventCountries), pick(eventStatuses), 1+rng.IntN(28), rng.IntN(24), rng.IntN(60),
			rng.IntN(60), rng.IntN(1000), pick(eventPayments))
		for l, lines := 0, 1+rng.IntN(4); l < lines; l++ {
			if l > 0 {
				b = append(b, ',')
			}
			b = fmt.Appendf(b, `{"sku":"%d%c","description":"%s %s %s","quantity":%d,"unit_price":"%d.%02d"}`,
				20000+rng.IntN(3000), 'A'+rng.IntN(4), w(), w(), w(), 1+rng.IntN(24), rng.IntN(20), rng.IntN(100))
		}
		b = append(b, "]}\n"...)
	}
	copy(v, b[:len(v)])
}
