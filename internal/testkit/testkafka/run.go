package testkafka

import (
	"testing"

	"github.com/ordercast/ordercast/processor/processortest"
)

// Runner is [processortest.Runner]: anything with a blocking Run that
// returns when its context ends, such as *processor.Processor or
// *processor.TxnProcessor.
type Runner = processortest.Runner

// Run is [processortest.Run]: it starts r.Run in a goroutine and returns a
// stop function that cancels it and waits for it to return (at most 30s),
// failing the test if Run returned an error or did not return. stop is
// idempotent and also runs at test cleanup.
func Run(t testing.TB, r Runner) (stop func()) {
	t.Helper()
	return processortest.Run(t, r)
}
