package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/ordercast/ordercast/processor"
)

// ErrorClasses names every class the runtime gives a handler error that has
// no class of its own.
func TestErrorClassesCoverRuntime(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("handler: %w", context.DeadlineExceeded),
		processor.Permanent(errors.New("bad")),
		errors.New("broker down"),
	} {
		if c := processor.ErrorClass(err); !slices.Contains(ErrorClasses, c) {
			t.Errorf("processor.ErrorClass(%v) = %q, not in ErrorClasses %v", err, c, ErrorClasses)
		}
	}
}
