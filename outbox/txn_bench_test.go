package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/dbtest"
	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/outbox"
	"github.com/ordercast/ordercast/sqldb"
)

// BenchmarkTxnRelay measures the exactly-once relay's throughput: each
// iteration enqueues 1,000 rows (not timed) and times until the relay has
// published and marked them all, in transactions of the default batch size.
// rows/s is the figure. The embedded broker and SQLite by default;
// ORDERCAST_TEST_BROKERS and ORDERCAST_BENCH_POSTGRES=1 (with
// ORDERCAST_TEST_POSTGRES) for Kafka and PostgreSQL.
func BenchmarkTxnRelay(b *testing.B) {
	for _, batch := range []int{outbox.DefaultMaxBatch, 20} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { benchTxnRelay(b, batch) })
	}
}

func benchTxnRelay(b *testing.B, batch int) {
	const rows = 1000
	addrs := testkafka.Cluster(b, map[string]int32{"t": 3})
	var db *sqldb.DB
	if os.Getenv("ORDERCAST_BENCH_POSTGRES") != "" {
		db = dbtest.Postgres(b, dbtest.Runtime)
	} else {
		db = dbtest.SQLite(b, dbtest.Runtime)
	}
	r, err := outbox.NewTransactionalRelay(db, "bench", []kgo.Opt{kgo.SeedBrokers(addrs...)},
		outbox.Logger(quiet), outbox.PollInterval(5*time.Millisecond), outbox.MaxBatch(batch))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	seq := 0
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			for j := 0; j < rows; j++ {
				seq++
				m := outbox.Message{Topic: "t", Key: []byte(fmt.Sprint("k", seq%16)), Value: []byte(fmt.Sprintf(`{"seq":%d}`, seq))}
				if err := outbox.Enqueue(ctx, tx, db, m); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		r.Notify()
		for {
			n, err := outbox.Pending(ctx, db)
			if err != nil {
				b.Fatal(err)
			}
			if n == 0 && r.Stats().Published == int64(seq) {
				break
			}
			if time.Since(start) > time.Minute {
				b.Fatalf("%d rows still pending after a minute", n)
			}
			time.Sleep(time.Millisecond)
		}
		total += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(float64(rows*b.N)/total.Seconds(), "rows/s")
	if st := r.Stats(); st.Aborted != 0 {
		b.Fatalf("stats %+v: aborted transactions", st)
	}
}
