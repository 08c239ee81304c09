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
	"strconv"
	"strings"
	"testing"
	"time"

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
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(100000))
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
	// Incompressible padding (random letters, different in every record),
	// as real payloads are closer to that than to a run of one byte, which
	// would let a fetch of a few MiB of compressed bytes decode to hundreds
	// of MiB.
	rng := rand.New(rand.NewPCG(1, 2))
	randomPad := func(n int) string {
		if compressible {
			return strings.Repeat("x", n)
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = 'a' + byte(rng.IntN(26))
		}
		return string(b)
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

// brokerProcess starts brokerChild and returns its addresses; the broker
// stops at the end of the test or benchmark.
func brokerProcess(tb testing.TB, topics, seedSpec string) []string {
	tb.Helper()
	c := startChildTB(tb, "broker", "OC_TOPICS="+topics, "OC_SEED="+seedSpec)
	line, err := c.stdout.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ADDRS ") {
		tb.Fatalf("broker child: %q %v", line, err)
	}
	return strings.Split(strings.TrimSpace(strings.TrimPrefix(line, "ADDRS ")), ",")
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
