package processor

// fifo is a first-in first-out queue whose array is reused: taking from
// the front of a slice and appending at its back would allocate a new array
// every few turns of the lanes. Not safe for concurrent use.
type fifo[T any] struct {
	buf  []T
	head int // buf[head:] are queued
}

func (q *fifo[T]) len() int { return len(q.buf) - q.head }

// first returns the first element without taking it; q is not empty.
func (q *fifo[T]) first() T { return q.buf[q.head] }

// at returns the i-th queued element (0 is first) without taking it.
func (q *fifo[T]) at(i int) T { return q.buf[q.head+i] }

func (q *fifo[T]) push(x T) {
	if len(q.buf) == cap(q.buf) && q.head > 0 && q.head >= len(q.buf)/2 {
		// The taken front is at least half the array: moved down, the
		// queued elements make room (a copy of at most as many elements
		// as were pushed since the last one).
		n := copy(q.buf, q.buf[q.head:])
		clear(q.buf[n:])
		q.buf, q.head = q.buf[:n], 0
	}
	q.buf = append(q.buf, x)
}

// pop takes the first element; q is not empty.
func (q *fifo[T]) pop() T {
	var zero T
	x := q.buf[q.head]
	q.buf[q.head] = zero
	q.head++
	if q.head == len(q.buf) {
		q.buf, q.head = q.buf[:0], 0
	}
	return x
}

func (q *fifo[T]) reset() {
	clear(q.buf)
	q.buf, q.head = q.buf[:0], 0
}

// filter keeps, in order, the queued elements for which keep returns true,
// and drops the others.
func (q *fifo[T]) filter(keep func(T) bool) {
	kept := q.buf[:0]
	for _, x := range q.buf[q.head:] {
		if keep(x) {
			kept = append(kept, x)
		}
	}
	clear(q.buf[len(kept):])
	q.buf, q.head = kept, 0
}
