package processor

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// brokerChild runs an embedded broker in its own process, so that a
// benchmark can measure the memory of the consumer alone. It creates the
// topics of OC_TOPICS ("name:partitions,..."), seeds OC_SEED
// ("topic:records:valueBytes:keys[:compressible]", keys 0 for null keys; see
// seed), prints "ADDRS host:port,..." on stdout and serves
// until its stdin is closed.
func brokerChild() int {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	addrs := c.ListenAddrs()
	// franz-go's default producer (batches of up to 1 MB, snappy, 10ms
	// linger), as a service would write the topic; only the partitioner is
	// manual (seed picks the partitions).
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cl.Close()
	parts := map[string]int32{}
	for _, spec := range strings.Split(os.Getenv("OC_TOPICS"), ",") {
		if spec == "" {
			continue
		}
		name, n, _ := strings.Cut(spec, ":")
		np, _ := strconv.Atoi(n)
		parts[name] = int32(np)
		if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), int32(np), 1, nil, name); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if spec := os.Getenv("OC_SEED"); spec != "" {
		f := strings.Split(spec, ":")
		topic := f[0]
		records, _ := strconv.Atoi(f[1])
		size, _ := strconv.Atoi(f[2])
		keys, _ := strconv.Atoi(f[3])
		compressible := len(f) > 4 && f[4] == "compressible"
		if err := seed(cl, topic, parts[topic], records, size, keys, compressible); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	fmt.Printf("ADDRS %s\n", strings.Join(addrs, ","))
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// seed produces records to topic. Without keys, values are the record
// number padded to size bytes (random letters, or with compressible a run of
// "x") and partitions are taken round-robin. With
// keys, record i has key "k<i mod keys>" and value "<key>:<seq> " (seq
// counting the key's records from 0) padded to size, and its partition is
// the key's hash, as with a producer's default partitioner, so a key's
// records are in one partition in sequence.
func seed(cl *kgo.Client, topic string, partitions int32, records, size, keys int, compressible bool) error {
	errc := make(chan error, 1)
	byKey := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
	// Padding of random letters, different in every record: the
	// producer's snappy cannot shrink them, so their batches are stored
	// uncompressed (a fetch's bytes are what it decodes to). A run of one
	// byte (compressible) lets a fetch of a few MiB of compressed bytes
	// decode to ten times that.
	// A 16 MiB pool of random letters; each record takes a window at a
	// random place, so that windows rarely overlap within a batch.
	rng := rand.New(rand.NewPCG(1, 2))
	pool := make([]byte, 16<<20)
	for i := range pool {
		pool[i] = 'a' + byte(rng.IntN(26))
	}
	randomPad := func(n int) string {
		if compressible {
			return strings.Repeat("x", n)
		}
		at := rng.IntN(len(pool) - n)
		return string(pool[at : at+n])
	}
	for i := range records {
		r := &kgo.Record{Topic: topic}
		var v string
		if keys > 0 {
			k := "k" + strconv.Itoa(i%keys)
			r.Key = []byte(k)
			r.Partition = int32(byKey.Partition(r, int(partitions)))
			v = k + ":" + strconv.Itoa(i/keys) + " "
		} else {
			r.Partition = int32(i) % partitions
			v = strconv.Itoa(i) + " "
		}
		if len(v) < size {
			v += randomPad(size - len(v))
		}
		r.Value = []byte(v)
		cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(context.Background()); err != nil {
		return err
	}
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// benchSeed describes a benchmark's backlog (see seed): records values of
// size bytes over keys keys (0: null keys), compressible or random letters.
type benchSeed struct {
	records, size, keys int
	compressible        bool
}

// benchBroker returns the brokers and the topic of a benchmark: a topic of
// partitions partitions holding the backlog s, written by franz-go's default
// producer. On the embedded broker (the default) the broker runs in a child
// process (brokerChild) and the topic is called name. On the real cluster
// named by ORDERCAST_TEST_BROKERS the topic is "bench-<name>-<pid>-<time>",
// seeded from this process before the measurement, and deleted at the end
// together with the groups the benchmark created (benchGroup): the
// benchmark leaves the cluster's other topics and groups alone.
func benchBroker(b *testing.B, name string, partitions int32, s benchSeed) (addrs []string, topic string) {
	b.Helper()
	compress := ""
	if s.compressible {
		compress = ":compressible"
	}
	addrs = testkafka.Brokers()
	if len(addrs) == 0 {
		c := startChildTB(b, "broker", fmt.Sprintf("OC_TOPICS=%s:%d", name, partitions),
			fmt.Sprintf("OC_SEED=%s:%d:%d:%d%s", name, s.records, s.size, s.keys, compress))
		line, err := c.stdout.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "ADDRS ") {
			b.Fatalf("broker child: %q %v", line, err)
		}
		return strings.Split(strings.TrimSpace(strings.TrimPrefix(line, "ADDRS ")), ","), name
	}
	topic = fmt.Sprintf("bench-%s-%d-%d", name, os.Getpid(), time.Now().UnixNano())
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, partitions, testkafka.ReplicationFactor(b), nil, topic); err != nil {
		b.Fatal(err)
	}
	groupsBefore := len(benchGroups())
	b.Cleanup(func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
		if err != nil {
			b.Error(err)
			return
		}
		defer cl.Close()
		adm := kadm.NewClient(cl)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if groups := benchGroups()[groupsBefore:]; len(groups) > 0 {
			if _, err := adm.DeleteGroups(ctx, groups...); err != nil {
				b.Errorf("deleting the benchmark's groups: %v", err)
			}
		}
		if _, err := adm.DeleteTopics(ctx, topic); err != nil {
			b.Errorf("deleting %s: %v", topic, err)
		}
	})
	testkafka.WaitFor(b, time.Minute, "the topic's leaders", func() bool {
		md, err := adm.Metadata(ctx, topic)
		if err != nil {
			return false
		}
		t, ok := md.Topics[topic]
		if !ok || t.Err != nil || len(t.Partitions) != int(partitions) {
			return false
		}
		for _, p := range t.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return false
			}
		}
		return true
	})
	if err := seed(cl, topic, partitions, s.records, s.size, s.keys, s.compressible); err != nil {
		b.Fatal(err)
	}
	cl.Close()
	runtime.GC()
	debug.FreeOSMemory() // the seeding's garbage is not the consumer's
	return addrs, topic
}

// brokerChildProc is a broker child with pipes on its stdin and stdout.
type brokerChildProc struct {
	stdout *bufio.Reader
	errBuf bytes.Buffer // stderr, read only after the process exited
}

// startChildTB starts a child that serves until its stdin is closed (at the
// end of the test or benchmark).
func startChildTB(tb testing.TB, role string, env ...string) *brokerChildProc {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+role), env...)
	c := &brokerChildProc{}
	cmd.Stderr = &c.errBuf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	c.stdout = bufio.NewReader(out)
	tb.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return c
}
