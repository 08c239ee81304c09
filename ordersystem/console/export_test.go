package console

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/ops"
)

// SetNewDLQ replaces the constructor of the console's DLQ tools (ops.NewDLQ),
// for tests that count constructions. Call it before serving.
func (c *Console) SetNewDLQ(f func(group string, opts ...kgo.Opt) (*ops.DLQ, error)) { c.newDLQ = f }
