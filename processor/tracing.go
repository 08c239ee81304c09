package processor

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Tracer is told of each handler attempt, each retry-topic or DLQ write and
// each offset commit, to trace them; package processor/proctrace implements
// it with OpenTelemetry. Without Tracing the runtime calls none of it and
// links no tracing library. Its methods are called from the runtime's
// workers and committer concurrently and must not block.
type Tracer interface {
	// Attempt is called before each handler call of rec (the record as the
	// handler sees it: a retry-topic record shows its original topic,
	// partition and offset), attempt counting from 1 over every hop of the
	// record. The handler gets the returned context; done is called with
	// the handler's result when it returns (a panic as its error).
	Attempt(ctx context.Context, group string, rec *kgo.Record, attempt int) (hctx context.Context, done func(error))
	// Batch is called before each BatchHandler call with its records (each
	// at its first attempt; a failed batch's records are then handled one
	// at a time, each through Attempt); done gets the call's result.
	Batch(ctx context.Context, group string, recs []*kgo.Record) (hctx context.Context, done func(error))
	// Forward is called before rec is written to target, a retry topic or
	// the DLQ (dlq true), cause being the handler's last error; the write is
	// produced with the returned context and done gets its result. A
	// TxnProcessor calls it for each DLQ write inside its transaction: done
	// gets the write's result; whether the transaction committed is the
	// next Committed's error.
	Forward(ctx context.Context, group string, rec *kgo.Record, target string, dlq bool, cause error) (wctx context.Context, done func(error))
	// Committed is called after an offset commit of the group with the
	// offsets sent (topic, partition, offset) and the commit's error. A
	// TxnProcessor calls it after each transaction that tried to commit,
	// with the transaction's offsets (the offset after each partition's
	// last record) and an error when it did not commit; an aborted
	// transaction is not a commit and is not reported.
	Committed(group string, offsets map[string]map[int32]int64, err error)
	// Outputs is called with the records a TxnHandler returned for the
	// attempt whose context is hctx, before the runtime produces them in its
	// transaction (with a context of its own): the tracer may add headers.
	Outputs(hctx context.Context, outs []*kgo.Record)
}

// Tracing has the runtime tell t of each handler attempt, retry-topic or
// DLQ write and offset commit (see Tracer). Default none.
func Tracing(t Tracer) TxnOpt { return bothOpt(func(c *cfg) { c.tracer = t }) }
